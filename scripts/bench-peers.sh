#!/usr/bin/env bash
# Installs what `sfs-bench read --peer sftp,nginx` (and `stream`/`mount`'s sftp and scp
# columns, `wan` and `web`) compare sfs against, where it is missing: OpenSSH's server and
# client, nginx (1.19.4 or newer, for TLS 1.3 cipher suites through ssl_conf_command), wrk (the
# HTTP load), openssl (the throwaway certificate), curl (`wan`'s HTTPS client, and colorweb's
# tests' reference client) and iproute2 (`wan`'s network namespaces). Idempotent: installs
# nothing when all are present.
# Debian/Ubuntu with apt-get, as root. Not used by .ci/run: benchmarks are not run in CI.
set -euo pipefail

missing=()
command -v /usr/sbin/sshd >/dev/null 2>&1 || missing+=(openssh-server)
command -v sftp >/dev/null 2>&1 || missing+=(openssh-client)
command -v /usr/sbin/nginx >/dev/null 2>&1 || missing+=(nginx)
command -v wrk >/dev/null 2>&1 || missing+=(wrk)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
command -v curl >/dev/null 2>&1 || missing+=(curl)
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
command -v sysctl >/dev/null 2>&1 || missing+=(procps)

if [ ${#missing[@]} -eq 0 ]; then
    echo "bench peers: sshd, sftp, nginx, wrk, openssl, curl and ip are installed"
    exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "bench peers: missing ${missing[*]}; install them (apt-get, as root)" >&2
    exit 1
fi
echo "== installing ${missing[*]}"
apt-get update -qq
# The nginx package's own service is not needed (the bench starts its own nginx on a free
# port); where a service manager starts it anyway it only listens on port 80.
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
echo "bench peers: installed ${missing[*]}"
