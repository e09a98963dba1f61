#!/usr/bin/env bash
# The scale-out stack: a GlusterFS volume replicated over three bricks, NFS-Ganesha with the
# Gluster FSAL exporting it over NFSv3, and N sfsd instances sharing one state directory behind
# one name, told of each other's changes (`--peer`). On one machine for trying it (`up`), or
# on several, one role per machine (`up --role ...`, scripts/lib/scale-out-roles.sh). README.md,
# "Deployment beyond one machine", says what each layer guarantees and which ports each
# machine must reach.
#
#   scripts/scale-out.sh up       # install what is missing (apt-get), write configs, start all
#   scripts/scale-out.sh status   # what runs, the volume's state, the name to mount
#   scripts/scale-out.sh down     # stop everything and remove everything `up` created
#
#   scripts/scale-out.sh up|down|status --role brick|gateway|sfsd[,...]   # on several machines
#   scripts/scale-out.sh state-init DIR   # the one state directory, to copy to each sfsd host
#
# Needs root (glusterd, bricks owned by root, Ganesha's mount namespace, /etc/hosts). Settings,
# from the environment (defaults in brackets):
#   SCALE_DIR      everything created outside Gluster's fixed paths [/var/tmp/sfs-scale-out]
#   INSTANCES      sfsd instances [2], on 127.0.0.2, 127.0.0.3, ... (SFSD_ADDRS overrides)
#   SFSD_ADDRS     space-separated listening IPs of the instances (with --role: of all of
#                  them, on every machine, the peer list)
#   SFSD_PORT      sfsd's TCP port [4004]; PEER_PORT the peer channel's UDP port [4005]
#   NAME           the one host name of all instances (added to /etc/hosts) [sfs-scale]
#   GLUSTER_HOST   name of the brick host (the gluster CLI refuses 127.0.0.1 itself; added to
#                  /etc/hosts as 127.0.0.1) [sfs-gluster]
#   VOLUME         Gluster volume [sfsvol]; OWNER uid:gid of its root [1001:1001]
#   NFS_PORT, MNT_PORT  Ganesha's ports on 127.0.0.1 [20490, 20491]
#   SFSD           the sfsd binary [target/release/sfsd, else target/debug/sfsd]
#   USERS          sfsd users file to serve with [none: anonymous clients only]
#   LEASE_SECS     sfsd's --lease-secs [60]
# With --role (no /etc/hosts lines: names must resolve on every machine, by DNS or its hosts):
#   BRICK_HOSTS    brick role, and gateway: the Gluster hosts (names or addresses, not
#                  127.0.0.1), one brick each, as host or host:/path [path $SCALE_DIR/brick];
#                  the first probes the others and creates the volume
#   BRICK_PORTS    the TCP ports the bricks listen on, one each [49152-49251]
#   BRICK_FORCE    1: create the volume with `force` (bricks on the root file system) [unset]
#   BRICK_HOST     this machine's entry [the one whose address is this machine's]
#   PEER_WAIT      seconds the first brick host waits for each other's glusterd [300]
#   NFS_ADDR       gateway: Ganesha's listen address; sfsd: the backend's address
#   GLUSTER_HOST   gateway: the Gluster host Ganesha reads the volume from [first BRICK_HOSTS]
#   SFSD_HOSTS     gateway: the sfsd hosts allowed to reach Ganesha [SFSD_ADDRS]
#   SFSD_ADDR      sfsd: this machine's instance address(es) [those of SFSD_ADDRS that are its]
#   STATE          sfsd: the copy of the state directory `state-init` made
set -euo pipefail

SCALE_DIR=${SCALE_DIR:-/var/tmp/sfs-scale-out}
INSTANCES=${INSTANCES:-2}
# As given (the roles take no defaults for addresses).
GIVEN_SFSD_ADDRS=${SFSD_ADDRS:-}
GIVEN_GLUSTER_HOST=${GLUSTER_HOST:-}
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
PEER_WAIT=${PEER_WAIT:-300}
BRICK_PORTS=${BRICK_PORTS:-49152-49251}
REPO=$(cd "$(dirname "$0")/.." && pwd)
if [ -z "${SFSD:-}" ]; then
    SFSD=$REPO/target/release/sfsd
    [ -x "$SFSD" ] || SFSD=$REPO/target/debug/sfsd
fi
HOSTS_TAG="# sfs-scale-out $SCALE_DIR"
RUN=$SCALE_DIR/run
LOGS=$SCALE_DIR/logs
# Paths Gluster writes whatever its configuration says: removed by `down` if `up` made them.
GLUSTER_PATHS=(/var/lib/glusterd /run/gluster /var/log/glusterfs /run/glusterd.socket)

# shellcheck source=lib/scale-out-common.sh
. "$REPO/scripts/lib/scale-out-common.sh"
# shellcheck source=lib/scale-out-roles.sh
. "$REPO/scripts/lib/scale-out-roles.sh"

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

# The whole stack on this machine.
up() {
    need_root
    need_sfsd
    [ -e "$RUN/up" ] && die "already up ($SCALE_DIR); run down first"
    any_role_up && die "roles are up in $SCALE_DIR; run down --role ... first"
    pgrep -x glusterd >/dev/null && die "a glusterd is already running; this script starts its own"
    install_missing
    mkdir -p "$RUN" "$LOGS" "$SCALE_DIR/bricks"
    chmod 700 "$SCALE_DIR"
    gluster_paths_snapshot
    touch "$RUN/up"
    hosts_add

    say "glusterd on 127.0.0.1:24007"
    start_glusterd 127.0.0.1
    local bricks=()
    for i in 1 2 3; do
        mkdir -p "$SCALE_DIR/bricks/b$i"
        bricks+=("$GLUSTER_HOST:$SCALE_DIR/bricks/b$i")
    done
    # Three bricks on one host: `force` (on several machines, one brick per machine).
    gluster --mode=script volume create "$VOLUME" replica 3 "${bricks[@]}" force >/dev/null
    volume_start
    say "volume $VOLUME: replica 3 over ${bricks[*]}"

    say "NFS-Ganesha (Gluster FSAL) on 127.0.0.1:$NFS_PORT, MOUNT on $MNT_PORT"
    write_ganesha_conf 127.0.0.1 "$GLUSTER_HOST"
    start_ganesha 127.0.0.1

    if [ ! -e "$SCALE_DIR/state/host.key" ]; then
        "$SFSD" init --state "$SCALE_DIR/state" --location "$NAME%$SFSD_PORT" >"$RUN/name"
    fi
    local i=0 a
    for a in "${ADDRS[@]}"; do
        i=$((i + 1))
        write_sfsd_conf "$i" "$a" 127.0.0.1 "${ADDRS[@]}"
        start_sfsd "$i" "$a"
    done
    write_names "${ADDRS[@]}"
    say "up: mount $(awk '$1 == "name" {print $2}' "$SCALE_DIR/names")"
}

down() {
    need_root
    # Nothing of ours without run/up (touched before anything is started): the pid files
    # below are Gluster's, and would name another glusterd's daemons.
    if [ ! -e "$RUN/up" ]; then
        say "down: nothing was brought up in $SCALE_DIR"
        any_role_up && say "down: roles are up there: down --role ..."
        return 0
    fi
    stop_sfsds
    stop_group ganesha 5
    if [ -e "$RUN/glusterd.pid" ] && command -v gluster >/dev/null; then
        gluster --mode=script volume stop "$VOLUME" force >/dev/null 2>&1 || true
        gluster --mode=script volume delete "$VOLUME" >/dev/null 2>&1 || true
    fi
    kill_gluster_daemons "$SCALE_DIR/bricks/"
    stop_glusterd
    gluster_paths_clean "${GLUSTER_PATHS[@]}"
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
    status_pids
    command -v gluster >/dev/null && gluster volume status "$VOLUME" 2>/dev/null || true
    [ -e "$LOGS/sfsd-1.log" ] && grep -h '^sfsd: serving' "$LOGS"/sfsd-*.log || true
    [ -e "$SCALE_DIR/names" ] && sed 's/^/names: /' "$SCALE_DIR/names" || true
}

usage() {
    sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
    exit 2
}

# --role a,b -> the roles, checked; the addresses the roles need are theirs to check.
parse_roles() {
    [ "${1:-}" = --role ] && [ -n "${2:-}" ] || usage
    local r
    for r in ${2//,/ }; do
        [[ " ${ROLES[*]} " == *" $r "* ]] || die "no role $r (roles: ${ROLES[*]})"
        echo "$r"
    done
}

verb=${1:-}
[ $# -gt 0 ] && shift
if [ $# -gt 0 ] && [ "$verb" != state-init ]; then
    mapfile -t roles < <(parse_roles "$@")
    [ ${#roles[@]} -gt 0 ] || exit 2
    # No addresses of the one-machine defaults: every one is the user's.
    SFSD_ADDRS=$GIVEN_SFSD_ADDRS
    GLUSTER_HOST=$GIVEN_GLUSTER_HOST
    case $verb in
    up) roles_up "${roles[@]}" ;;
    down) roles_down "${roles[@]}" ;;
    status) roles_status "${roles[@]}" ;;
    *) usage ;;
    esac
    exit 0
fi
case $verb in
up) up ;;
down) down ;;
status) status ;;
state-init) state_init "${1:-}" ;;
*) usage ;;
esac
