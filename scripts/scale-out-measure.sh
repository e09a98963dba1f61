#!/usr/bin/env bash
# Measures the scale-out stack (scripts/scale-out.sh) through one sfsd instance and through
# two side by side in one run: bulk reads (`sfs get` of SIZE_MB files) and a metadata workload
# (`sfs put -r` and `sfs rm -r` of FILES small files), with the CPU each layer spent (sfsd,
# NFS-Ganesha, the Gluster daemons: bricks, self-heal, glusterd; and the sfs clients) per GB
# or per file. Brings the stack up in a private SCALE_DIR and takes it down at the end.
#
#   cargo build --release -p sfsd -p sfs
#   sudo scripts/scale-out-measure.sh          # SIZE_MB (256), FILES (300) from the environment
#
# Everything runs on this one machine: clients, both instances, Ganesha and all three bricks
# share its CPUs, so the two-instance figures show what a second instance costs and whether
# it adds anything here, not what two machines would give.
set -euo pipefail

SIZE_MB=${SIZE_MB:-256}
FILES=${FILES:-300}
REPO=$(cd "$(dirname "$0")/.." && pwd)
SFS=${SFS:-$REPO/target/release/sfs}
export SFSD=${SFSD:-$REPO/target/release/sfsd}
[ -x "$SFS" ] && [ -x "$SFSD" ] || {
    echo "measure: build first: cargo build --release -p sfsd -p sfs" >&2
    exit 1
}
[ "$(id -u)" = 0 ] || {
    echo "measure: needs root (the stack does)" >&2
    exit 1
}
M=$(mktemp -d /var/tmp/sfs-measure.XXXXXX)
export SCALE_DIR=$M/stack
trap '"$REPO/scripts/scale-out.sh" down >/dev/null || true; rm -rf "$M"' EXIT
"$SFS" keygen --out "$M/id" >"$M/keygen.out" 2>&1
echo "bench $(tail -1 "$M/keygen.out") 1001 1001" >"$M/users"
USERS=$M/users "$REPO/scripts/scale-out.sh" up

SFS_IDENTITY=$M/id SFS_USER=bench python3 - "$SFS" "$M" "$SIZE_MB" "$FILES" <<'EOF'
import glob, os, resource, subprocess, sys, time

sfs, m, size_mb, files = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
scale = os.path.join(m, "stack")
names = dict(l.split() for l in open(os.path.join(scale, "names")))
name = names["name"]
host = name[1:].split(",")[0].split("%")[0]
tick = os.sysconf("SC_CLK_TCK")

def at(i, *args):
    """`sfs ARGS` sent to instance i: the one name resolved to that instance's address alone,
    in a private /etc/hosts (LOGIN signs the name's HOSTID, so there is no other name)."""
    hosts = os.path.join(m, f"hosts-{i}")
    with open(hosts, "w") as f:
        f.write(f"127.0.0.1 localhost\n{names[str(i)]} {host}\n")
    return ["unshare", "-m", "--propagation", "private", "sh", "-c",
            f"mount --bind {hosts} /etc/hosts && exec \"$@\"", "sh", sfs, *args]

def pid_file(p):
    try:
        return int(open(p).read().strip())
    except (OSError, ValueError):
        return None

def layers():
    """pid lists of each layer (read anew: a brick's pid may change)."""
    gluster = [pid_file(os.path.join(scale, "run/glusterd.pid"))]
    gluster += [pid_file(p) for p in glob.glob("/run/gluster/**/*.pid", recursive=True)]
    gluster += [pid_file(p) for p in glob.glob("/var/lib/glusterd/vols/*/run/*.pid")]
    return {
        "sfsd": [pid_file(p) for p in glob.glob(os.path.join(scale, "run/sfsd-*.pid"))],
        "ganesha": [pid_file(os.path.join(scale, "run/ganesha.pid"))],
        "gluster": sorted({p for p in gluster if p}),
    }

def cpu_of(pid):
    try:
        f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) / tick
    except (OSError, IndexError):
        return 0.0

def snapshot():
    snap = {k: sum(cpu_of(p) for p in v if p) for k, v in layers().items()}
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    snap["client"] = ru.ru_utime + ru.ru_stime
    return snap

def run_all(cmds):
    """Runs the commands at once; returns (seconds, CPU-seconds per layer)."""
    before, t = snapshot(), time.monotonic()
    procs = [subprocess.Popen(c, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for c in cmds]
    for p, c in zip(procs, cmds):
        _, err = p.communicate()
        if p.returncode != 0:
            sys.exit(f"failed: {' '.join(c)}: {err.decode()}")
    secs = time.monotonic() - t
    after = snapshot()
    return secs, {k: after[k] - before[k] for k in after}

big = os.path.join(m, "big")
with open(big, "wb") as f:
    for _ in range(size_mb):
        f.write(os.urandom(1 << 20))
gb = size_mb / 1024
cols = ["sfsd", "ganesha", "gluster", "client"]
print(f"\n{'workload':34} {'s':>7} {'rate':>12}   CPU " + " ".join(f"{c:>8}" for c in cols))

def row(label, secs, cpu, amount, unit, per):
    rate = amount / secs
    scale = 1000 if per == "ms/f" else 1
    print(f"{label:34} {secs:7.2f} {rate:8.2f} {unit:4}  {per:4} "
          + " ".join(f"{cpu[c] * scale / amount:8.3f}" for c in cols))
    return rate

secs, cpu = run_all([at(1, "put", big, f"{name}/big1")])
row(f"put {size_mb} MiB, instance 1", secs, cpu, gb, "GB/s", "s/GB")
run_all([at(2, "put", big, f"{name}/big2")])
out = lambda i: os.path.join(m, f"out{i}")
# Once to warm every cache on the way, then measured.
run_all([at(1, "get", f"{name}/big1", out(1)), at(2, "get", f"{name}/big2", out(2))])
secs, cpu = run_all([at(1, "get", f"{name}/big1", out(1))])
one = row("get, 1 client, instance 1", secs, cpu, gb, "GB/s", "s/GB")
secs, cpu = run_all([at(1, "get", f"{name}/big1", out(1)),
                     at(1, "get", f"{name}/big2", out(2))])
same = row("get, 2 clients, both instance 1", secs, cpu, 2 * gb, "GB/s", "s/GB")
secs, cpu = run_all([at(1, "get", f"{name}/big1", out(1)),
                     at(2, "get", f"{name}/big2", out(2))])
two = row("get, 2 clients, instances 1 and 2", secs, cpu, 2 * gb, "GB/s", "s/GB")

for d in ("m1", "m2"):
    os.makedirs(os.path.join(m, d))
    for i in range(files // 2):
        with open(os.path.join(m, d, f"f{i}"), "wb") as f:
            f.write(b"x" * 1024)
src = lambda d: os.path.join(m, d)
secs, cpu = run_all([at(1, "put", "-r", src("m1"), f"{name}/m1"),
                     at(1, "put", "-r", src("m2"), f"{name}/m2")])
mone = row(f"put -r {files} x 1 KiB, instance 1", secs, cpu, files, "f/s", "ms/f")
run_all([at(1, "rm", "-r", f"{name}/m1"), at(1, "rm", "-r", f"{name}/m2")])
secs, cpu = run_all([at(1, "put", "-r", src("m1"), f"{name}/m1"),
                     at(2, "put", "-r", src("m2"), f"{name}/m2")])
mtwo = row(f"put -r {files} x 1 KiB, instances 1+2", secs, cpu, files, "f/s", "ms/f")
secs, cpu = run_all([at(1, "rm", "-r", f"{name}/m1"), at(2, "rm", "-r", f"{name}/m2")])
row(f"rm -r {files} files, instances 1+2", secs, cpu, files, "f/s", "ms/f")
print(f"two instances / one, 2 clients reading: {two / same:.2f}x"
      f" (one client on one instance: {one:.2f} GB/s)")
print(f"two instances / one, 2 clients creating files: {mtwo / mone:.2f}x")
opened = [open(os.path.join(scale, f"logs/sfsd-{i}.log")).read().count("connection opened")
          for i in (1, 2)]
print(f"connections served: instance 1 {opened[0]}, instance 2 {opened[1]}")
EOF
