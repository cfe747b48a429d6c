#!/usr/bin/env bash
# tests/fuzz/cjson_src.sh - unpack Debian's source of the installed cJSON into DIR, so
# the fuzz build compiles cJSON with coverage and sanitizers (meson -Dcjson_src=DIR).
#
# Usage: tests/fuzz/cjson_src.sh DIR
# The version is the installed libcjson-dev's, Debian's patches applied, so the fuzzed
# parser is the one h2oserve runs with. apt works in a private state folder under DIR
# (its own deb-src list, lists and cache): the machine's sources and lists stay as they
# are, and nothing needs root. apt checks the files against the signed Sources index.
# Needs apt and dpkg-source (Debian's dpkg-dev) and the Debian mirror; prints the
# folder holding cJSON.c and exits 0, or says what failed and exits 1.
set -euo pipefail

dir=${1:?usage: cjson_src.sh DIR}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
if [ -f "$dir/src/cJSON.c" ]; then
    echo "$dir/src"
    exit 0
fi

pkg=$(dpkg-query -W -f='${source:Package}' libcjson-dev 2>/dev/null) || {
    echo "cjson_src.sh: libcjson-dev is not installed (./bootstrap.sh installs it)" >&2
    exit 1
}
ver=$(dpkg-query -W -f='${source:Version}' libcjson-dev)
command -v dpkg-source >/dev/null || {
    echo "cjson_src.sh: dpkg-source not found: apt-get install dpkg-dev" >&2
    exit 1
}

# The deb-src entries mirror the machine's deb entries (same mirrors and suites).
apt_dir="$dir/apt"
mkdir -p "$apt_dir/parts" "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial"
found=0
for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    sed 's/^Types:.*/Types: deb-src/' "$f" > "$apt_dir/parts/$(basename "$f")"
    found=1
done
for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    grep -E '^deb ' "$f" | sed 's/^deb /deb-src /' > "$apt_dir/parts/$(basename "$f" .list).list" || true
    found=1
done
[ "$found" = 1 ] || { echo "cjson_src.sh: no apt sources found" >&2; exit 1; }
opts=(-o Dir::Etc::SourceList=/dev/null -o "Dir::Etc::SourceParts=$apt_dir/parts"
      -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache"
      -o APT::Sandbox::User=root)
apt-get "${opts[@]}" -qq update >&2 || { echo "cjson_src.sh: apt-get update failed" >&2; exit 1; }
(cd "$dir" && apt-get "${opts[@]}" -qq source --download-only "$pkg=$ver" >&2) || {
    echo "cjson_src.sh: cannot download the source of $pkg $ver" >&2
    exit 1
}
dsc=$(ls "$dir"/"${pkg}"_*.dsc | head -1)
rm -rf "$dir/src"
dpkg-source -x "$dsc" "$dir/src" >&2
[ -f "$dir/src/cJSON.c" ] || { echo "cjson_src.sh: no cJSON.c in $dsc" >&2; exit 1; }
echo "$dir/src"
