#!/usr/bin/env bash
# Measures the scale-out stack (scripts/scale-out.sh: a GlusterFS volume replicated over three
# bricks, NFS-Ganesha's Gluster FSAL, sfsd in front) through one sfsd instance and through two,
# side by side in one run, with the CPU each layer spends (sfsd, NFS-Ganesha, the Gluster
# daemons: glusterd, three bricks, self-heal) per byte or per file:
#
#  - Figure 10's read workload: `sfs-bench read --backend-url` against the stack's Ganesha
#    export: `uni` and `mp` (one sfsd instance) and `ncopy` (two sfsd instances, one CPU each,
#    the clients split across them) in front of the one volume, with `--watch` reporting
#    Ganesha's and Gluster's CPU per GB beside sfsd's;
#  - a metadata workload through the stack's own two instances (one state directory, the peer
#    channel): two `sfs` clients each creating FILES/2 small files (`put -r`), asking each
#    file's attributes (`sfs stat` of every file: a LOOKUP and a GETATTR each) and removing
#    them (`rm -r`), both at instance 1 or one at each instance, alternating, REPS times;
#    medians.
#
#   cargo build --release -p sfsd -p sfs -p sfs-bench
#   sudo scripts/scale-out-measure.sh    # READ_MB (128), FILES (300), REPS (3)
#
# Everything runs on this one machine: clients, both instances, Ganesha and all three bricks
# share its CPUs, so the two-instance figures show what a second instance costs and whether it
# adds anything here, not what two machines would give.
set -euo pipefail

READ_MB=${READ_MB:-128}
FILES=${FILES:-300}
REPS=${REPS:-3}
REPO=$(cd "$(dirname "$0")/.." && pwd)
SFS=${SFS:-$REPO/target/release/sfs}
BENCH=${BENCH:-$REPO/target/release/sfs-bench}
export SFSD=${SFSD:-$REPO/target/release/sfsd}
[ -x "$SFS" ] && [ -x "$SFSD" ] && [ -x "$BENCH" ] || {
    echo "measure: build first: cargo build --release -p sfsd -p sfs -p sfs-bench" >&2
    exit 1
}
[ "$(id -u)" = 0 ] || {
    echo "measure: needs root (the stack does)" >&2
    exit 1
}
M=$(mktemp -d /var/tmp/sfs-measure.XXXXXX)
export SCALE_DIR=$M/stack
export NFS_PORT=${NFS_PORT:-20490} MNT_PORT=${MNT_PORT:-20491} VOLUME=${VOLUME:-sfsvol}
trap '"$REPO/scripts/scale-out.sh" down >/dev/null || true; rm -rf "$M"' EXIT
"$SFS" keygen --out "$M/id" >"$M/keygen.out" 2>&1
echo "bench $(tail -1 "$M/keygen.out") 1001 1001" >"$M/users"
USERS=$M/users "$REPO/scripts/scale-out.sh" up
echo "load before: $(uptime)"

echo
echo "== Figure 10's read workload in front of the volume (sfs-bench read --backend-url)"
"$BENCH" read --backend-url "nfs://127.0.0.1:$NFS_PORT/$VOLUME?mountport=$MNT_PORT" \
    --sfsd "$SFSD" --workdir "$M/read" --modes uni,mp,ncopy --cpus 1,2 --clients 4 \
    --reps "$REPS" --warmup 2 --duration 5 --file-size "${READ_MB}MiB" \
    --watch "ganesha=$(cat "$SCALE_DIR/run/ganesha.pid")" \
    --watch "gluster=$(cat "$SCALE_DIR/run/glusterd.pid")" --json "$M/read.json"
echo "load after the read workload: $(uptime)"

echo
echo "== metadata workload through the stack's instances (sfs put -r, stat, rm -r)"
SFS_IDENTITY=$M/id SFS_USER=bench python3 - "$SFS" "$M" "$FILES" "$REPS" <<'EOF'
import glob, os, resource, statistics, subprocess, sys, time

sfs, m = sys.argv[1], sys.argv[2]
files, reps = int(sys.argv[3]), int(sys.argv[4])
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

def tree(root):
    """root and its descendants now (the bricks and self-heal daemon are the glusterd
    reaper's; Ganesha and its rpcbind are the ganesha group leader's)."""
    children = {}
    for d in glob.glob("/proc/[0-9]*/stat"):
        try:
            ppid = int(open(d).read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(d.split("/")[2]))
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out

def layers():
    """pid lists of each layer (read anew: a brick's pid may change)."""
    run = lambda f: pid_file(os.path.join(scale, "run", f))
    return {
        "sfsd": [pid_file(p) for p in glob.glob(os.path.join(scale, "run/sfsd-*.pid"))],
        "ganesha": tree(run("ganesha.pid")),
        "gluster": tree(run("glusterd.pid")),
    }

def cpu_of(pid):
    try:
        f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) / tick
    except (OSError, IndexError, TypeError):
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

for d in ("m1", "m2"):
    os.makedirs(os.path.join(m, d))
    for i in range(files // 2):
        with open(os.path.join(m, d, f"f{i}"), "wb") as f:
            f.write(b"x" * 1024)
src = lambda d: os.path.join(m, d)
cols = ["sfsd", "ganesha", "gluster", "client"]
# (phase, arrangement) -> [(seconds, {layer: CPU-s})]
results = {}
arrangements = {"one": (1, 1), "two": (1, 2)}

def phase(label, arrangement, make):
    i, j = arrangements[arrangement]
    secs, cpu = run_all([at(i, *make("m1")), at(j, *make("m2"))])
    results.setdefault((label, arrangement), []).append((secs, cpu))

# One untimed round first: the volume's first metadata work is slower than the rest.
run_all([at(1, "put", "-r", src("m1"), f"{name}/m1"), at(2, "put", "-r", src("m2"), f"{name}/m2")])
run_all([at(1, "rm", "-r", f"{name}/m1"), at(2, "rm", "-r", f"{name}/m2")])
for rep in range(reps):
    for arrangement in ("one", "two") if rep % 2 == 0 else ("two", "one"):
        phase("put -r", arrangement, lambda d: ["put", "-r", src(d), f"{name}/{d}"])
        phase("stat", arrangement,
              lambda d: ["stat", *(f"{name}/{d}/f{i}" for i in range(files // 2))])
        phase("rm -r", arrangement, lambda d: ["rm", "-r", f"{name}/{d}"])

print(f"\n{files} files of 1 KiB, two clients (each half), {reps} reps, medians; "
      f"CPU in ms per file of each layer")
print(f"{'workload':12} {'instances':>9} {'s':>7} {'files/s':>9}  "
      + " ".join(f"{c:>8}" for c in cols))
rates = {}
for (label, arrangement), runs in results.items():
    secs = statistics.median(r[0] for r in runs)
    rate = files / secs
    rates[(label, arrangement)] = rate
    cpu = {c: statistics.median(r[1][c] for r in runs) * 1000 / files for c in cols}
    where = "1 (both)" if arrangement == "one" else "1 and 2"
    print(f"{label:12} {where:>9} {secs:7.2f} {rate:9.1f}  "
          + " ".join(f"{cpu[c]:8.3f}" for c in cols))
for label in ("put -r", "stat", "rm -r"):
    print(f"{label}: two instances / one: {rates[(label, 'two')] / rates[(label, 'one')]:.2f}x")
opened = [open(os.path.join(scale, f"logs/sfsd-{i}.log")).read().count("connection opened")
          for i in (1, 2)]
print(f"connections served: instance 1 {opened[0]}, instance 2 {opened[1]}")
EOF
echo "load after: $(uptime)"
