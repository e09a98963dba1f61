#!/usr/bin/env bash
# Everyday commands on a work tree through `sfs mount` over a long link, as a user would run
# them, each timed. The link is a user-space TCP relay on 127.0.0.1 that holds every chunk for
# ONE_WAY_MS in each direction (the kernel here has no netem); sfsd advertises the relay's port
# as its location, so the mount's one stream goes through it. The work tree is a clone of this
# repository made on the server's disk, and `git status` run there once (so no file is racily
# clean when the trial starts).
#
#   sudo scripts/long-link-trial.sh commands [ONE_WAY_MS]   # git status x2, grep -r x2, ...
#   sudo scripts/long-link-trial.sh remount [ONE_WAY_MS]    # git status, remount, git status
#   sudo scripts/long-link-trial.sh edit [ONE_WAY_MS]       # edit, git add, status, commit
#
# `remount` also counts the READs each mount sent (git reads a file whole when its stat data,
# st_ino among them, differs from its index). Default ONE_WAY_MS: 25 (a 50 ms round trip).
# Needs root (sfsd), fusermount3, git and python3. SFSD and SFS name the binaries (default
# target/release).
set -euo pipefail

MODE=${1:?commands, remount or edit}
DELAY=${2:-25}
REPO=$(cd "$(dirname "$0")/.." && pwd)
SFSD=${SFSD:-$REPO/target/release/sfsd}
SFS=${SFS:-$REPO/target/release/sfs}
W=$(mktemp -d /tmp/sfs-long-link.XXXXXX)
PIDS=()
cleanup() {
    fusermount3 -u "$W/mnt" 2>/dev/null || true
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$W"
}
trap cleanup EXIT

cat > "$W/relay.py" <<'EOF'
# relay.py LISTEN_PORT TARGET_PORT ONE_WAY_MS: each chunk held ONE_WAY_MS each way, in order
import asyncio, sys, time
LP, TP, D = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]) / 1000
async def pipe(r, w):
    q = asyncio.Queue()
    async def reader():
        while True:
            b = await r.read(65536)
            await q.put((time.monotonic() + D, b))
            if not b:
                return
    async def writer():
        while True:
            t, b = await q.get()
            if t > time.monotonic():
                await asyncio.sleep(t - time.monotonic())
            if not b:
                try:
                    w.write_eof()
                except OSError:
                    pass
                return
            w.write(b)
            await w.drain()
    await asyncio.gather(reader(), writer())
async def handle(cr, cw):
    sr, sw = await asyncio.open_connection("127.0.0.1", TP)
    try:
        await asyncio.gather(pipe(cr, sw), pipe(sr, cw))
    except OSError:
        pass
    finally:
        cw.close()
        sw.close()
async def main():
    s = await asyncio.start_server(handle, "127.0.0.1", LP)
    async with s:
        await s.serve_forever()
asyncio.run(main())
EOF

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
RELAY=$(free_port)
SERVER=$(free_port)
mkdir -p "$W/export" "$W/state" "$W/mnt" "$W/home"
git clone -q "$REPO" "$W/export/repo"
sleep 1.1
git -C "$W/export/repo" status --short > /dev/null
KEY=$(HOME=$W/home "$SFS" keygen --force --out "$W/home/key" | tail -1)
echo "trial $KEY 0 0" > "$W/users"
"$SFSD" serve --state "$W/state" --export "$W/export" --users "$W/users" \
    --listen "127.0.0.1:$SERVER" --location "127.0.0.1%$RELAY" > "$W/sfsd.out" 2> "$W/sfsd.err" &
PIDS+=($!)
python3 "$W/relay.py" "$RELAY" "$SERVER" "$DELAY" &
PIDS+=($!)
NAME=
for _ in $(seq 50); do
    NAME=$(grep -o '@[^ ]*' "$W/sfsd.out" | head -1 || true)
    [ -n "$NAME" ] && break
    sleep 0.1
done
[ -n "$NAME" ] || { echo "sfsd did not start: $(cat "$W/sfsd.err")" >&2; exit 1; }

mount_it() {
    SFS_LOG=sfs=debug "$SFS" --identity "$W/home/key" --user trial mount -f "$NAME" "$W/mnt" \
        --log "$W/mount$1.log" > /dev/null &
    PIDS+=($!)
    for _ in $(seq 100); do mountpoint -q "$W/mnt" && return; sleep 0.1; done
    echo "the mount did not come up" >&2
    exit 1
}
# Runs $1 in the work tree and prints its time and the requests the mount sent for it (the
# mount's log is $W/mount$2.log), most frequent first.
timed() {
    local s e from asked
    from=$(wc -l < "$W/mount$2.log")
    s=$(date +%s%N)
    (cd "$W/mnt/repo" && eval "$1") > /dev/null 2>&1 || true
    e=$(date +%s%N)
    asked=$(tail -n +"$((from + 1))" "$W/mount$2.log" | grep -oE 'request proc=[A-Za-z]+$' \
        | cut -d= -f2 | sort | uniq -c | sort -rn | awk '{printf "%s %s, ", $2, $1}' || true)
    printf '%-36s %8.2f s   %s\n' "$1" "$(echo "($e - $s) / 1000000000" | bc -l)" \
        "${asked:-no request}"
}

echo "long link: $((2 * DELAY)) ms round trip, this repository on the server"
case $MODE in
commands)
    mount_it 1
    for c in "git status --short" "git status --short" "grep -r fn_does_not_exist ." \
        "grep -r fn_does_not_exist ." "git log --oneline -3" "git diff --stat" "ls -lR" "ls -lR"; do
        timed "$c" 1
    done
    ;;
remount)
    for round in 1 2; do
        mount_it "$round"
        # Objects met in another order than by the command: node ids differ between mounts.
        (cd "$W/mnt/repo" && ls -R src > /dev/null 2>&1) || true
        printf 'mount %s: ' "$round"
        timed "git status --short" "$round"
        echo "  READs sent: $(grep -c 'request proc=Read$' "$W/mount$round.log" || true)"
        fusermount3 -u "$W/mnt"
        sleep 0.5
    done
    ;;
edit)
    # A change committed the way a user makes one: every git command that writes the index
    # makes index.lock and renames it over the index.
    mount_it 1
    timed "git status --short" 1
    for c in "echo change >> README.md" "git add README.md" "git status --short" \
        "git -c user.name=t -c user.email=t@t commit -qm change" "git status --short" \
        "git status --short"; do
        timed "$c" 1
    done
    ;;
*)
    echo "unknown mode $MODE (commands, remount or edit)" >&2
    exit 2
    ;;
esac
