#!/usr/bin/env bash
# tests/gpu/check_deps_chroot.sh - prove tests/gpu/deps.sh's unpack path on a machine
# without Debian's -dev packages (docs/cuda.md, "The GPU run's dependencies"), here,
# from scratch: a minimal Debian 12 made with debootstrap, given only what a CUDA +
# PyTorch image has that matters to the build (gcc, g++, python3 with pip, ninja; no
# pkg-config, meson or any of the project's libraries), and the working tree as the
# device tool would send it (tracked and untracked-not-ignored files, plus
# tests/gpu/carry). Inside, with no network (a network namespace of its own):
#   1. source tests/gpu/deps.sh (H2O_DEPS_CUDA=0) and check that it wrote nothing
#      outside its prefix /tmp/h2oserve-deps;
#   2. meson setup -Dcuda=disabled build-chroot, ninja, and the unit suite;
#   3. deps.sh again with each other way of unpacking (ar + tar, Python), and with an
#      image whose own libcjson is older than the carried one.
# Ends with "check_deps_chroot.sh: PASS" or "FAIL: <what>", and its exit status.
#
# Needs root (debootstrap, chroot, mount and network namespaces) and Debian's archive;
# runs tests/gpu/prepare.sh first when tests/gpu/carry/MANIFEST is missing.
# Usage: tests/gpu/check_deps_chroot.sh [DIR]   (default /tmp/h2oserve-chroot, wiped)
#        H2O_CHROOT_REUSE=1 keeps a DIR made before (skips debootstrap and apt).
set -euo pipefail
cd "$(dirname "$0")/../.."

dir=${1:-/tmp/h2oserve-chroot}
t0=$(date +%s)
say() { echo "check_deps_chroot.sh: [$(( $(date +%s) - t0 )) s] $*"; }
fail() { say "FAIL: $*"; exit 1; }

[ "$(id -u)" -eq 0 ] || fail "needs root (debootstrap, chroot, namespaces)"
case $dir in /tmp/?*|/var/tmp/?*) ;; *) fail "DIR must be under /tmp or /var/tmp (it is wiped)" ;; esac
command -v debootstrap >/dev/null || apt-get install -y -qq debootstrap >/dev/null ||
    fail "apt-get install debootstrap"
[ -f tests/gpu/carry/MANIFEST ] || tests/gpu/prepare.sh || fail "tests/gpu/prepare.sh"

# The mirror apt uses here (deb822 or one-line sources), else Debian's own.
mirror=$(sed -n 's/^URIs: *\([^ ]*debian\)\/*$/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -1)
[ -n "$mirror" ] || mirror=$(sed -n 's/^deb \(http[^ ]*\) bookworm .*/\1/p' /etc/apt/sources.list 2>/dev/null | head -1)
[ -n "$mirror" ] || mirror=http://deb.debian.org/debian

# What a CUDA + PyTorch image has that the build cares about. gcc brings binutils, the
# C library's headers and libgomp; python3 brings libsqlite3-0 and the base system
# libpcre2-8-0, as an Ubuntu image has them: those two the loader takes from the image.
image_pkgs=(gcc g++ python3 python3-pip ninja-build ca-certificates)
# What it must not have: deps.sh is to bring these.
absent=(pkg-config pkgconf pkgconf-bin meson libdnnl-dev libdnnl2 libuv1-dev libuv1
        libcjson-dev libcjson1 node-llhttp libpcre2-dev libutf8proc-dev libsqlite3-dev ocl-icd-libopencl1)

if [ "${H2O_CHROOT_REUSE:-0}" = 1 ] && [ -x "$dir/usr/bin/gcc" ]; then
    say "reusing $dir"
else
    rm -rf "$dir"
    say "debootstrap --variant=minbase bookworm $dir $mirror"
    debootstrap --variant=minbase bookworm "$dir" "$mirror" > "$dir.debootstrap.log" 2>&1 ||
        fail "debootstrap (log: $dir.debootstrap.log)"
    say "apt-get install ${image_pkgs[*]}"
    cp /etc/resolv.conf "$dir/etc/resolv.conf"
    chroot "$dir" /bin/sh -c "export DEBIAN_FRONTEND=noninteractive; apt-get update -qq &&
        apt-get install -y -qq --no-install-recommends ${image_pkgs[*]}" > "$dir.apt.log" 2>&1 ||
        fail "apt-get install in the chroot (log: $dir.apt.log)"
fi
for p in "${absent[@]}"; do
    if chroot "$dir" dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        fail "the chroot has $p, which deps.sh is meant to bring"
    fi
done

# The working tree as the device tool sends it, into /src.
rm -rf "$dir/src" "$dir/tmp/h2oserve-deps" && mkdir -p "$dir/src"
{ git ls-files -z --cached --others --exclude-standard; find tests/gpu/carry -type f -print0; } |
    tar --null -T - -cf - 2>/dev/null | tar -xf - -C "$dir/src"
say "copied the tree that travels: $(du -sh "$dir/src" | cut -f1) into $dir/src"

# The steps inside: a mount namespace for /proc and /dev (gone when it ends), and a
# network namespace with no interfaces, as on the GPU machine.
cat > "$dir/src/.chroot-steps.sh" <<'EOF'
set -uo pipefail
cd /src
export H2O_DEPS_CUDA=0
step() { echo "check_deps_chroot.sh: (chroot, ${SECONDS} s) $*"; }
touch /tmp/.before-deps
sleep 1
step "source tests/gpu/deps.sh"
source tests/gpu/deps.sh || { step "FAIL: deps.sh"; exit 1; }
# Nothing written outside its prefix (and this tree and /tmp, where it lives).
changed=$(find / -xdev \( -path /src -o -path /tmp -o -path /proc -o -path /dev \) -prune \
    -o -newer /tmp/.before-deps -print 2>/dev/null | head -5)
[ -z "$changed" ] || { step "FAIL: deps.sh wrote outside its prefix: $changed"; exit 1; }
step "deps.sh wrote nothing outside $H2O_DEPS_PREFIX"
step "meson setup -Dcuda=disabled build-chroot"
rm -rf build-chroot
meson setup -Dcuda=disabled build-chroot > /tmp/setup.log 2>&1 ||
    { cat /tmp/setup.log; step "FAIL: meson setup"; exit 1; }
grep -E "^(The Meson build system|Version:|C compiler for|Run-time dependency|Library dnnl|Found pkg-config|Program (ninja|pkg-config))" /tmp/setup.log | sed 's/^/    /'
step "ninja -C build-chroot"
ninja -C build-chroot > /tmp/ninja.log 2>&1 || { tail -40 /tmp/ninja.log; step "FAIL: ninja"; exit 1; }
tail -1 /tmp/ninja.log | sed 's/^/    /'
echo "    warnings: $(grep -c 'warning:' /tmp/ninja.log)"
rpath=$(readelf -d build-chroot/server/h2oserve | sed -n 's/.*(R[UN]*PATH).*\[\(.*\)\]/\1/p')
echo "    h2oserve's RUNPATH: ${rpath:-none}; the loader finds:"
ldd build-chroot/server/h2oserve | grep -E 'dnnl|uv|cjson|pcre2|sqlite|OpenCL' | sed 's/ (0x.*//; s/^[[:space:]]*/    /'
step "meson test -C build-chroot --suite unit"
meson test -C build-chroot --suite unit --print-errorlogs > /tmp/test.log 2>&1
st=$?
grep -E '^(Ok|Expected Fail|Fail|Unexpected Pass|Skipped|Timeout):' /tmp/test.log | sed 's/^/    /'
[ $st -eq 0 ] || { tail -60 /tmp/test.log; step "FAIL: the unit suite"; exit 1; }
# The other ways of unpacking, each from an empty prefix (deps.sh empties it).
for how in ar python; do
    if [ $how = ar ] && ! command -v xz >/dev/null; then
        step "deps.sh with H2O_DEPS_UNPACK=ar: skipped, no xz here (Debian 12's data.tar is xz; deps.sh picks ar only where xz exists)"
        continue
    fi
    ( export H2O_DEPS_UNPACK=$how; source tests/gpu/deps.sh >/tmp/deps-$how.log 2>&1 ) ||
        { cat /tmp/deps-$how.log; step "FAIL: deps.sh with H2O_DEPS_UNPACK=$how"; exit 1; }
    step "deps.sh with H2O_DEPS_UNPACK=$how: $(grep -o 'unpacked .*' /tmp/deps-$how.log), probe passed"
done
# An image whose own libcjson.so.1 is older than the carried headers: the loader must
# get the carried one.
mkdir -p /tmp/old-cjson
echo 'const char *cJSON_Version(void) { return "1.7.10"; }' > /tmp/old-cjson/c.c
cc -shared -fPIC -Wl,-soname,libcjson.so.1 -o /tmp/old-cjson/libcjson.so.1 /tmp/old-cjson/c.c
( export LD_LIBRARY_PATH=/tmp/old-cjson; source tests/gpu/deps.sh >/tmp/deps-old.log 2>&1 ) &&
    grep -q 'cJSON: the image.s 1.7.10 is older' /tmp/deps-old.log ||
    { cat /tmp/deps-old.log; step "FAIL: deps.sh with an older libcjson.so.1 on the image"; exit 1; }
step "deps.sh with an older libcjson.so.1 on the image: $(grep -o 'cJSON: .*' /tmp/deps-old.log)"
exit 0
EOF
say "in the chroot, without a network: deps.sh, build, unit suite"
status=0
unshare --mount --net --fork /bin/sh -c "
    mount -t proc proc '$dir/proc' && mount --rbind /dev '$dir/dev' &&
    exec chroot '$dir' /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/root \
        TERM=dumb /bin/bash /src/.chroot-steps.sh" || status=$?
[ $status -eq 0 ] || fail "in the chroot (exit $status)"
say "PASS"
