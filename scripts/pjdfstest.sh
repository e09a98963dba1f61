#!/usr/bin/env bash
# POSIX conformance of the FUSE mount with pjdfstest.
#
# Usage: scripts/pjdfstest.sh PJDFSTEST_SOURCE_DIR [SECONDS_PER_DIRECTORY]
#
# Builds pjdfstest from a copy of its source (needs autoconf automake libtool gcc make and
# prove; installed with apt-get when run as root and missing), builds sfs and sfsd, starts sfsd
# on a fresh export with users for root (uid 0 on the server) and for the uids pjdfstest
# switches to (65534, 65533, 65532, 65531), each with its own key, mounts the export with
# `sfs mount --multi-user` so every uid logs in on the one stream, runs every test directory
# with `prove` from inside the mount under a time limit, and prints per-directory pass counts
# next to the same suite on a local directory. Run as root (pjdfstest needs it).
# SFS_PROFILE=debug uses a debug build (faster to build); PJD_LOGS=DIR keeps prove's output.
# PJD_ONLY=GLOB runs only the matching test directories (e.g. PJD_ONLY=chmod).
set -euo pipefail

src=${1:?usage: scripts/pjdfstest.sh PJDFSTEST_SOURCE_DIR [SECONDS_PER_DIRECTORY]}
limit=${2:-300}
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
src=$(cd "$src" && pwd)

if [ "$(id -u)" != 0 ]; then
    echo "pjdfstest switches users: run this as root" >&2
    exit 2
fi
for tool in autoreconf make gcc prove fusermount3; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq autoconf automake libtool gcc make perl fuse3 >/dev/null
        break
    fi
done

work=$(mktemp -d /tmp/sfs-pjdfstest.XXXXXX)
# prove's output per directory is kept in PJD_LOGS (default: discarded with the work dir).
logs=${PJD_LOGS:-$work/logs}
mkdir -p "$logs"
chmod 755 "$work"
mnt="$work/mnt"
sfsd_pid=
cleanup() {
    fusermount3 -u -z "$mnt" 2>/dev/null || true
    if [ -n "$sfsd_pid" ]; then kill "$sfsd_pid" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT

echo "== building pjdfstest"
cp -r "$src" "$work/pjdfstest"
(cd "$work/pjdfstest" && autoreconf -ifs && ./configure && make pjdfstest) >"$work/pjdfstest-build.log" 2>&1 ||
    { tail -20 "$work/pjdfstest-build.log"; exit 1; }

echo "== building sfs and sfsd (${SFS_PROFILE:=release})"
profile_flag=--release
[ "$SFS_PROFILE" = release ] || profile_flag=
(cd "$repo" && cargo build $profile_flag -p sfs -p sfsd --locked) >"$work/cargo.log" 2>&1 ||
    { tail -20 "$work/cargo.log"; exit 1; }
dir=release
[ "$SFS_PROFILE" = release ] || dir=debug
sfs="$repo/target/$dir/sfs"
sfsd="$repo/target/$dir/sfsd"

echo "== server with users root, 65534, 65533, 65532, 65531"
mkdir -p "$work/export" "$work/state" "$work/home" "$work/idents" "$mnt" "$work/local"
users="$work/users"
: >"$users"
root_key="$work/idents/0"
HOME="$work/home" "$sfs" keygen --out "$root_key" >"$work/k0"
echo "root $(tail -1 "$work/k0") 0 0" >>"$users"
for uid in 65534 65533 65532 65531; do
    HOME="$work/home" "$sfs" keygen --out "$work/idents/$uid" >"$work/k$uid"
    name=$(getent passwd "$uid" | cut -d: -f1 || true)
    echo "${name:-$uid} $(tail -1 "$work/k$uid") $uid $uid" >>"$users"
done
"$sfsd" serve --state "$work/state" --export "$work/export" --listen 127.0.0.1:0 \
    --users "$users" >"$work/sfsd.out" 2>"$work/sfsd.log" &
sfsd_pid=$!
for _ in $(seq 100); do
    grep -q "^sfsd: serving " "$work/sfsd.out" && break
    sleep 0.1
done
name=$(awk '/^sfsd: serving /{print $3; exit}' "$work/sfsd.out")
[ -n "$name" ] || { cat "$work/sfsd.log"; exit 1; }

echo "== mounting $name on $mnt (--multi-user)"
HOME="$work/home" SFS_USER=root "$sfs" --identity "$root_key" mount --multi-user \
    --identities "$work/idents" --log "$work/mount.log" "$name" "$mnt"
chmod 777 "$mnt" "$work/local"

# Runs every test directory under $1 (cwd) and prints "dir passed/total".
run_suite() {
    local where=$1 label=$2 dir n out total failed
    for dir in "$work/pjdfstest/tests"/${PJD_ONLY:-*}/; do
        n=$(basename "$dir")
        out=$(cd "$where" && timeout --kill-after=10 "$limit" prove -r "$dir" 2>&1 || true)
        # prove's summary: "Files=N, Tests=T, ..." and per-file "Failed X/Y subtests".
        total=$(sed -n 's/^Files=[0-9]*, Tests=\([0-9]*\),.*/\1/p' <<<"$out")
        failed=$(sed -n 's/.*Failed \([0-9]*\)\/[0-9]* subtests.*/\1/p' <<<"$out" | awk '{s+=$1} END{print s+0}')
        if [ -z "$total" ]; then
            echo "$label $n: timeout(${limit}s)"
        else
            echo "$label $n: $((total - ${failed:-0}))/$total"
        fi
        echo "$out" >"$logs/$label-$n.log"
    done
}

echo "== pjdfstest on the sfs FUSE mount"
run_suite "$mnt" sfs | tee "$work/sfs.txt"
echo "== pjdfstest on a local directory"
run_suite "$work/local" local | tee "$work/local.txt"
echo "== side by side (passed/total)"
paste -d' ' <(sed 's/^sfs //' "$work/sfs.txt") <(sed 's/^local [^:]*://' "$work/local.txt") |
    awk '{printf "%-16s sfs %-12s local %s\n", $1, $2, $3}'
