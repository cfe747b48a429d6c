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
      postgresql
      # the replica tests put nginx in front of three servers (tests/integration/nginxlib.py)
      nginx)

missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "bootstrap: installing ${missing[*]}" >&2
    sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo -n"
    export DEBIAN_FRONTEND=noninteractive
    # Debian's packages start their services as they install (nginx a web server on
    # port 80, postgresql a cluster on 5432); the tests start private ones instead.
    # invoke-rc.d and deb-systemd-invoke, with systemd or without, ask
    # /usr/sbin/policy-rc.d first, and its exit status 101 forbids the start. A policy
    # already there (a container's) is left alone; ours goes once apt-get is done (or
    # fails: the trap).
    policy=/usr/sbin/policy-rc.d
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\n# bootstrap.sh: no service starts while it installs\nexit 101\n' |
            $sudo tee "$policy" >/dev/null
        $sudo chmod 755 "$policy"
        trap "$sudo rm -f $policy" EXIT
    fi
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    if [ -n "$(trap -p EXIT)" ]; then
        $sudo rm -f "$policy"
        trap - EXIT
    fi
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
