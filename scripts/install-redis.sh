#!/usr/bin/env bash
# Makes Debian's Redis server available as DEST/bin/redis-server (default .tools/redis) for the tests
# and benchmarks, without running a Redis service. Idempotent.
#
#   scripts/install-redis.sh [DEST]
#
# Debian's `redis-server` package is the `redis-tools` binary plus a service (config, systemd unit,
# an init script that starts Redis on port 6379 when the package is installed) and a symlink
# /usr/bin/redis-server -> redis-check-rdb: the one Redis binary picks its role from the name it was
# started under. So `redis-tools` is installed (binary and libraries, no service) and the same
# symlink is made in DEST/bin. A redis-server already on PATH is used as it is.
set -euo pipefail

dest="${1:-$(cd "$(dirname "$0")/.." && pwd)/.tools/redis}"

works() { "$1" --version >/dev/null 2>&1; }

if works "$dest/bin/redis-server"; then
    exit 0
fi
mkdir -p "$dest/bin"
if command -v redis-server >/dev/null 2>&1 && works "$(command -v redis-server)"; then
    ln -sf "$(command -v redis-server)" "$dest/bin/redis-server"
else
    if ! command -v redis-check-rdb >/dev/null 2>&1; then
        export DEBIAN_FRONTEND=noninteractive
        apt-get install -y -q --no-install-recommends redis-tools >/dev/null 2>&1 || {
            apt-get update -q >/dev/null
            apt-get install -y -q --no-install-recommends redis-tools >/dev/null
        }
    fi
    ln -sf "$(command -v redis-check-rdb)" "$dest/bin/redis-server"
fi
works "$dest/bin/redis-server" || { echo "install-redis: $dest/bin/redis-server does not run" >&2; exit 1; }
"$dest/bin/redis-server" --version
