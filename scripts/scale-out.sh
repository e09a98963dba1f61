#!/usr/bin/env bash
# The scale-out stack on one machine, for trying it: a GlusterFS volume replicated over three
# bricks (directories), NFS-Ganesha with the Gluster FSAL exporting it over NFSv3, and N sfsd
# instances sharing one state directory behind one name, told of each other's changes
# (`--peer`). README.md, "Deployment beyond one machine", says what each layer guarantees and
# how to spread the same files over several machines.
#
#   scripts/scale-out.sh up       # install what is missing (apt-get), write configs, start all
#   scripts/scale-out.sh status   # what runs, the volume's state, the name to mount
#   scripts/scale-out.sh down     # stop everything and remove everything `up` created
#
# Needs root (glusterd, bricks owned by root, Ganesha's mount namespace, /etc/hosts). Settings,
# from the environment (defaults in brackets):
#   SCALE_DIR      everything created outside Gluster's fixed paths [/var/tmp/sfs-scale-out]
#   INSTANCES      sfsd instances [2], on 127.0.0.2, 127.0.0.3, ... (SFSD_ADDRS overrides)
#   SFSD_ADDRS     space-separated listening IPs of the instances
#   SFSD_PORT      sfsd's TCP port [4004]; PEER_PORT the peer channel's UDP port [4005]
#   NAME           the one host name of all instances (added to /etc/hosts) [sfs-scale]
#   GLUSTER_HOST   name of the brick host (the gluster CLI refuses 127.0.0.1 itself; added to
#                  /etc/hosts as 127.0.0.1) [sfs-gluster]
#   VOLUME         Gluster volume [sfsvol]; OWNER uid:gid of its root [1001:1001]
#   NFS_PORT, MNT_PORT  Ganesha's ports on 127.0.0.1 [20490, 20491]
#   SFSD           the sfsd binary [target/release/sfsd, else target/debug/sfsd]
#   USERS          sfsd users file to serve with [none: anonymous clients only]
#   LEASE_SECS     sfsd's --lease-secs [60]
set -euo pipefail

SCALE_DIR=${SCALE_DIR:-/var/tmp/sfs-scale-out}
INSTANCES=${INSTANCES:-2}
if [ -z "${SFSD_ADDRS:-}" ]; then
    SFSD_ADDRS=""
    for i in $(seq 1 "$INSTANCES"); do SFSD_ADDRS="$SFSD_ADDRS 127.0.0.$((i + 1))"; done
fi
read -r -a ADDRS <<<"$SFSD_ADDRS"
SFSD_PORT=${SFSD_PORT:-4004}
PEER_PORT=${PEER_PORT:-4005}
NAME=${NAME:-sfs-scale}
GLUSTER_HOST=${GLUSTER_HOST:-sfs-gluster}
VOLUME=${VOLUME:-sfsvol}
OWNER=${OWNER:-1001:1001}
NFS_PORT=${NFS_PORT:-20490}
MNT_PORT=${MNT_PORT:-20491}
LEASE_SECS=${LEASE_SECS:-60}
REPO=$(cd "$(dirname "$0")/.." && pwd)
if [ -z "${SFSD:-}" ]; then
    SFSD=$REPO/target/release/sfsd
    [ -x "$SFSD" ] || SFSD=$REPO/target/debug/sfsd
fi
HOSTS_TAG="# sfs-scale-out $SCALE_DIR"
RUN=$SCALE_DIR/run
LOGS=$SCALE_DIR/logs
# Paths Gluster writes whatever its configuration says: removed by `down` if `up` made them.
GLUSTER_PATHS=(/var/lib/glusterd /run/gluster /var/log/glusterfs)

# Runs argv[1:] and reaps every process that ends up its child (PR_SET_CHILD_SUBREAPER), until
# none is left.
REAPER='
import ctypes, os, sys
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)
pid = os.fork()
if pid == 0:
    os.execvp(sys.argv[1], sys.argv[1:])
while True:
    try:
        os.wait()
    except ChildProcessError:
        break
    except InterruptedError:
        pass
'

say() { echo "scale-out: $*"; }
die() {
    echo "scale-out: $*" >&2
    exit 1
}

need_root() { [ "$(id -u)" = 0 ] || die "needs root (glusterd, bricks, Ganesha, /etc/hosts)"; }

# Installs the packages that are missing, keeping their services from starting (this script
# starts its own daemons, bound to the addresses it was given).
install_missing() {
    local missing=()
    command -v glusterd >/dev/null 2>&1 || missing+=(glusterfs-server)
    command -v ganesha.nfsd >/dev/null 2>&1 || missing+=(nfs-ganesha)
    [ -e /usr/lib/x86_64-linux-gnu/ganesha/libfsalgluster.so ] ||
        ls /usr/lib/*/ganesha/libfsalgluster.so >/dev/null 2>&1 || missing+=(nfs-ganesha-gluster)
    command -v rpcbind >/dev/null 2>&1 || missing+=(rpcbind)
    command -v unshare >/dev/null 2>&1 || missing+=(util-linux)
    command -v python3 >/dev/null 2>&1 || missing+=(python3)
    [ ${#missing[@]} -eq 0 ] && return
    command -v apt-get >/dev/null 2>&1 || die "missing ${missing[*]} and no apt-get"
    say "installing ${missing[*]}"
    local policy=/usr/sbin/policy-rc.d made_policy=""
    if [ ! -e $policy ]; then
        printf '#!/bin/sh\nexit 101\n' >$policy && chmod 755 $policy && made_policy=1
    fi
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        "${missing[@]}" >/dev/null
    [ -n "$made_policy" ] && rm -f $policy
    return 0
}

# Starts "$@" in its own session (so `down` can end the whole group) with output to log $1.
start_group() {
    local name=$1
    shift
    setsid "$@" </dev/null >"$LOGS/$name.log" 2>&1 &
    echo $! >"$RUN/$name.pid"
}

# Ends the process group whose leader's pid is in $RUN/$1.pid: TERM, then KILL after $2 s.
stop_group() {
    local f=$RUN/$1.pid grace=${2:-5} pid
    [ -f "$f" ] || return 0
    pid=$(cat "$f")
    if kill -0 "$pid" 2>/dev/null; then
        kill -TERM -- "-$pid" 2>/dev/null || true
        for _ in $(seq $((grace * 10))); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        # Ganesha with the Gluster FSAL may ignore SIGTERM.
        kill -KILL -- "-$pid" 2>/dev/null || true
    fi
    rm -f "$f"
}

hosts_add() {
    grep -qF "$HOSTS_TAG" /etc/hosts && return
    {
        echo "127.0.0.1 $GLUSTER_HOST $HOSTS_TAG"
        for a in "${ADDRS[@]}"; do echo "$a $NAME $HOSTS_TAG"; done
    } >>/etc/hosts
}

hosts_remove() {
    # Rewritten in place: /etc/hosts is often a bind mount that cannot be replaced.
    local kept
    kept=$(grep -vF "$HOSTS_TAG" /etc/hosts || true)
    printf '%s\n' "$kept" >/etc/hosts
}

wait_port() { # host port seconds
    for _ in $(seq $(($3 * 10))); do
        (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null && return 0
        sleep 0.1
    done
    return 1
}

write_glusterd_vol() {
    # glusterd listens on 0.0.0.0 unless told otherwise.
    cat >"$SCALE_DIR/glusterd.vol" <<EOF
volume management
    type mgmt/glusterd
    option working-directory /var/lib/glusterd
    option transport-type socket
    option transport.socket.bind-address 127.0.0.1
    option transport.socket.keepalive-time 10
    option transport.socket.keepalive-interval 2
    option transport.socket.read-fail-log off
    option transport.socket.listen-port 24007
    option ping-timeout 0
    option event-threads 1
end-volume
EOF
}

write_ganesha_conf() {
    cat >"$SCALE_DIR/ganesha.conf" <<EOF
# NFSv3 on 127.0.0.1 only, for the sfsd instances: AUTH_SYS trusts whoever connects.
NFS_CORE_PARAM {
    Bind_Addr = 127.0.0.1;
    NFS_Port = $NFS_PORT;
    MNT_Port = $MNT_PORT;
    Protocols = 3;
    Enable_NLM = false;
    Enable_RQUOTA = false;
    Enable_UDP = false;
    Mount_Path_Pseudo = true;
}
NFS_KRB5 { Active_krb5 = false; }
EXPORT {
    Export_Id = 1;
    Path = "/";
    Pseudo = "/$VOLUME";
    Access_Type = RW;
    # sfsd sends each request with its user's uid and groups; the volume decides.
    Squash = No_Root_Squash;
    SecType = sys;
    Protocols = 3;
    Transports = TCP;
    FSAL {
        Name = GLUSTER;
        Hostname = "$GLUSTER_HOST";
        Volume = "$VOLUME";
    }
}
EOF
}

write_sfsd_conf() { # index address
    local peers="" a
    for a in "${ADDRS[@]}"; do peers="$peers\"$a:$PEER_PORT\", "; done
    cat >"$SCALE_DIR/sfsd-$1.toml" <<EOF
# sfsd instance $1 of ${#ADDRS[@]}: one state directory, one name ($NAME), one backend.
state = "$SCALE_DIR/state"
backend = "nfs://127.0.0.1:$NFS_PORT/$VOLUME?mountport=$MNT_PORT"
listen = "$2:$SFSD_PORT"
location = "$NAME%$SFSD_PORT"
lease-secs = $LEASE_SECS
peer-listen = "$2:$PEER_PORT"
peers = [${peers%, }]
EOF
    if [ -n "${USERS:-}" ]; then echo "users = \"$USERS\"" >>"$SCALE_DIR/sfsd-$1.toml"; fi
    chmod 644 "$SCALE_DIR/sfsd-$1.toml"
}

up() {
    need_root
    [ -x "$SFSD" ] || die "no sfsd binary at $SFSD (cargo build --release -p sfsd, or SFSD=...)"
    [ -e "$RUN/up" ] && die "already up ($SCALE_DIR); run down first"
    pgrep -x glusterd >/dev/null && die "a glusterd is already running; this script starts its own"
    install_missing
    mkdir -p "$RUN" "$LOGS" "$SCALE_DIR/bricks"
    chmod 700 "$SCALE_DIR"
    : >"$RUN/created"
    : >"$RUN/before"
    for p in "${GLUSTER_PATHS[@]}"; do
        if [ -e "$p" ]; then find "$p" -mindepth 1 >>"$RUN/before"; else echo "$p" >>"$RUN/created"; fi
    done
    touch "$RUN/up"
    hosts_add

    say "glusterd on 127.0.0.1:24007"
    write_glusterd_vol
    # Under a reaper that is a child subreaper: the bricks glusterd starts daemonise, and a
    # brick that dies must be reaped, or glusterd sees its pid alive (a zombie) and
    # `volume start force` skips it; pid 1 in a container may never reap it.
    start_group glusterd python3 -c "$REAPER" glusterd -N -f "$SCALE_DIR/glusterd.vol" \
        -p "$RUN/glusterd.self" --log-file="$LOGS/glusterd.log"
    wait_port 127.0.0.1 24007 20 || die "glusterd did not start ($LOGS/glusterd.log)"
    local bricks=()
    for i in 1 2 3; do
        mkdir -p "$SCALE_DIR/bricks/b$i"
        bricks+=("$GLUSTER_HOST:$SCALE_DIR/bricks/b$i")
    done
    # Three bricks on one host: `force` (in real use, one brick per machine).
    gluster --mode=script volume create "$VOLUME" replica 3 "${bricks[@]}" force >/dev/null
    # Before `start`: the root's owner is taken when the volume starts.
    gluster --mode=script volume set "$VOLUME" storage.owner-uid "${OWNER%%:*}" >/dev/null
    gluster --mode=script volume set "$VOLUME" storage.owner-gid "${OWNER##*:}" >/dev/null
    gluster --mode=script volume set "$VOLUME" nfs.disable on >/dev/null 2>&1 || true
    gluster --mode=script volume start "$VOLUME" >/dev/null
    say "volume $VOLUME: replica 3 over ${bricks[*]}"

    say "NFS-Ganesha (Gluster FSAL) on 127.0.0.1:$NFS_PORT, MOUNT on $MNT_PORT"
    write_ganesha_conf
    # Its own /run (and an rpcbind there that only it sees), as the tests run it, so it needs
    # neither the host's rpcbind nor its port 111.
    start_group ganesha unshare -m --propagation private sh -c "
mount -t tmpfs tmpfs /run && mkdir -p /run/ganesha || exit 1
unshare -n rpcbind -f -w &
for i in \$(seq 100); do [ -S /run/rpcbind.sock ] && break; sleep 0.02; done
exec ganesha.nfsd -F -f '$SCALE_DIR/ganesha.conf' -L '$LOGS/ganesha.log' -p /run/ganesha/ganesha.pid -N NIV_EVENT"
    wait_port 127.0.0.1 "$NFS_PORT" 60 || die "Ganesha did not start ($LOGS/ganesha.log)"
    wait_port 127.0.0.1 "$MNT_PORT" 10 || die "Ganesha's MOUNT did not start"

    if [ ! -e "$SCALE_DIR/state/host.key" ]; then
        "$SFSD" init --state "$SCALE_DIR/state" --location "$NAME%$SFSD_PORT" >"$RUN/name"
    fi
    local i=0 a
    for a in "${ADDRS[@]}"; do
        i=$((i + 1))
        write_sfsd_conf "$i" "$a"
        start_group "sfsd-$i" "$SFSD" serve --config "$SCALE_DIR/sfsd-$i.toml"
        for _ in $(seq 600); do
            grep -q '^sfsd: serving' "$LOGS/sfsd-$i.log" 2>/dev/null && break
            kill -0 "$(cat "$RUN/sfsd-$i.pid")" 2>/dev/null || die "sfsd $i exited: $(tail -5 "$LOGS/sfsd-$i.log")"
            sleep 0.1
        done
        grep -q '^sfsd: serving' "$LOGS/sfsd-$i.log" || die "sfsd $i did not start"
        say "sfsd $i on $a:$SFSD_PORT, peers on $a:$PEER_PORT"
    done
    # The name, then each instance's address (one name: LOGIN signs its HOSTID, so a client
    # is sent to one instance by resolving the name there, not by another name).
    grep -h '^sfsd: serving' "$LOGS/sfsd-1.log" | awk '{print "name", $3}' >"$SCALE_DIR/names"
    i=0
    for a in "${ADDRS[@]}"; do
        i=$((i + 1))
        echo "$i $a" >>"$SCALE_DIR/names"
    done
    say "up: mount $(awk '$1 == "name" {print $2}' "$SCALE_DIR/names")"
}

down() {
    need_root
    # Nothing of ours without run/up (touched before anything is started): the pid files
    # below are Gluster's, and would name another glusterd's daemons.
    if [ ! -e "$RUN/up" ]; then
        say "down: nothing was brought up in $SCALE_DIR"
        return 0
    fi
    local i
    for f in "$RUN"/sfsd-*.pid; do
        [ -e "$f" ] || continue
        i=$(basename "$f" .pid)
        stop_group "$i" 5
    done
    stop_group ganesha 5
    if [ -e "$RUN/glusterd.pid" ] && command -v gluster >/dev/null; then
        gluster --mode=script volume stop "$VOLUME" force >/dev/null 2>&1 || true
        gluster --mode=script volume delete "$VOLUME" >/dev/null 2>&1 || true
    fi
    # Brick and self-heal daemons are glusterd's children that left its group: by pid file.
    for f in /var/lib/glusterd/vols/"$VOLUME"/run/*.pid /run/gluster/*.pid \
        /run/gluster/vols/"$VOLUME"/*.pid; do
        [ -e "$f" ] || continue
        kill -KILL "$(cat "$f")" 2>/dev/null || true
    done
    # And any left by a crash: the processes whose command line names our brick paths.
    for pid in $(pgrep -f -- "$SCALE_DIR/bricks/" || true); do
        kill -KILL "$pid" 2>/dev/null || true
    done
    stop_group glusterd 5
    if [ -e "$RUN/glusterd.self" ]; then kill -KILL "$(cat "$RUN/glusterd.self")" 2>/dev/null || true; fi
    if [ -e "$RUN/created" ]; then
        while read -r p; do
            case $p in /var/lib/glusterd | /run/gluster | /var/log/glusterfs) rm -rf "$p" ;; esac
        done <"$RUN/created"
    fi
    # Where those paths were there before: whatever was not there then.
    if [ -e "$RUN/before" ]; then
        for p in "${GLUSTER_PATHS[@]}"; do
            [ -e "$p" ] || continue
            find "$p" -mindepth 1 -depth | while read -r f; do
                grep -qxF -- "$f" "$RUN/before" || rm -rf -- "$f"
            done
        done
    fi
    hosts_remove
    # Only a directory `up` made (it holds run/up, checked above): never whatever SCALE_DIR
    # names by mistake.
    rm -rf "$SCALE_DIR"
    say "down: nothing left in $SCALE_DIR, /etc/hosts, or Gluster's paths this run created"
}

status() {
    [ -d "$RUN" ] || {
        say "down"
        return 0
    }
    for f in "$RUN"/*.pid; do
        [ -e "$f" ] || continue
        local n pid
        n=$(basename "$f" .pid)
        pid=$(cat "$f")
        if kill -0 "$pid" 2>/dev/null; then say "$n: running (pid $pid)"; else say "$n: NOT running"; fi
    done
    command -v gluster >/dev/null && gluster volume status "$VOLUME" 2>/dev/null || true
    [ -e "$LOGS/sfsd-1.log" ] && grep -h '^sfsd: serving' "$LOGS"/sfsd-*.log || true
    [ -e "$SCALE_DIR/names" ] && sed 's/^/names: /' "$SCALE_DIR/names" || true
}

case ${1:-} in
up) up ;;
down) down ;;
status) status ;;
*)
    sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
