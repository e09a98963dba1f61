# A throwaway sshd on 127.0.0.1 for comparing sfs with sshfs (sourced by scripts/pjdfstest.sh).
#
# sshd_start DIR   makes a host key, a client key and a config of its own under DIR, starts
#                  /usr/sbin/sshd on a free port of 127.0.0.1 that accepts only that client
#                  key (root may log in with it; no passwords, no PAM), with the cipher sfs is
#                  compared against (chacha20-poly1305@openssh.com) and the in-process SFTP
#                  server. Sets SSHD_PORT, SSHD_CLIENT_KEY and SSHD_PID.
# sshd_stop        stops that sshd (and only it).
#
# Needs openssh-server (sshd) and openssh-client (ssh-keygen); run as root.

SSHD_PID=
SSHD_PORT=
SSHD_CLIENT_KEY=

sshd_start() {
    local dir=$1 port try
    mkdir -p "$dir" /run/sshd
    chmod 700 "$dir"
    ssh-keygen -q -t ed25519 -N '' -f "$dir/host_key"
    ssh-keygen -q -t ed25519 -N '' -f "$dir/client_key"
    cp "$dir/client_key.pub" "$dir/authorized_keys"
    for try in 1 2 3 4 5 6 7 8; do
        port=$((20000 + (RANDOM * 32768 + RANDOM) % 40000))
        cat >"$dir/sshd_config" <<EOF
ListenAddress 127.0.0.1
Port $port
HostKey $dir/host_key
PidFile $dir/sshd.pid
AuthorizedKeysFile $dir/authorized_keys
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
Ciphers chacha20-poly1305@openssh.com
Subsystem sftp internal-sftp
EOF
        /usr/sbin/sshd -D -e -f "$dir/sshd_config" 2>>"$dir/sshd.log" &
        SSHD_PID=$!
        for _ in $(seq 50); do
            if grep -q "Server listening on 127.0.0.1 port $port" "$dir/sshd.log" 2>/dev/null; then
                SSHD_PORT=$port
                SSHD_CLIENT_KEY=$dir/client_key
                return 0
            fi
            kill -0 "$SSHD_PID" 2>/dev/null || break
            sleep 0.1
        done
        kill "$SSHD_PID" 2>/dev/null || true
        wait "$SSHD_PID" 2>/dev/null || true
        SSHD_PID=
        echo "sshd: port $port did not work (try $try)" >&2
    done
    cat "$dir/sshd.log" >&2
    return 1
}

sshd_stop() {
    if [ -n "$SSHD_PID" ]; then
        kill "$SSHD_PID" 2>/dev/null || true
        wait "$SSHD_PID" 2>/dev/null || true
        SSHD_PID=
    fi
}
