#!/usr/bin/env bash
# tests/gpu/prepare.sh - fill tests/gpu/carry/ with what the GPU machine's image lacks
# to build h2oserve (docs/cuda.md, "The GPU run's dependencies"). Run it here, on a
# Debian 12 machine that reaches Debian's archive and PyPI; the GPU machine reaches
# neither, so the folder travels with the working tree (the device tool's `carry`:
# tests/gpu/carry) and tests/gpu/deps.sh unpacks it there into a private prefix.
#
# What it downloads:
#   deb/    Debian 12 packages (apt-get download): the -dev and runtime packages of
#           oneDNN, libuv, cJSON, PCRE2 (8-bit), SQLite, node-llhttp's C sources,
#           pkgconf and ninja, plus the runtime libraries they depend on that a CUDA
#           image may lack (followed through Depends, below);
#   wheel/  meson (a pinned version, the one the chroot check ran) and every
#           NAME==VERSION of tests/gpu/wheels.txt, CPython 3.12 manylinux x86-64,
#           without their dependencies;
#   MANIFEST  one line per file: kind, name, version, bytes, sha256, path; deps.sh
#           checks the files against it before it unpacks anything.
#
# Idempotent: a file already there whose sha256 is the archive's (debs) or that pip
# reports as already downloaded (wheels) is kept; what is no longer wanted is
# removed. Fails when the folder passes H2O_CARRY_LIMIT_MIB (default 50).
#
# Usage: tests/gpu/prepare.sh [--no-update]   (--no-update: skip apt-get update)
set -euo pipefail
cd "$(dirname "$0")/../.."

carry=tests/gpu/carry
limit_mib=${H2O_CARRY_LIMIT_MIB:-50}
# The meson the GPU run uses (deps.sh puts it before the image's own, whose version
# nobody has read): new enough for Python 3.12 and CUDA 13, and checked with this
# project end to end (tests/gpu/check_deps_chroot.sh; CUDA configure and build here).
meson_version=1.12.1

# The packages asked for by name: the -dev and runtime packages of what meson.build
# looks up, pkgconf (an image may have no pkg-config; deps.sh uses it only then), and
# ninja-build (135 KB; the image has pip's ninja, and deps.sh uses this one only where
# no ninja is on PATH).
roots=(libdnnl-dev libdnnl2 libuv1-dev libuv1 libcjson-dev libcjson1 node-llhttp
       libpcre2-dev libpcre2-8-0 libutf8proc-dev libutf8proc2 libsqlite3-dev libsqlite3-0
       pkgconf-bin libpkgconf3
       ninja-build)
# Not carried on purpose, though a root depends on them:
#   libpcre2-16-0, libpcre2-32-0, libpcre2-posix3: the build links libpcre2-8 alone
#       (the tokenizer uses the 8-bit API); their .so links in the unpacked
#       libpcre2-dev point nowhere, which nothing reads;
#   node-debug, node-semver: node-llhttp's JavaScript; the build compiles only its C
#       sources (meson.build, llhttp).
# (Debian's pkg-config and pkgconf packages are wrappers around pkgconf-bin; deps.sh
# makes its own pkg-config link.)
skip=(libpcre2-16-0 libpcre2-32-0 libpcre2-posix3 node-debug node-semver)
# Where Depends are no longer followed: what any CUDA image with a host compiler has
# (nvcc needs gcc, and gcc brings glibc, its headers, libgcc, libstdc++ and, here,
# libgomp). deps.sh checks on the machine that the carried libraries load against
# them (the C and C++ runtime's symbol versions; MANIFEST's "needs" lines).
base=(libc6 libc6-dev libc-dev libgcc-s1 libstdc++6 libgomp1)
# The carried libraries' ELF dependencies (DT_NEEDED) that the base provides; any other
# one must come from a carried package, or this script fails (Depends and the files
# disagree).
base_sonames='^(libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|libgomp|ld-linux-x86-64)\.so'

die() { echo "prepare.sh: $*" >&2; exit 1; }
in_list() { local x=$1; shift; local y; for y in "$@"; do [ "$x" = "$y" ] && return 0; done; return 1; }

[ "$(dpkg --print-architecture)" = amd64 ] || die "needs an amd64 Debian machine (the GPU machine is x86-64)"
. /etc/os-release
[ "${VERSION_CODENAME:-}" = bookworm ] || echo "prepare.sh: warning: this is $PRETTY_NAME, not Debian 12; the check ran with bookworm's packages" >&2
py=$(command -v python3) || die "needs python3 with pip (apt-get install python3-pip)"
"$py" -m pip --version >/dev/null 2>&1 || die "needs pip for $py (apt-get install python3-pip)"
for t in apt-get apt-cache dpkg-deb sha256sum readelf; do
    command -v $t >/dev/null || die "needs $t"
done

if [ "${1:-}" != --no-update ]; then
    sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo -n"
    $sudo apt-get update -qq || die "apt-get update failed (or use --no-update)"
fi

mkdir -p "$carry/deb" "$carry/wheel"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
manifest=$tmp/MANIFEST
touch "$manifest"
listed() { cut -f6 "$manifest" | grep -qxF "$1"; }

# One field of a package's candidate version (the one apt-get download fetches);
# apt-cache takes most of a second a call, so each package is read once.
mkdir "$tmp/show"
field() {
    [ -f "$tmp/show/$1" ] || apt-cache show --no-all-versions "$1:amd64" > "$tmp/show/$1" 2>/dev/null || true
    sed -n "s/^$2: //p" "$tmp/show/$1" | head -1
}

# --- the packages: the roots and what they depend on, down to the base -----------
queue=("${roots[@]}")
want=()
while [ ${#queue[@]} -gt 0 ]; do
    p=${queue[0]}
    queue=("${queue[@]:1}")
    in_list "$p" "${want[@]}" && continue
    [ -n "$(field "$p" Version)" ] || die "no package $p in apt's lists"
    want+=("$p")
    # Depends and Pre-Depends: the first choice of each alternative, versions dropped.
    for d in $( { field "$p" Depends; echo; field "$p" Pre-Depends; } |
                tr ',' '\n' | sed 's/|.*//; s/(.*)//; s/:any//; s/ //g' | grep . ); do
        in_list "$d" "${base[@]}" "${skip[@]}" "${want[@]}" || queue+=("$d")
    done
done

for p in "${want[@]}"; do
    ver=$(field "$p" Version)
    sha=$(field "$p" SHA256)
    file=deb/$(basename "$(field "$p" Filename)")
    if [ -f "$carry/$file" ] && [ "$(sha256sum < "$carry/$file" | cut -d' ' -f1)" = "$sha" ]; then
        echo "prepare.sh: have     $file"
    else
        # apt fetches as its user _apt, who must be able to write there.
        mkdir -p "$tmp/dl" && chmod 755 "$tmp" && chmod 777 "$tmp/dl"
        (cd "$tmp/dl" && apt-get download -qq "$p:amd64") || die "apt-get download $p failed"
        mv "$tmp"/dl/*.deb "$carry/$file"
        [ "$(sha256sum < "$carry/$file" | cut -d' ' -f1)" = "$sha" ] || die "$file: sha256 is not the archive's"
        echo "prepare.sh: fetched  $file"
    fi
    printf 'deb\t%s\t%s\t%s\t%s\t%s\n' "$p" "$ver" "$(stat -c %s "$carry/$file")" "$sha" "$file" >> "$manifest"
done

# --- the carried libraries: their ELF dependencies and symbol versions ---------------
mkdir "$tmp/x"
for f in "$carry"/deb/*.deb; do
    listed "${f#"$carry"/}" && dpkg-deb -x "$f" "$tmp/x"
done
libs=$(find "$tmp/x" -type f \( -name '*.so*' -o -path '*/bin/*' \) | sort)
provided=$(find "$tmp/x" -name '*.so*' -printf '%f\n' | sort -u)
glibc=0 glibcxx=0
for f in $libs; do
    readelf -h "$f" >/dev/null 2>&1 || continue   # not ELF
    for n in $(readelf -d "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
        echo "$n" | grep -Eq "$base_sonames" || echo "$provided" | grep -qxF "$n" ||
            die "$(basename "$f") needs $n, which neither a carried package nor the base (glibc, gcc's runtime) gives: add its package to roots"
    done
    # The newest GLIBC_ and GLIBCXX_ versions it asks for.
    for v in $(readelf -V "$f" | grep -o 'GLIBC_2\.[0-9]*' | cut -d. -f2 | sort -n | tail -1); do
        [ "$v" -gt "$glibc" ] && glibc=$v
    done
    for v in $(readelf -V "$f" | grep -o 'GLIBCXX_3\.4\.[0-9]*' | cut -d. -f3 | sort -n | tail -1); do
        [ "$v" -gt "$glibcxx" ] && glibcxx=$v
    done
done

# --- the wheels -----------------------------------------------------------------------
# pip matches each platform tag exactly; these are the tags of wheels that run on a
# glibc >= 2.17 x86-64 machine with CPython 3.12 (pure-Python wheels match any).
platforms=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
           --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64
           --platform manylinux1_x86_64)
wheels=("meson==$meson_version")
while read -r line; do
    line=${line%%#*}
    line=${line//[[:space:]]/}
    [ -z "$line" ] && continue
    [[ $line == *==* ]] || die "tests/gpu/wheels.txt: '$line' is not NAME==VERSION"
    wheels+=("$line")
done < tests/gpu/wheels.txt

for w in "${wheels[@]}"; do
    name=${w%%==*} ver=${w#*==}
    "$py" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
        --python-version 3.12 --implementation cp "${platforms[@]}" \
        -d "$carry/wheel" "$w" || die "pip download $w failed"
    # A wheel's file name spells the project with '_' for '-' and '.', any case.
    norm=$(echo "$name" | tr 'A-Z.-' 'a-z__')
    file=$(cd "$carry" && find wheel -maxdepth 1 -iname "${norm}-${ver}-*.whl" | head -1)
    [ -n "$file" ] || die "pip download $w saved no wheel named ${norm}-${ver}-*.whl"
    printf 'wheel\t%s\t%s\t%s\t%s\t%s\n' "$name" "$ver" "$(stat -c %s "$carry/$file")" \
        "$(sha256sum < "$carry/$file" | cut -d' ' -f1)" "$file" >> "$manifest"
    echo "prepare.sh: wheel    $file"
done

# --- what is no longer wanted goes; the manifest --------------------------------------
for f in "$carry"/deb/* "$carry"/wheel/*; do
    [ -e "$f" ] || continue
    listed "${f#"$carry"/}" || { echo "prepare.sh: removed  ${f#"$carry"/}"; rm -f "$f"; }
done
{
    echo "# tests/gpu/carry/MANIFEST - written by tests/gpu/prepare.sh $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "# from $PRETTY_NAME amd64 and PyPI; columns: kind name version bytes sha256 path"
    echo "# needs: the newest glibc and libstdc++ symbol versions the carried binaries ask for"
    printf 'needs\tglibc\t2.%s\n' "$glibc"
    printf 'needs\tglibcxx\t3.4.%s\n' "$glibcxx"
    cat "$manifest"
} > "$carry/MANIFEST"

bytes=$(du -sb "$carry" | cut -f1)
mib=$(( (bytes + 1048575) / 1048576 ))
echo "prepare.sh: $carry: $(grep -c '^deb' "$carry/MANIFEST") debs, $(grep -c '^wheel' "$carry/MANIFEST") wheels, $bytes bytes ($mib MiB; limit $limit_mib MiB)"
echo "prepare.sh: the binaries need glibc >= 2.$glibc and libstdc++ GLIBCXX_3.4.$glibcxx"
# The device tool sends the tracked and untracked-not-ignored files plus what carry
# names, 64 MiB in all.
tree=$(git ls-files -z --cached --others --exclude-standard | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
echo "prepare.sh: with the working tree ($(( tree / 1048576 )) MiB) that is $(( (tree + bytes) / 1048576 )) MiB of the device tool's 64"
if [ "$mib" -gt "$limit_mib" ]; then
    die "FAIL: $carry is $mib MiB, over the $limit_mib MiB limit"
fi
echo "prepare.sh: done; carry: [\"$carry\"] (the device tool's run argument)"
