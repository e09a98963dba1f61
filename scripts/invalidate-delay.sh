#!/usr/bin/env bash
# Measures how long a change made through one sfsd instance takes to reach the kernel cache of
# a FUSE mount of another instance, with the peer channel (`--peer`) and without it, side by
# side in one run. Two sfsd instances share one state directory and one exported directory
# (the local backend: the channel is the same in front of an NFS server), each mounted with
# `sfs mount` under its own name; mount B stats a file (its attributes now cached for the
# lease), mount A rewrites it with a new size, and B stats until it sees the new size.
#
#   sudo scripts/invalidate-delay.sh [ROUNDS]     # default 20 rounds per mode
#
# Needs root (sfsd acts as users; FUSE mounts) and the kernel's fuse module with fusermount3.
# SFSD and SFS name the binaries (default target/release, else target/debug).
set -euo pipefail

ROUNDS=${1:-20}
LEASE=10 # without the channel, B sees the change only when its lease (this) ends
REPO=$(cd "$(dirname "$0")/.." && pwd)
bin() {
    local b=$REPO/target/release/$1
    [ -x "$b" ] || b=$REPO/target/debug/$1
    echo "$b"
}
SFSD=${SFSD:-$(bin sfsd)}
SFS=${SFS:-$(bin sfs)}
[ "$(id -u)" = 0 ] || {
    echo "invalidate-delay: needs root (FUSE mounts, sfsd acting as users)" >&2
    exit 1
}

T=$(mktemp -d /tmp/sfs-inval.XXXXXX)
PIDS=()
cleanup() {
    for m in "$T"/mnt-*; do [ -d "$m" ] && "$SFS" umount "$m" >/dev/null 2>&1 || true; done
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$T"
}
trap cleanup EXIT

mkdir -p "$T/export"
"$SFS" keygen --out "$T/id" >"$T/keygen.out" 2>&1
echo "root $(tail -1 "$T/keygen.out") 0 0" >"$T/users"
echo "v1" >"$T/export/f"

# start_sfsd INDEX IP PORT [peer args...]: sets SERVED to the name it serves (not in a
# subshell: its pid must reach PIDS).
start_sfsd() {
    local i=$1 ip=$2 port=$3
    shift 3
    "$SFSD" serve --state "$T/state" --export "$T/export" --users "$T/users" \
        --listen "$ip:$port" --location "$ip%$port" --lease-secs $LEASE "$@" \
        >"$T/sfsd-$i.out" 2>"$T/sfsd-$i.log" &
    PIDS+=($!)
    for _ in $(seq 300); do
        grep -q '^sfsd: serving' "$T/sfsd-$i.out" && break
        sleep 0.1
    done
    SERVED=$(awk '/^sfsd: serving/ {print $3}' "$T/sfsd-$i.out")
}

measure() { # MODE: peers | none
    local mode=$1 extra_a=() extra_b=()
    if [ "$mode" = peers ]; then
        extra_a=(--peer-listen 127.0.0.2:4305 --peer 127.0.0.3:4305)
        extra_b=(--peer-listen 127.0.0.3:4305 --peer 127.0.0.2:4305)
    fi
    local na nb
    start_sfsd a 127.0.0.2 4304 "${extra_a[@]}"
    na=$SERVED
    start_sfsd b 127.0.0.3 4304 "${extra_b[@]}"
    nb=$SERVED
    mkdir -p "$T/mnt-a" "$T/mnt-b"
    "$SFS" mount --identity "$T/id" --user root --log "$T/mount-a.log" "$na" "$T/mnt-a" >/dev/null
    "$SFS" mount --identity "$T/id" --user root --log "$T/mount-b.log" "$nb" "$T/mnt-b" >/dev/null
    python3 - "$T/mnt-a/f" "$T/mnt-b/f" "$ROUNDS" "$mode" "$LEASE" <<'EOF'
import os, sys, time
a, b, rounds, mode, lease = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
if mode == "none":
    rounds = min(rounds, 2)  # each waits for a lease to end
delays = []
for r in range(rounds):
    os.stat(b)  # cached in B's kernel for the lease from here
    size = 100 + r + (rounds * 10 if mode == "none" else 0)
    with open(a, "wb") as f:
        f.write(b"x" * size)
    t = time.monotonic()
    while os.stat(b).st_size != size:
        if time.monotonic() - t > lease + 5:
            break
        time.sleep(0.0002)
    delays.append((time.monotonic() - t) * 1000)
delays.sort()
med = delays[len(delays) // 2]
print(f"{mode:6} rounds {len(delays):3}  median {med:9.2f} ms  min {delays[0]:9.2f} ms  max {delays[-1]:9.2f} ms")
print(f"RESULT {mode} {med:.3f}")
EOF
    "$SFS" umount "$T/mnt-a" >/dev/null 2>&1 || true
    "$SFS" umount "$T/mnt-b" >/dev/null 2>&1 || true
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait "${PIDS[@]}" 2>/dev/null || true
    PIDS=()
}

echo "change through instance A, seen by a FUSE mount of instance B (stat polled every 0.2 ms)"
measure peers | tee "$T/peers.txt" | grep -v RESULT
measure none | tee "$T/none.txt" | grep -v RESULT
p=$(awk '/RESULT/ {print $3}' "$T/peers.txt")
n=$(awk '/RESULT/ {print $3}' "$T/none.txt")
python3 -c "print(f'without the channel / with it: {float($n) / float($p):.0f}x longer (lease {$LEASE} s)')"
