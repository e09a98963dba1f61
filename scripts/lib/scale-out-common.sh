# Helpers of scripts/scale-out.sh shared by the one-machine stack and the per-machine roles
# (scripts/lib/scale-out-roles.sh). Sourced, not run: they use the settings scale-out.sh reads.

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

need_root() { [ "$(id -u)" = 0 ] || die "needs root (glusterd, bricks, Ganesha, sfsd acting as each user)"; }

need_sfsd() {
    [ -x "$SFSD" ] || die "no sfsd binary at $SFSD (cargo build --release -p sfsd, or SFSD=...)"
}

# Installs the packages that are missing among those named (default: all the stack needs),
# keeping their services from starting (this script starts its own daemons, bound to the
# addresses it was given).
install_missing() { # [gluster] [ganesha]
    local want=("$@") missing=()
    [ ${#want[@]} -eq 0 ] && want=(gluster ganesha)
    command -v python3 >/dev/null 2>&1 || missing+=(python3)
    command -v unshare >/dev/null 2>&1 || missing+=(util-linux)
    if [[ " ${want[*]} " == *" gluster "* ]]; then
        command -v glusterd >/dev/null 2>&1 || missing+=(glusterfs-server)
    fi
    if [[ " ${want[*]} " == *" ganesha "* ]]; then
        command -v ganesha.nfsd >/dev/null 2>&1 || missing+=(nfs-ganesha)
        [ -e /usr/lib/x86_64-linux-gnu/ganesha/libfsalgluster.so ] ||
            ls /usr/lib/*/ganesha/libfsalgluster.so >/dev/null 2>&1 || missing+=(nfs-ganesha-gluster)
        command -v rpcbind >/dev/null 2>&1 || missing+=(rpcbind)
    fi
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

wait_port() { # host port seconds
    for _ in $(seq $(($3 * 10))); do
        (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null && return 0
        sleep 0.1
    done
    return 1
}

port_open() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }

# The first IPv4 address a name resolves to (itself if it is one).
resolve() {
    local ip
    ip=$(getent ahostsv4 "$1" | awk 'NR == 1 {print $1}')
    [ -n "$ip" ] || die "$1 does not resolve (DNS or /etc/hosts on this machine)"
    echo "$ip"
}

# Records what is under Gluster's fixed paths before anything runs, so `down` removes only
# what appeared since (whole directories where they did not exist).
gluster_paths_snapshot() {
    : >"$RUN/created"
    : >"$RUN/before"
    for p in "${GLUSTER_PATHS[@]}"; do
        if [ -e "$p" ]; then find "$p" -mindepth 1 >>"$RUN/before"; else echo "$p" >>"$RUN/created"; fi
    done
}

# Removes what appeared under the given Gluster paths since the snapshot.
gluster_paths_clean() { # path...
    local p f
    [ -e "$RUN/before" ] || return 0
    for p in "$@"; do
        if grep -qxF -- "$p" "$RUN/created"; then
            rm -rf -- "$p"
            continue
        fi
        [ -e "$p" ] || continue
        find "$p" -mindepth 1 -depth | while read -r f; do
            grep -qxF -- "$f" "$RUN/before" || rm -rf -- "$f"
        done
    done
}

# Kills the brick and self-heal daemons of $VOLUME (glusterd's children that left its group)
# by their pid files, and any left by a crash: the processes whose command line names $1.
kill_gluster_daemons() { # brick-path-prefix
    local f pid
    for f in /var/lib/glusterd/vols/"$VOLUME"/run/*.pid /run/gluster/*.pid \
        /run/gluster/vols/"$VOLUME"/*.pid /run/gluster/shd/"$VOLUME"/*.pid; do
        [ -e "$f" ] || continue
        kill -KILL "$(cat "$f")" 2>/dev/null || true
    done
    for pid in $(pgrep -f -- "$1" || true); do
        kill -KILL "$pid" 2>/dev/null || true
    done
}

write_glusterd_vol() { # bind-address
    # glusterd listens on 0.0.0.0 unless told otherwise.
    cat >"$SCALE_DIR/glusterd.vol" <<EOV
volume management
    type mgmt/glusterd
    option working-directory /var/lib/glusterd
    option transport-type socket
    option transport.socket.bind-address $1
    option transport.socket.keepalive-time 10
    option transport.socket.keepalive-interval 2
    option transport.socket.read-fail-log off
    option transport.socket.listen-port 24007
    # The bricks' ports (one each), for firewalls: Gluster 10 picks them at random in the range.
    option base-port ${BRICK_PORTS%-*}
    option max-port ${BRICK_PORTS#*-}
    option ping-timeout 0
    option event-threads 1
end-volume
EOV
}

# glusterd bound to $1, under a reaper that is a child subreaper: the bricks glusterd starts
# daemonise, and a brick that dies must be reaped, or glusterd sees its pid alive (a zombie)
# and `volume start force` skips it; pid 1 in a container may never reap it.
start_glusterd() { # bind-address
    write_glusterd_vol "$1"
    start_group glusterd python3 -c "$REAPER" glusterd -N -f "$SCALE_DIR/glusterd.vol" \
        -p "$RUN/glusterd.self" --log-file="$LOGS/glusterd.log"
    wait_port "$1" 24007 20 || die "glusterd did not start ($LOGS/glusterd.log)"
}

stop_glusterd() {
    stop_group glusterd 5
    if [ -e "$RUN/glusterd.self" ]; then kill -KILL "$(cat "$RUN/glusterd.self")" 2>/dev/null || true; fi
}

# Sets the root's owner (before `start`: it is taken when the volume starts; Ganesha would
# cache the old one ~60 s) and starts the volume.
volume_start() {
    gluster --mode=script volume set "$VOLUME" storage.owner-uid "${OWNER%%:*}" >/dev/null
    gluster --mode=script volume set "$VOLUME" storage.owner-gid "${OWNER##*:}" >/dev/null
    gluster --mode=script volume set "$VOLUME" nfs.disable on >/dev/null 2>&1 || true
    gluster --mode=script volume start "$VOLUME" >/dev/null
}

write_ganesha_conf() { # bind-address gluster-host [allowed clients, comma-separated]
    local access=RW client=""
    if [ -n "${3:-}" ]; then
        access=None
        client="
    # Only the sfsd hosts: AUTH_SYS trusts whoever connects.
    CLIENT { Clients = $3; Access_Type = RW; }"
    fi
    cat >"$SCALE_DIR/ganesha.conf" <<EOC
# NFSv3 on $1 only, for the sfsd instances: AUTH_SYS trusts whoever connects.
NFS_CORE_PARAM {
    Bind_Addr = $1;
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
    Access_Type = $access;
    # sfsd sends each request with its user's uid and groups; the volume decides.
    Squash = No_Root_Squash;
    SecType = sys;
    Protocols = 3;
    Transports = TCP;$client
    FSAL {
        Name = GLUSTER;
        Hostname = "$2";
        Volume = "$VOLUME";
    }
}
EOC
}

# Ganesha in its own mount namespace, with its own /run (and an rpcbind there that only it
# sees), as the tests run it, so it needs neither the host's rpcbind nor its port 111.
start_ganesha() { # bind-address
    start_group ganesha unshare -m --propagation private sh -c "
mount -t tmpfs tmpfs /run && mkdir -p /run/ganesha || exit 1
unshare -n rpcbind -f -w &
for i in \$(seq 100); do [ -S /run/rpcbind.sock ] && break; sleep 0.02; done
exec ganesha.nfsd -F -f '$SCALE_DIR/ganesha.conf' -L '$LOGS/ganesha.log' -p /run/ganesha/ganesha.pid -N NIV_EVENT"
    wait_port "$1" "$NFS_PORT" 60 || die "Ganesha did not start ($LOGS/ganesha.log)"
    wait_port "$1" "$MNT_PORT" 10 || die "Ganesha's MOUNT did not start"
}

write_sfsd_conf() { # index listen-address backend-host peer-addresses...
    local i=$1 addr=$2 backend=$3 peers="" a
    shift 3
    for a in "$@"; do peers="$peers\"$a:$PEER_PORT\", "; done
    cat >"$SCALE_DIR/sfsd-$i.toml" <<EOS
# sfsd instance $i: one state directory, one name ($NAME), one backend.
state = "$SCALE_DIR/state"
backend = "nfs://$backend:$NFS_PORT/$VOLUME?mountport=$MNT_PORT"
listen = "$addr:$SFSD_PORT"
location = "$NAME%$SFSD_PORT"
lease-secs = $LEASE_SECS
peer-listen = "$addr:$PEER_PORT"
peers = [${peers%, }]
EOS
    if [ -n "${USERS:-}" ]; then echo "users = \"$USERS\"" >>"$SCALE_DIR/sfsd-$i.toml"; fi
    chmod 644 "$SCALE_DIR/sfsd-$i.toml"
}

# Starts instance $1 from its config and waits until it serves.
start_sfsd() { # index address
    local i=$1
    start_group "sfsd-$i" "$SFSD" serve --config "$SCALE_DIR/sfsd-$i.toml"
    for _ in $(seq 600); do
        grep -q '^sfsd: serving' "$LOGS/sfsd-$i.log" 2>/dev/null && break
        kill -0 "$(cat "$RUN/sfsd-$i.pid")" 2>/dev/null || die "sfsd $i exited: $(tail -5 "$LOGS/sfsd-$i.log")"
        sleep 0.1
    done
    grep -q '^sfsd: serving' "$LOGS/sfsd-$i.log" || die "sfsd $i did not start"
    say "sfsd $i on $2:$SFSD_PORT, peers on $2:$PEER_PORT"
}

stop_sfsds() {
    local f
    for f in "$RUN"/sfsd-*.pid; do
        [ -e "$f" ] || continue
        stop_group "$(basename "$f" .pid)" 5
    done
}

# The name, then each instance's address (one name: LOGIN signs its HOSTID, so a client is sent
# to one instance by resolving the name there, not by another name).
write_names() { # address...
    local i=0 a
    grep -h '^sfsd: serving' "$LOGS/sfsd-1.log" | awk '{print "name", $3}' >"$SCALE_DIR/names"
    for a in "$@"; do
        i=$((i + 1))
        echo "$i $a" >>"$SCALE_DIR/names"
    done
}

status_pids() {
    local f n pid
    for f in "$RUN"/*.pid; do
        [ -e "$f" ] || continue
        n=$(basename "$f" .pid)
        pid=$(cat "$f")
        if kill -0 "$pid" 2>/dev/null; then say "$n: running (pid $pid)"; else say "$n: NOT running"; fi
    done
}
