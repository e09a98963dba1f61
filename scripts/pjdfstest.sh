#!/usr/bin/env bash
# POSIX conformance of the FUSE mount with pjdfstest, next to a local directory and sshfs.
#
# Usage: scripts/pjdfstest.sh PJDFSTEST_SOURCE_DIR [SECONDS_PER_DIRECTORY]
#
# Builds pjdfstest from a copy of its source, builds sfs and sfsd, starts sfsd on a fresh
# export with users for root (uid 0 on the server) and for the uids pjdfstest switches to
# (65534, 65533, 65532, 65531), each with its own key and every group pjdfstest uses, mounts the export with
# `sfs mount --multi-user` so every uid logs in on the one stream, and runs every test
# directory with `prove` from inside the mount under a time limit. The same suite then runs on
# a local directory (what the kernel's own file system passes) and on sshfs through a
# throwaway sshd on 127.0.0.1 (scripts/lib/sshd.sh), and the three columns are printed side
# by side as passed/total per directory.
#
# Run as root (pjdfstest switches users); what is missing (autoconf automake libtool gcc make
# perl fuse3 sshfs openssh-server) is installed with apt-get.
#
# Environment:
#   SFS_PROFILE=debug     use a debug build (what CI has already built) instead of release
#   PJD_LOGS=DIR          keep prove's output per column and directory
#   PJD_ONLY=GLOB         run only the matching test directories (e.g. PJD_ONLY=chmod)
#   PJD_JOBS=N            test files run in parallel per directory (default 8: most of the
#                         suite's time is its own sleeps, not CPU)
#   PJD_SSHFS=0           skip the sshfs column
#   PJD_EXPECT=FILE       fail (exit 1) if the sfs column passes fewer tests in a directory
#                         than FILE's minimum for it (lines "DIR MIN"; see
#                         scripts/pjdfstest-expected.txt, which CI uses)
set -euo pipefail

src=${1:?usage: scripts/pjdfstest.sh PJDFSTEST_SOURCE_DIR [SECONDS_PER_DIRECTORY]}
limit=${2:-300}
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
src=$(cd "$src" && pwd)
jobs=${PJD_JOBS:-8}
expect=${PJD_EXPECT:-}
[ -z "$expect" ] || expect=$(cd "$(dirname "$expect")" && pwd)/$(basename "$expect")

if [ "$(id -u)" != 0 ]; then
    echo "pjdfstest switches users: run this as root" >&2
    exit 2
fi
need=(autoreconf make gcc prove fusermount3)
[ "${PJD_SSHFS:-1}" = 0 ] || need+=(sshfs /usr/sbin/sshd)
for tool in "${need[@]}"; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "== installing the build tools, fuse3, sshfs and openssh-server"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq autoconf automake libtool gcc \
            make perl fuse3 sshfs openssh-server >/dev/null
        break
    fi
done

# shellcheck source=lib/sshd.sh
. "$repo/scripts/lib/sshd.sh"

work=$(mktemp -d /tmp/sfs-pjdfstest.XXXXXX)
logs=${PJD_LOGS:-$work/logs}
mkdir -p "$logs"
chmod 755 "$work"
mnt="$work/mnt"
sshmnt="$work/sshmnt"
sfsd_pid=
cleanup() {
    fusermount3 -u -z "$mnt" 2>/dev/null || true
    fusermount3 -u -z "$sshmnt" 2>/dev/null || true
    sshd_stop
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
# Each user may act with its own gid first and every group pjdfstest hands its processes
# (`-g 65533,65532` and the like): the mount narrows each request to the calling process's
# own groups (NARROW, docs/PROTOCOL.md), so the server applies exactly what the process has.
others() { local g; for g in 0 65534 65533 65532 65531; do [ "$g" = "$1" ] || printf ',%s' "$g"; done; }
root_key="$work/idents/0"
HOME="$work/home" "$sfs" keygen --out "$root_key" >"$work/k0"
echo "root $(tail -1 "$work/k0") 0 0$(others 0)" >>"$users"
for uid in 65534 65533 65532 65531; do
    HOME="$work/home" "$sfs" keygen --out "$work/idents/$uid" >"$work/k$uid"
    name=$(getent passwd "$uid" | cut -d: -f1 || true)
    echo "${name:-$uid} $(tail -1 "$work/k$uid") $uid $uid$(others "$uid")" >>"$users"
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

# Runs every test directory under $1 (cwd) and prints "LABEL DIR passed/total" (or timeout).
run_suite() {
    local where=$1 label=$2 dir n out total failed
    for dir in "$work/pjdfstest/tests"/${PJD_ONLY:-*}/; do
        n=$(basename "$dir")
        out=$(cd "$where" && timeout --kill-after=10 "$limit" prove -j "$jobs" -r "$dir" 2>&1 || true)
        # prove's summary: "Files=N, Tests=T, ..." and per-file "Failed X/Y subtests".
        total=$(sed -n 's/^Files=[0-9]*, Tests=\([0-9]*\),.*/\1/p' <<<"$out")
        failed=$(sed -n 's/.*Failed \([0-9]*\)\/[0-9]* subtests.*/\1/p' <<<"$out" | awk '{s+=$1} END{print s+0}')
        if [ -z "$total" ]; then
            echo "$label $n timeout(${limit}s)"
        else
            echo "$label $n $((total - ${failed:-0}))/$total"
        fi
        echo "$out" >"$logs/$label-$n.log"
    done
}

start=$SECONDS
echo "== pjdfstest on the sfs FUSE mount"
run_suite "$mnt" sfs | tee "$work/sfs.txt"
echo "   ($((SECONDS - start)) s)"

start=$SECONDS
echo "== pjdfstest on a local directory"
run_suite "$work/local" local | tee "$work/local.txt"
echo "   ($((SECONDS - start)) s)"

columns=("$work/sfs.txt" "$work/local.txt")
header="directory        sfs          local"
if [ "${PJD_SSHFS:-1}" != 0 ]; then
    start=$SECONDS
    echo "== pjdfstest on sshfs (throwaway sshd on 127.0.0.1)"
    mkdir -p "$work/sshexport" "$sshmnt"
    chmod 777 "$work/sshexport"
    sshd_start "$work/ssh"
    # As a multi-user sshfs mount is used: every request acts as the ssh user (root here),
    # allow_other lets the suite's other uids in, default_permissions has the kernel check
    # modes locally (without it every uid would act as root).
    sshfs -o "port=$SSHD_PORT,IdentityFile=$SSHD_CLIENT_KEY,StrictHostKeyChecking=no" \
        -o "UserKnownHostsFile=/dev/null,LogLevel=ERROR,allow_other,default_permissions" \
        "root@127.0.0.1:$work/sshexport" "$sshmnt"
    run_suite "$sshmnt" sshfs | tee "$work/sshfs.txt"
    echo "   ($((SECONDS - start)) s)"
    columns+=("$work/sshfs.txt")
    header+="        sshfs"
fi

echo "== side by side (passed/total)"
echo "$header"
paste -d' ' "${columns[@]}" | awk '{ line = sprintf("%-16s", $2); for (i = 3; i <= NF; i += 3) line = line sprintf(" %-12s", $i); print line }'

if [ -n "$expect" ]; then
    echo "== checking the sfs column against $(basename "$expect")"
    bad=0
    while read -r d min; do
        case "$d" in '' | '#'*) continue ;; esac
        got=$(awk -v d="$d" '$2 == d { split($3, a, "/"); print (a[1] ~ /^[0-9]+$/) ? a[1] : 0 }' "$work/sfs.txt")
        [ -n "$got" ] || continue # not run (PJD_ONLY)
        if [ "$got" -lt "$min" ]; then
            echo "regression: $d passes $got, expected at least $min"
            bad=1
        fi
    done <"$expect"
    [ "$bad" = 0 ] || exit 1
    echo "no directory below its expected minimum"
fi
