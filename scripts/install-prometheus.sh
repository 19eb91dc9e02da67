#!/usr/bin/env bash
# Installs Prometheus, promtool, Alertmanager and amtool from Debian's packages into a local
# directory (default .tools/prometheus) without installing the packages system-wide, so no service
# is ever started. Idempotent: does nothing when the binaries are already there and run.
#
#   scripts/install-prometheus.sh [DEST]
#
# Layout: DEST/root is the packages' file tree (dpkg-deb -x), DEST/bin holds prometheus, promtool,
# alertmanager and amtool. Debian's alertmanager reads its built-in notification templates from
# /usr/share/prometheus/alertmanager/; when that directory is missing and we may write it (root), the
# two template files are copied there, which is what installing the package would have done.
set -euo pipefail

dest="${1:-$(cd "$(dirname "$0")/.." && pwd)/.tools/prometheus}"
packages=(prometheus prometheus-alertmanager)
am_share=/usr/share/prometheus/alertmanager

installed() {
    local tool
    for tool in prometheus promtool alertmanager amtool; do
        "$dest/bin/$tool" --version >/dev/null 2>&1 || return 1
    done
}

install_templates() {
    [ -f "$am_share/default.tmpl" ] && return 0
    if mkdir -p "$am_share" 2>/dev/null && [ -w "$am_share" ]; then
        cp "$dest/root$am_share/default.tmpl" "$dest/root$am_share/email.tmpl" "$am_share/"
    else
        echo "install-prometheus: cannot write $am_share (not root?); alertmanager will not start" >&2
    fi
}

if installed; then
    install_templates
    exit 0
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# apt downloads as its sandbox user `_apt` when that user can write the directory.
chmod 755 "$work"
chown _apt "$work" 2>/dev/null || true

# Try the lists as they are first; on a fresh machine or with stale lists (a 404 for a version that
# has since been replaced) refresh them and try once more.
if ! (cd "$work" && apt-get download -q "${packages[@]}" >/dev/null 2>&1); then
    apt-get update -q >/dev/null
    (cd "$work" && apt-get download -q "${packages[@]}")
fi

rm -rf "$dest.tmp"
mkdir -p "$dest.tmp/bin"
for deb in "$work"/*.deb; do
    dpkg-deb -x "$deb" "$dest.tmp/root"
done
ln -s ../root/usr/bin/prometheus "$dest.tmp/bin/prometheus"
ln -s ../root/usr/bin/promtool "$dest.tmp/bin/promtool"
ln -s ../root/usr/bin/prometheus-alertmanager "$dest.tmp/bin/alertmanager"
ln -s ../root/usr/bin/amtool "$dest.tmp/bin/amtool"
# Swap in whole so an interrupted run never leaves a half-extracted tree that looks installed.
rm -rf "$dest"
mkdir -p "$(dirname "$dest")"
mv "$dest.tmp" "$dest"

installed || { echo "install-prometheus: binaries in $dest/bin do not run" >&2; exit 1; }
install_templates
"$dest/bin/prometheus" --version 2>&1 | head -n 1
"$dest/bin/alertmanager" --version 2>&1 | head -n 1
