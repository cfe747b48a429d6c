#!/usr/bin/env bash
# bootstrap.sh - install what a fresh Debian 12 machine lacks, then build h2oserve.
#
# Idempotent and non-interactive (root, or sudo without a prompt). Usage:
#   ./bootstrap.sh [BUILD_DIR] [extra meson setup options...]
# The build goes to ./build by default. CUDA is built when nvcc is found.
set -euo pipefail
cd "$(dirname "$0")"

build=${1:-build}
shift || true

pkgs=(build-essential pkg-config meson ninja-build
      libuv1-dev libcjson-dev node-llhttp libdnnl-dev libpcre2-dev libutf8proc-dev libsqlite3-dev
      libpq-dev python3 python3-venv curl
      # the PostgreSQL job store's tests start a private server (tests/lib/pg_testlib.c)
      postgresql)

missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "bootstrap: installing ${missing[*]}" >&2
    sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo -n"
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# nvcc lives outside PATH in the usual CUDA toolkit install.
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
    export PATH="/usr/local/cuda/bin:$PATH"
fi

if [ ! -f "$build/build.ninja" ]; then
    meson setup "$build" "$@" >/dev/null
elif [ $# -gt 0 ]; then
    meson configure "$build" "$@" >/dev/null
fi
ninja -C "$build" >&2
