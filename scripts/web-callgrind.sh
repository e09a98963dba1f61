#!/usr/bin/env bash
# Instructions per request of one colorweb arrangement under callgrind: repeatable whatever
# else runs on the machine, unlike `sfs-bench web`'s wall-clock and CPU-time figures.
#
#   scripts/web-callgrind.sh COLORWEB MODE [OUT] [CONNECTIONS] [REQUESTS]
#
# MODE: `uni` (also what each of N copies runs: --uni --reuseport), `mp1` (--cpus 1: the
# multiprocessor runtime with one worker) or `mp2`. The server serves 2000 files of 4 KiB (as
# `sfs-bench web`); a closed-loop client (CONNECTIONS keep-alive connections, default 16, each
# sending its next GET when the last answer is in) warms the cache with 130 requests per
# connection, the counters are zeroed, then REQUESTS per connection (default 500) are counted
# and dumped to OUT.<pid>.cg.1 (default /tmp/colorweb-MODE). Prints instructions per request,
# in all and in the runtime alone (libcolor, crossbeam, mio, the clock reads and the worker
# loop: colorweb's own path varies by a few percent between runs with the timing of its 1 s
# cache re-checks and malloc's state, the runtime's does not).
# Needs valgrind (callgrind_control, callgrind_annotate) and python3. Not used by .ci/run.
set -euo pipefail

bin=$1
mode=$2
out=${3:-/tmp/colorweb-$mode}
conns=${4:-16}
reqs=${5:-500}
case $mode in
uni) flags=(--uni --reuseport) ;;
mp1) flags=(--cpus 1) ;;
mp2) flags=(--cpus 2) ;;
*)
    echo "mode: uni, mp1 or mp2" >&2
    exit 2
    ;;
esac

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/root"
python3 - "$work/root" <<'EOF'
import sys
for i in range(2000):
    open(f"{sys.argv[1]}/f{i}", "wb").write(bytes((i * 31 + j) % 256 for j in range(4096)))
EOF
cat >"$work/client.py" <<'EOF'
import selectors, socket, sys
port, conns, reqs = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
sel, state, done = selectors.DefaultSelector(), {}, 0
def send(s, st):
    st["i"] = (st["i"] + 7919) % 2000
    s.sendall(b"GET /f%d HTTP/1.1\r\nHost: x\r\n\r\n" % st["i"])
for c in range(conns):
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    state[s] = {"i": c * 131, "left": reqs, "buf": b""}
    s.setblocking(False)
    sel.register(s, selectors.EVENT_READ)
for s, st in state.items():
    send(s, st)
while state:
    for key, _ in sel.select():
        s = key.fileobj
        st = state[s]
        data = s.recv(65536)
        if not data:
            sys.exit("server closed a connection")
        st["buf"] += data
        while True:
            b = st["buf"]
            h = b.find(b"\r\n\r\n")
            if h < 0:
                break
            head = b[:h].decode()
            if not head.startswith("HTTP/1.1 200"):
                sys.exit("not a 200: " + head.splitlines()[0])
            n = next(int(l.split(":", 1)[1]) for l in head.split("\r\n")[1:]
                     if l.lower().startswith("content-length:"))
            if len(b) < h + 4 + n:
                break
            st["buf"] = b[h + 4 + n:]
            done += 1
            st["left"] -= 1
            if st["left"] > 0:
                send(s, st)
            else:
                sel.unregister(s)
                s.close()
                del state[s]
                break
print(done)
EOF

port=$((20000 + RANDOM % 20000))
valgrind --tool=callgrind --callgrind-out-file="$out.%p.cg" "$bin" --root "$work/root" \
    --listen "127.0.0.1:$port" "${flags[@]}" --max-connections 4096 >"$out.log" 2>&1 &
vg=$!
for _ in $(seq 300); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then break; fi
    sleep 0.2
done
python3 "$work/client.py" "$port" "$conns" 130 >/dev/null
callgrind_control -z "$vg" >/dev/null 2>&1
requests=$(python3 "$work/client.py" "$port" "$conns" "$reqs")
callgrind_control -d "$vg" >/dev/null 2>&1
kill -TERM "$vg"
wait "$vg" || true
dump="$out.$vg.cg.1"
callgrind_annotate --inclusive=no --threshold=100 --auto=no "$dump" 2>/dev/null |
    python3 -c '
import re, sys
mode, requests = sys.argv[1], int(sys.argv[2])
runtime = re.compile(r"libcolor::(?!cell::)|crossbeam|Timespec|Instant|clock_gettime|"
                     r"__rust_begin_short_backtrace|Runtime::run|mio::|vtable\.shim|^calloc$|epoll")
total, own = 0, 0
for line in sys.stdin:
    m = re.match(r"\s*([\d,]+) \(\s*[\d.]+%\)\s+(.*)$", line)
    if not m:
        continue
    n, name = int(m.group(1).replace(",", "")), m.group(2)
    if name == "PROGRAM TOTALS":
        total = n
        continue
    fn = re.sub(r" \[.*\]$", "", name.split(":", 1)[-1])
    if runtime.search(fn) and n < total * 0.99:
        own += n
print(f"{mode}: {requests} requests, {total / requests:.0f} instructions per request, "
      f"{own / requests:.0f} of them the runtime'\''s")
' "$mode" "$requests"
echo "profile: $dump"
