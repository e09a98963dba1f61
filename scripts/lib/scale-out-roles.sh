# The per-machine roles of scripts/scale-out.sh (`up|down|status --role ROLE`), for the stack
# spread over several machines. Sourced, not run. Each role records what it started and made
# under $SCALE_DIR/run, and its `down` removes that and only that; $SCALE_DIR itself goes with
# the machine's last role.
#
#   brick    glusterd bound to BRICK_HOST and a brick directory; on the first of BRICK_HOSTS,
#            also `gluster peer probe` of the others and the volume, replicated over one brick
#            per host (its `down` stops and deletes the volume and detaches the peers)
#   gateway  NFS-Ganesha with the Gluster FSAL, bound to NFS_ADDR, exporting the volume to the
#            SFSD_HOSTS only
#   sfsd     the sfsd instance(s) of this machine (SFSD_ADDR), from a copy of one state
#            directory (STATE), backend NFS_ADDR, peers SFSD_ADDRS, behind the one NAME

ROLES=(brick gateway sfsd)

# This machine's IPv4 addresses.
local_addrs() { ip -4 -o addr show 2>/dev/null | awk '{sub("/.*", "", $4); print $4}'; }

# The entries of a list (space- or comma-separated) whose address is this machine's.
local_entries() { # list
    local e mine
    mine=" $(local_addrs | tr '\n' ' ') "
    for e in ${1//,/ }; do
        [[ $mine == *" $(resolve "${e%%:*}") "* ]] && echo "$e"
    done
    return 0
}

require() { # variable-name why
    [ -n "${!1:-}" ] || die "$1 is not set: $2"
}

# "host[:/path]" -> host:path, the brick of that host ($SCALE_DIR/brick unless named).
brick_of() {
    case $1 in
    *:/*) echo "$1" ;;
    *) echo "$1:$SCALE_DIR/brick" ;;
    esac
}

role_up() { [ -e "$RUN/role-$1" ]; }
any_role_up() { ls "$RUN"/role-* >/dev/null 2>&1; }

# The run directory of the first role up on this machine (and Gluster's paths as they were).
roles_begin() { # role
    [ -e "$RUN/up" ] && die "the one-machine stack is up in $SCALE_DIR; run down first"
    role_up "$1" && die "role $1 is already up ($SCALE_DIR); run down --role $1 first"
    mkdir -p "$RUN" "$LOGS"
    chmod 700 "$SCALE_DIR"
    [ -e "$RUN/before" ] || gluster_paths_snapshot
    touch "$RUN/role-$1"
}

# After a role's down: Gluster's paths once no Gluster process of ours is left, and
# $SCALE_DIR once no role is.
roles_end() { # role
    rm -f "$RUN/role-$1"
    role_up brick || gluster_paths_clean /var/lib/glusterd /run/gluster /run/glusterd.socket
    role_up brick || role_up gateway || gluster_paths_clean /var/log/glusterfs
    if ! any_role_up; then
        rm -rf "$SCALE_DIR"
        say "down: no role left here; $SCALE_DIR removed"
    fi
}

brick_up() {
    require BRICK_HOSTS "the Gluster hosts, one brick each (the first creates the volume)"
    local hosts
    read -r -a hosts <<<"${BRICK_HOSTS//,/ }"
    [ ${#hosts[@]} -ge 2 ] || die "BRICK_HOSTS names ${#hosts[@]} host; replication needs 2 or more"
    local me=${BRICK_HOST:-$(local_entries "$BRICK_HOSTS" | head -1)}
    [ -n "$me" ] || die "no entry of BRICK_HOSTS ($BRICK_HOSTS) is an address of this machine; set BRICK_HOST"
    me=${me%%:*}
    local addr
    addr=$(resolve "$me")
    port_open "$addr" 24007 && die "something already listens on $addr:24007 (another glusterd?)"
    install_missing gluster
    roles_begin brick
    local brick h
    brick=$(brick_of "$me")
    for h in "${hosts[@]}"; do [ "${h%%:*}" = "$me" ] && brick=$(brick_of "$h") && break; done
    brick_dir_make "${brick#*:}"
    say "glusterd on $addr:24007, brick $brick"
    start_glusterd "$addr"
    [ "${hosts[0]%%:*}" = "$me" ] && volume_create "${hosts[@]}"
    return 0
}

# The brick directory: made, or an empty one given (a file system of its own, as Gluster
# wants: it refuses a brick on the root file system without BRICK_FORCE=1). `down` removes it,
# or empties the one given.
brick_dir_make() { # path
    if [ -e "$1" ]; then
        [ -d "$1" ] && [ -z "$(ls -A "$1")" ] || die "brick $1 exists and is not an empty directory"
        echo given >"$RUN/brick-made"
    else
        mkdir -p "$1"
        echo made >"$RUN/brick-made"
    fi
    echo "$1" >"$RUN/brick-path"
}

brick_dir_remove() {
    [ -e "$RUN/brick-path" ] || return 0
    local dir
    dir=$(cat "$RUN/brick-path")
    if [ "$(cat "$RUN/brick-made" 2>/dev/null)" = made ]; then
        rm -rf -- "$dir"
    elif [ -d "$dir" ]; then
        find "$dir" -mindepth 1 -maxdepth 1 -exec rm -rf -- {} +
        # Gluster's marks on the brick root (volume-id, gfid).
        setfattr -x trusted.glusterfs.volume-id "$dir" 2>/dev/null || true
        setfattr -x trusted.gfid "$dir" 2>/dev/null || true
    fi
    rm -f "$RUN/brick-path" "$RUN/brick-made"
}

# On the first brick host: probes the others (their glusterd must be up: waits up to
# PEER_WAIT s for each) and creates the volume over one brick per host.
volume_create() { # host[:/path]...
    local h bricks=() others=()
    for h in "$@"; do bricks+=("$(brick_of "$h")"); done
    for h in "${@:2}"; do others+=("${h%%:*}"); done
    for h in "${others[@]}"; do
        wait_port "$(resolve "$h")" 24007 "$PEER_WAIT" ||
            die "glusterd on $h:24007 not reachable after $PEER_WAIT s (run up --role brick there first)"
        gluster --mode=script peer probe "$h" >/dev/null || die "gluster peer probe $h failed"
        echo "$h" >>"$RUN/probed"
    done
    for _ in $(seq $((PEER_WAIT * 10))); do
        [ "$(gluster peer status 2>/dev/null | grep -c 'Peer in Cluster (Connected)')" = "${#others[@]}" ] && break
        sleep 0.1
    done
    local force=()
    [ "${BRICK_FORCE:-}" = 1 ] && force=(force)
    gluster --mode=script volume create "$VOLUME" replica $# "${bricks[@]}" "${force[@]}" >/dev/null ||
        die "gluster volume create $VOLUME replica $# ${bricks[*]} failed ($LOGS/glusterd.log)"
    touch "$RUN/volume"
    volume_start
    say "volume $VOLUME: replica $# over ${bricks[*]}"
}

brick_down() {
    if [ -e "$RUN/volume" ]; then
        gluster --mode=script volume stop "$VOLUME" force >/dev/null 2>&1 || true
        gluster --mode=script volume delete "$VOLUME" >/dev/null 2>&1 || true
    fi
    if [ -e "$RUN/probed" ]; then
        while read -r h; do
            gluster --mode=script peer detach "$h" force >/dev/null 2>&1 || true
        done <"$RUN/probed"
    fi
    kill_gluster_daemons "$(cat "$RUN/brick-path" 2>/dev/null || echo "$SCALE_DIR/brick")"
    stop_glusterd
    brick_dir_remove
    rm -f "$RUN/volume" "$RUN/probed" "$SCALE_DIR/glusterd.vol"
}

gateway_up() {
    require NFS_ADDR "Ganesha's listen address (on the network of the sfsd hosts)"
    require BRICK_HOSTS "the Gluster hosts (Ganesha reads the volume from the first, GLUSTER_HOST)"
    local allowed=${SFSD_HOSTS:-${SFSD_ADDRS:-}}
    [ -n "$allowed" ] || die "SFSD_HOSTS (or SFSD_ADDRS) is not set: the sfsd hosts allowed to reach Ganesha"
    allowed=$(echo "${allowed//,/ }" | xargs | sed 's/ /, /g')
    local host=${GLUSTER_HOST:-${BRICK_HOSTS%%[ ,]*}}
    host=${host%%:*}
    port_open "$NFS_ADDR" "$NFS_PORT" && die "something already listens on $NFS_ADDR:$NFS_PORT"
    install_missing ganesha
    roles_begin gateway
    say "NFS-Ganesha (Gluster FSAL, volume $VOLUME from $host) on $NFS_ADDR:$NFS_PORT, MOUNT on $MNT_PORT, for $allowed"
    write_ganesha_conf "$NFS_ADDR" "$host" "$allowed"
    start_ganesha "$NFS_ADDR"
}

gateway_down() {
    # Ganesha with the Gluster FSAL ignores SIGTERM (measured: it waits out any grace).
    stop_group ganesha 2
    rm -f "$SCALE_DIR/ganesha.conf"
}

sfsd_up() {
    require SFSD_ADDRS "every instance's address (the peer list, the same on every sfsd host)"
    require NFS_ADDR "Ganesha's address (the backend)"
    require STATE "the state directory made once (scale-out.sh state-init DIR) and copied here"
    need_sfsd
    [ -e "$STATE/host.key" ] || die "$STATE holds no state directory (no host.key)"
    [ "$(realpath "$STATE")" = "$(realpath -m "$SCALE_DIR/state")" ] &&
        die "STATE is $SCALE_DIR/state, the copy this role makes (and down removes): name the original"
    local mine all
    read -r -a all <<<"${SFSD_ADDRS//,/ }"
    read -r -a mine <<<"${SFSD_ADDR:-$(local_entries "$SFSD_ADDRS" | xargs)}"
    [ ${#mine[@]} -gt 0 ] || die "no entry of SFSD_ADDRS ($SFSD_ADDRS) is an address of this machine; set SFSD_ADDR"
    roles_begin sfsd
    # A copy of its own (removed by down), private to root as sfsd requires.
    rm -rf "$SCALE_DIR/state"
    cp -a "$STATE" "$SCALE_DIR/state"
    chown -R root:root "$SCALE_DIR/state"
    chmod -R go-rwx "$SCALE_DIR/state"
    local i=0 a
    for a in "${mine[@]}"; do
        i=$((i + 1))
        write_sfsd_conf "$i" "$a" "$NFS_ADDR" "${all[@]}"
        start_sfsd "$i" "$a"
    done
    write_names "${mine[@]}"
    say "up: $(awk '$1 == "name" {print $2}' "$SCALE_DIR/names") (clients resolve $NAME to ${all[*]})"
}

sfsd_down() {
    stop_sfsds
    rm -rf "$SCALE_DIR/state" "$SCALE_DIR/names" "$SCALE_DIR"/sfsd-*.toml
}

roles_up() { # role...
    need_root
    local r
    for r in "$@"; do "${r}_up"; done
}

roles_down() { # role...
    need_root
    local r
    for r in "$@"; do
        if ! role_up "$r"; then
            say "down: role $r is not up in $SCALE_DIR"
            continue
        fi
        "${r}_down"
        say "down: role $r stopped and removed"
        roles_end "$r"
    done
}

roles_status() { # role...
    local r
    for r in "$@"; do
        if role_up "$r"; then say "role $r: up"; else say "role $r: down"; fi
    done
    [ -d "$RUN" ] && status_pids
    role_up brick && gluster volume status "$VOLUME" 2>/dev/null || true
    [ -e "$SCALE_DIR/names" ] && sed 's/^/names: /' "$SCALE_DIR/names" || true
}

# Makes the state directory all instances share (host key, handle secret, location), once,
# on any machine with sfsd: copy it to every sfsd host (scp -rp, as root) and name the copy
# in STATE there.
state_init() { # dir
    [ -n "${1:-}" ] || die "state-init needs a directory"
    [ -e "$1" ] && die "$1 exists: state-init makes a new one"
    need_sfsd
    "$SFSD" init --state "$1" --location "$NAME%$SFSD_PORT"
}
