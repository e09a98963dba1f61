#!/usr/bin/env bash
# Installs what `sfs-bench read --peer sftp,nginx` (and `stream`/`mount`'s sftp and scp
# columns) compare sfs against, where it is missing: OpenSSH's server and client, nginx (1.19.4
# or newer, for TLS 1.3 cipher suites through ssl_conf_command), wrk (the HTTP load) and
# openssl (the throwaway certificate); `sfs-bench web` needs nginx and wrk too, and colorweb's
# tests use curl as their reference client. Idempotent: installs nothing when all are present.
# Debian/Ubuntu with apt-get, as root. Not used by .ci/run: benchmarks are not run in CI.
set -euo pipefail

missing=()
command -v /usr/sbin/sshd >/dev/null 2>&1 || missing+=(openssh-server)
command -v sftp >/dev/null 2>&1 || missing+=(openssh-client)
command -v /usr/sbin/nginx >/dev/null 2>&1 || missing+=(nginx)
command -v wrk >/dev/null 2>&1 || missing+=(wrk)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
command -v curl >/dev/null 2>&1 || missing+=(curl)

if [ ${#missing[@]} -eq 0 ]; then
    echo "bench peers: sshd, sftp, nginx, wrk, openssl and curl are installed"
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
