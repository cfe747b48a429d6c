# tests/gpu/deps.sh - sourced by tests/gpu/run.sh (stage 1): make the build's tools and
# libraries visible on the GPU machine, whose image is not a Debian box and reaches no
# registry (docs/cuda.md, "The GPU run's dependencies"). Returns non-zero, naming what
# is missing, when the build could not succeed.
#
# What it does, in order:
#   1. nvcc on PATH (the toolkit's bin/ is outside it in the usual install);
#   2. tests/gpu/carry/ (made by tests/gpu/prepare.sh), when present: checks every file
#      against MANIFEST, unpacks the .debs into a private prefix P (dpkg-deb -x; ar and
#      tar, or Python, where dpkg is missing), rewrites their pkg-config files from
#      prefix=/usr to P/usr, and installs the wheels (meson, the benchmark's peers) with
#      pip into P/site; nothing is written outside P, and / is never touched;
#   3. points the tools at P: PATH (meson; pkg-config and ninja where the image has
#      none), PKG_CONFIG_PATH, C_INCLUDE_PATH and CPLUS_INCLUDE_PATH (as -isystem, as
#      /usr/include is on Debian), LIBRARY_PATH, PYTHONPATH, and LD_LIBRARY_PATH for the
#      carried runtime libraries the image's loader does not know already;
#   4. finds cuBLAS and NCCL: in the toolkit, where the compiler looks, or in NVIDIA's
#      pip wheels (nvidia-nccl-cu13 is libnccl.so.2 without a libnccl.so: P/cuda/lib
#      gets the links the linker and loader need);
#   5. checks: meson, ninja, a C compiler, nvcc; pkg-config finds libuv, libcjson,
#      libpcre2-8 and sqlite3; llhttp's sources exist; a probe program compiled and
#      linked against all five libraries runs (which proves the loader takes the
#      carried libraries on this image's glibc and libstdc++).
# Without tests/gpu/carry/ it checks the machine as it is (a Debian box after
# ./bootstrap.sh passes).
#
# Environment: H2O_DEPS_PREFIX (P; default /tmp/h2oserve-deps, emptied first),
# H2O_DEPS_CUDA=0 (no nvcc, cuBLAS or NCCL needed: a -Dcuda=disabled build),
# H2O_DEPS_PYTHON (default python3, the image's: the one that has torch and pip),
# H2O_DEPS_UNPACK=dpkg|ar|python (one way of unpacking, for the chroot check).
# Exports, besides the paths above: H2O_DEPS_PREFIX, and H2O_GPU_SITE (P/site, the
# carried wheels; also first on PYTHONPATH).

_h2o_deps_say() { echo "deps.sh: $*"; }

# Prepend $2 to the colon-separated variable named $1 (and export it).
_h2o_deps_path() {
    local v=$1 d=$2
    export "$v=$d${!v:+:${!v}}"
}

# Drop from each search path what an earlier run put there (under $P), so that this
# file can be sourced again.
_h2o_deps_unpath() {
    local v d out=""
    local IFS=:
    for v in PATH PKG_CONFIG_PATH C_INCLUDE_PATH CPLUS_INCLUDE_PATH LIBRARY_PATH \
             LD_LIBRARY_PATH PYTHONPATH; do
        [ -n "${!v:-}" ] || continue
        out=""
        for d in ${!v}; do
            case $d in "$P"|"$P"/*) ;; *) out=${out:+$out:}$d ;; esac
        done
        if [ -n "$out" ]; then export "$v=$out"; else unset "$v"; fi
    done
    hash -r
}

# Unpack the .debs "$@" into $P with the first way that exists (or H2O_DEPS_UNPACK's).
_h2o_deps_unpack() {
    local how=${H2O_DEPS_UNPACK:-} f t
    if [ -z "$how" ]; then
        if command -v dpkg-deb >/dev/null; then how="dpkg"
        elif command -v ar >/dev/null && command -v xz >/dev/null; then how="ar"
        else how="python"
        fi
    fi
    case $how in
    dpkg)
        for f in "$@"; do dpkg-deb -x "$f" "$P" || return 1; done ;;
    ar)
        t=$P/.ar
        for f in "$@"; do
            rm -rf "$t" && mkdir -p "$t" && (cd "$t" && ar x "$f") &&
                tar -xf "$t"/data.tar.* -C "$P" || return 1
        done
        rm -rf "$t" ;;
    python)
        # A .deb is an ar archive whose member data.tar.* holds the files.
        "$py" - "$P" "$@" <<'EOF' || return 1
import io, sys, tarfile
dest = sys.argv[1]
for deb in sys.argv[2:]:
    with open(deb, 'rb') as f:
        if f.read(8) != b'!<arch>\n':
            sys.exit(deb + ': not an ar archive')
        while True:
            head = f.read(60)
            if len(head) < 60:
                break
            name, size = head[:16].decode().strip().rstrip('/'), int(head[48:58])
            data = f.read(size + size % 2)[:size]
            if name.startswith('data.tar'):
                with tarfile.open(fileobj=io.BytesIO(data)) as t:
                    try:
                        t.extractall(dest, filter='fully_trusted')
                    except TypeError:  # Python before 3.11.4: no filters
                        t.extractall(dest)
EOF
        ;;
    *)
        _h2o_deps_say "H2O_DEPS_UNPACK=$how: not dpkg, ar or python"; return 1 ;;
    esac
    _h2o_deps_say "unpacked ${#} .debs with $how into $P"
}

# Is the shared library with this soname known to the loader already (ld.so.cache or
# LD_LIBRARY_PATH)?
_h2o_deps_loader_has() {
    local d
    local IFS=:
    for d in ${LD_LIBRARY_PATH:-}; do
        [ -n "$d" ] && [ -e "$d/$1" ] && return 0
    done
    [ -n "$ldconfig" ] && "$ldconfig" -p 2>/dev/null | grep -q "^[[:space:]]*$1 "
}

# Find lib$1.so (soname lib$1.so.$2, header $3) for the CUDA build: the toolkit, then
# where the compiler looks, then NVIDIA's pip wheels of the image's Python, whose
# libraries have only the soname (libnccl.so.2): P/cuda/lib gets lib$1.so for the
# linker and lib$1.so.$2 for the loader. Sets `where` (the caller's); returns 1 if none.
_h2o_deps_cuda_lib() {
    local lib=$1 major=$2 hdr=$3 sp f inc
    if [ -e "$cuda_root/lib64/lib$lib.so" ] && [ -e "$cuda_root/include/$hdr" ]; then
        where="the toolkit, $cuda_root/lib64"; return 0
    fi
    f=$("$cc" -print-file-name="lib$lib.so" 2>/dev/null)
    if [ "$f" != "lib$lib.so" ] && [ -e "$f" ] &&
        echo "#include <$hdr>" | "$cc" -E -x c -I"$cuda_root/include" - >/dev/null 2>&1; then
        where="the compiler's library path, $f"; return 0
    fi
    for sp in $("$py" -c 'import sys; print("\n".join(p for p in sys.path if p.endswith("-packages")))' 2>/dev/null); do
        for f in "$sp"/nvidia/*/lib/"lib$lib.so.$major"; do
            [ -e "$f" ] || continue
            inc=$(dirname "$(dirname "$f")")/include
            [ -e "$inc/$hdr" ] || continue
            mkdir -p "$P/cuda/lib"
            ln -sf "$f" "$P/cuda/lib/lib$lib.so"
            ln -sf "$f" "$P/cuda/lib/lib$lib.so.$major"
            # cuBLAS loads cuBLASLt, which sits beside it in the wheel.
            if [ "$lib" = cublas ] && [ -e "$(dirname "$f")/libcublasLt.so.$major" ]; then
                ln -sf "$(dirname "$f")/libcublasLt.so.$major" "$P/cuda/lib/"
            fi
            _h2o_deps_path C_INCLUDE_PATH "$inc"
            _h2o_deps_path CPLUS_INCLUDE_PATH "$inc"
            where="the pip wheel in $(dirname "$(dirname "$f")"), linked from $P/cuda/lib"
            return 0
        done
    done
    return 1
}

# One program against all five libraries: headers, link and load on this image's
# glibc and libstdc++. It prints, per library, the version its headers say and the
# version the loader gave it; where the image's own copy (which the loader prefers,
# above) is older than the headers, the carried one goes into P/ld and the probe runs
# again. Sets `probe_err` (the caller's) when it fails.
_h2o_deps_probe() {
    local dir=$P/probe out name soname built loaded older pass where extra
    mkdir -p "$dir"
    cat > "$dir/probe.c" <<'EOF'
#define PCRE2_CODE_UNIT_WIDTH 8
#include <stdio.h>
#include <string.h>
#include <cJSON.h>
#include <oneapi/dnnl/dnnl.h>
#include <pcre2.h>
#include <sqlite3.h>
#include <uv.h>
#define STR_(x) #x
#define STR(x) STR_(x)
int main(void)
{
    const dnnl_version_t *d = dnnl_version();
    char pcre[64] = "";
    pcre2_config(PCRE2_CONFIG_VERSION, pcre);
    pcre[strcspn(pcre, " ")] = '\0';   /* "10.42 2022-12-11" */
    printf("oneDNN libdnnl.so.2 %d.%d.%d %d.%d.%d\n", DNNL_VERSION_MAJOR,
           DNNL_VERSION_MINOR, DNNL_VERSION_PATCH, d->major, d->minor, d->patch);
    printf("libuv libuv.so.1 %d.%d.%d %s\n", UV_VERSION_MAJOR, UV_VERSION_MINOR,
           UV_VERSION_PATCH, uv_version_string());
    printf("cJSON libcjson.so.1 %d.%d.%d %s\n", CJSON_VERSION_MAJOR, CJSON_VERSION_MINOR,
           CJSON_VERSION_PATCH, cJSON_Version());
    printf("PCRE2 libpcre2-8.so.0 %s %s\n", STR(PCRE2_MAJOR) "." STR(PCRE2_MINOR), pcre);
    printf("SQLite libsqlite3.so.0 %s %s\n", SQLITE_VERSION, sqlite3_libversion());
    return 0;
}
EOF
    # shellcheck disable=SC2046
    if ! out=$("$cc" -o "$dir/probe" "$dir/probe.c" \
            $(pkg-config --cflags --libs libuv libcjson libpcre2-8 sqlite3) -ldnnl 2>&1); then
        probe_err="a program linked against oneDNN, libuv, cJSON, PCRE2 and SQLite (the compiler said: $(echo "$out" | head -5))"
        return 1
    fi
    for pass in 1 2; do
        if ! out=$("$dir/probe" 2>&1); then
            probe_err="a program linked against oneDNN, libuv, cJSON, PCRE2 and SQLite that loads (the loader said: $(echo "$out" | head -3); this image has $(getconf GNU_LIBC_VERSION 2>/dev/null), the carried libraries need $(awk -F'\t' '$1 == "needs" {printf "%s %s ", $2, $3}' "$carry/MANIFEST" 2>/dev/null))"
            return 1
        fi
        older=0
        while read -r name soname built loaded; do
            [ "$built" = "$loaded" ] && continue
            [ "$(printf '%s\n%s\n' "$built" "$loaded" | sort -V | head -1)" = "$loaded" ] || continue
            if [ "$pass" = 2 ] || [ ! -e "$P/usr/lib/x86_64-linux-gnu/$soname" ]; then
                probe_err="$name $built or newer at run time (the loader found $loaded, older than the headers)"
                return 1
            fi
            ln -sf "$P/usr/lib/x86_64-linux-gnu/$soname" "$P/ld/$soname"
            _h2o_deps_say "$name: the image's $loaded is older than the carried $built; the loader takes the carried one"
            older=1
        done <<< "$out"
        [ $older = 0 ] && break
    done
    _h2o_deps_say "libraries (headers; loaded from):"
    while read -r name soname built loaded; do
        where=$(ldd "$dir/probe" 2>/dev/null | sed -n "s#^[[:space:]]*$soname => \(.*\) (0x.*#\1#p")
        extra=""
        [ "$loaded" != "$built" ] && extra=" (loaded: $loaded)"
        echo "  $name $built$extra; ${where:-?}"
    done <<< "$out"
    return 0
}

_h2o_deps_main() {
    local root carry P py cc ldconfig missing=() kind sha path f n
    local cuda=${H2O_DEPS_CUDA:-1} cuda_root cuda_major where site probe_err
    root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
    carry=$root/tests/gpu/carry
    P=${H2O_DEPS_PREFIX:-/tmp/h2oserve-deps}
    py=${H2O_DEPS_PYTHON:-python3}
    ldconfig=$(command -v ldconfig || { [ -x /sbin/ldconfig ] && echo /sbin/ldconfig; } || true)

    # 1. nvcc lives outside PATH in the usual CUDA toolkit install.
    if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
        export PATH="/usr/local/cuda/bin:$PATH"
    fi

    # 2. The carried folder into the prefix (emptied first: each run starts clean).
    case $P in
    /tmp/?*|"$root"/?*) ;;
    *) _h2o_deps_say "H2O_DEPS_PREFIX=$P: must be under /tmp or the source tree (it is emptied)"
       return 1 ;;
    esac
    _h2o_deps_unpath
    rm -rf "$P" && mkdir -p "$P/bin" || return 1
    if [ -f "$carry/MANIFEST" ]; then
        while IFS=$'\t' read -r kind _ _ _ sha path; do
            case $kind in deb|wheel) ;; *) continue ;; esac
            if [ ! -f "$carry/$path" ]; then
                missing+=("$path (in MANIFEST, not in tests/gpu/carry: rerun tests/gpu/prepare.sh)")
            elif [ "$(sha256sum < "$carry/$path" | cut -d' ' -f1)" != "$sha" ]; then
                missing+=("an intact $path (its sha256 is not MANIFEST's: damaged in transit?)")
            fi
        done < "$carry/MANIFEST"
        if [ ${#missing[@]} -gt 0 ]; then
            _h2o_deps_say "FAIL: tests/gpu/carry is incomplete:"; printf '  %s\n' "${missing[@]}"
            return 1
        fi
        _h2o_deps_unpack "$carry"/deb/*.deb || { _h2o_deps_say "FAIL: unpacking the .debs"; return 1; }
        # Debian's symbolic links are relative; an absolute one would point into /.
        find "$P" -type l -lname '/*' | while read -r f; do ln -sfn "$P$(readlink "$f")" "$f"; done

        # pkg-config files say prefix=/usr (or libdir=/usr/lib/...): point every such
        # variable at the prefix. (PKG_CONFIG_SYSROOT_DIR=$P works with Debian's pkgconf
        # 1.8 too, but it would also move every .pc file of the image's own, and
        # freedesktop's pkg-config 0.29, which an image may have, leaves variables
        # unprefixed.)
        for f in "$P"/usr/lib/x86_64-linux-gnu/pkgconfig/*.pc "$P"/usr/share/pkgconfig/*.pc; do
            [ -f "$f" ] && sed -i -E "s#^([A-Za-z_][A-Za-z0-9_]*)=/usr(/|\$)#\\1=$P/usr\\2#" "$f"
        done
        # llhttp ships C sources, not a library: meson.build finds them through this
        # file when they are not in Debian's /usr/share (meson.build, llhttp).
        if [ -f "$P/usr/share/llhttp/api.c" ]; then
            mkdir -p "$P/lib/pkgconfig"
            printf '%s\n' "prefix=$P/usr" 'srcdir=${prefix}/share/llhttp' \
                'includedir=${prefix}/share/include/llhttp' '' 'Name: h2oserve-llhttp' \
                "Description: llhttp's C sources, unpacked by tests/gpu/deps.sh" \
                "Version: $(awk '/^#define LLHTTP_VERSION_(MAJOR|MINOR|PATCH) / {v = v (v ? "." : "") $3} END {print v}' "$P/usr/share/include/llhttp/llhttp.h")" \
                'Cflags: -I${includedir}' > "$P/lib/pkgconfig/h2oserve-llhttp.pc"
            _h2o_deps_path PKG_CONFIG_PATH "$P/lib/pkgconfig"
        fi
        _h2o_deps_path PKG_CONFIG_PATH "$P/usr/share/pkgconfig"
        _h2o_deps_path PKG_CONFIG_PATH "$P/usr/lib/x86_64-linux-gnu/pkgconfig"
        _h2o_deps_path C_INCLUDE_PATH "$P/usr/include"
        _h2o_deps_path CPLUS_INCLUDE_PATH "$P/usr/include"
        _h2o_deps_path LIBRARY_PATH "$P/usr/lib/x86_64-linux-gnu"

        # The loader gets from the prefix only the libraries the image lacks (and, after
        # the probe below, those whose image copy is older than the carried headers):
        # an image's own libsqlite3 or libpcre2, the same or newer than Debian 12's,
        # stays what its Python and tools load, since LD_LIBRARY_PATH applies to every
        # program run.sh starts, the benchmark's peers too. (Meson links pkg-config
        # dependencies by -L and -l, without a RUNPATH, so our binaries go by the loader
        # as well.)
        mkdir -p "$P/ld"
        for f in "$P"/usr/lib/x86_64-linux-gnu/lib*.so.*; do
            n=$(basename "$f")
            [[ $n =~ \.so\.[0-9]+$ ]] || continue       # sonames only: libfoo.so.N
            [ -e "$f" ] || continue                      # (links to what is not carried)
            _h2o_deps_loader_has "$n" || ln -s "$f" "$P/ld/$n"
        done
        _h2o_deps_path LD_LIBRARY_PATH "$P/ld"
        _h2o_deps_say "the loader takes from the prefix: $(ls "$P/ld" | tr '\n' ' ')"
        # The carried tools, where the image has none of its own.
        if ! command -v pkg-config >/dev/null && [ -x "$P/usr/bin/pkgconf" ]; then
            ln -s "$P/usr/bin/pkgconf" "$P/bin/pkg-config"
        fi
        if ! command -v ninja >/dev/null && [ -x "$P/usr/bin/ninja" ]; then
            ln -s "$P/usr/bin/ninja" "$P/bin/ninja"
        fi
        _h2o_deps_path PATH "$P/bin"

        # The wheels: pip without an index, or, where the image's Python has no pip,
        # unzipped (they are pure Python; meson then gets the launcher pip would write).
        site=$P/site
        if compgen -G "$carry/wheel/*.whl" >/dev/null; then
            if "$py" -m pip --version >/dev/null 2>&1; then
                PIP_ROOT_USER_ACTION=ignore "$py" -m pip install -q --no-index --no-deps \
                    --no-compile --no-cache-dir --disable-pip-version-check \
                    --target "$site" "$carry"/wheel/*.whl ||
                    { _h2o_deps_say "FAIL: pip install of tests/gpu/carry/wheel/*.whl"; return 1; }
            else
                for f in "$carry"/wheel/*.whl; do
                    "$py" -m zipfile -e "$f" "$site" || return 1
                done
                if [ -d "$site/mesonbuild" ]; then
                    mkdir -p "$site/bin"
                    printf '#!%s\nimport sys\nfrom mesonbuild.mesonmain import main\nsys.exit(main())\n' \
                        "$(command -v "$py")" > "$site/bin/meson"
                    chmod +x "$site/bin/meson"
                fi
            fi
            # Before the image's own: the meson here is the version the checks ran.
            _h2o_deps_path PYTHONPATH "$site"
            export H2O_GPU_SITE=$site
            [ -d "$site/bin" ] && _h2o_deps_path PATH "$site/bin"
            _h2o_deps_say "wheels: $(cd "$carry/wheel" && ls *.whl | tr '\n' ' ')into $site"
        fi
    else
        _h2o_deps_say "no tests/gpu/carry/MANIFEST (tests/gpu/prepare.sh makes it): checking the machine as it is"
    fi
    export H2O_DEPS_PREFIX=$P

    # 4. The tools, then cuBLAS and NCCL.
    cc=${CC:-}
    [ -z "$cc" ] && { command -v cc >/dev/null && cc=cc || cc=gcc; }
    command -v "$cc" >/dev/null || missing+=("a C compiler (cc or gcc, or CC)")
    command -v meson >/dev/null || missing+=("meson (tests/gpu/prepare.sh carries one)")
    command -v ninja >/dev/null || missing+=("ninja")
    if [ "$cuda" != 0 ]; then
        if ! command -v nvcc >/dev/null; then
            missing+=("nvcc (not on PATH nor in /usr/local/cuda/bin)")
        else
            cuda_root=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
            [ -n "${CUDA_PATH:-}" ] && cuda_root=$CUDA_PATH
            cuda_major=$(nvcc --version | sed -n 's/.*release \([0-9]*\)\..*/\1/p')
            [ -e "$cuda_root/lib64/libcudart.so" ] ||
                missing+=("the CUDA runtime ($cuda_root/lib64/libcudart.so)")
            if _h2o_deps_cuda_lib cublas "$cuda_major" cublas_v2.h; then
                _h2o_deps_say "cuBLAS: $where"
            else
                missing+=("cuBLAS (libcublas.so, cublas_v2.h): not in $cuda_root, the compiler's path or a pip wheel nvidia-cublas of $py")
            fi
            if _h2o_deps_cuda_lib nccl 2 nccl.h; then
                _h2o_deps_say "NCCL: $where"
            else
                missing+=("NCCL (libnccl.so, nccl.h): not in $cuda_root, the compiler's path or a pip wheel nvidia-nccl-cu13 of $py")
            fi
            if [ -d "$P/cuda/lib" ]; then
                _h2o_deps_path LIBRARY_PATH "$P/cuda/lib"
                _h2o_deps_path LD_LIBRARY_PATH "$P/cuda/lib"
            fi
        fi
    fi

    # 5. The libraries, as the build will use them.
    if command -v pkg-config >/dev/null; then
        for n in libuv libcjson libpcre2-8 libutf8proc sqlite3; do
            pkg-config --exists "$n" || missing+=("$n (pkg-config $n; Debian: $(
                case $n in libuv) echo libuv1-dev ;; libcjson) echo libcjson-dev ;;
                           libpcre2-8) echo libpcre2-dev ;; libutf8proc) echo libutf8proc-dev ;;
                           sqlite3) echo libsqlite3-dev ;; esac))")
        done
    else
        missing+=("pkg-config (tests/gpu/prepare.sh carries pkgconf; without it libuv, libcjson, libpcre2-8 and sqlite3 are not looked for)")
    fi
    # oneDNN has no .pc file: meson.build asks the compiler for it.
    if ! echo '#include <oneapi/dnnl/dnnl.h>' | "$cc" -E -x c - >/dev/null 2>&1 ||
        [ "$("$cc" -print-file-name=libdnnl.so)" = libdnnl.so ]; then
        missing+=("oneDNN (oneapi/dnnl/dnnl.h and libdnnl.so where the compiler looks; Debian: libdnnl-dev)")
    fi
    if [ ! -f /usr/share/llhttp/api.c ] && [ ! -f "$P/usr/share/llhttp/api.c" ]; then
        missing+=("llhttp's C sources (Debian: node-llhttp)")
    fi
    if [ ${#missing[@]} -eq 0 ]; then
        _h2o_deps_probe || missing+=("$probe_err")
    fi

    if [ ${#missing[@]} -gt 0 ]; then
        _h2o_deps_say "FAIL: missing:"; printf '  %s\n' "${missing[@]}"
        return 1
    fi
    _h2o_deps_say "meson $(meson --version) ($(command -v meson)), ninja $(ninja --version), $("$cc" --version | head -1)${cuda_root:+, nvcc $(nvcc --version | sed -n 's/.*release \([0-9.]*\),.*/\1/p') ($cuda_root)}"
    _h2o_deps_say "pkg-config: $(command -v pkg-config) $(pkg-config --version)"
    return 0
}

_h2o_deps_main
_h2o_deps_status=$?
unset -f _h2o_deps_main _h2o_deps_say _h2o_deps_path _h2o_deps_unpath _h2o_deps_unpack \
    _h2o_deps_loader_has _h2o_deps_cuda_lib _h2o_deps_probe
return "$_h2o_deps_status" 2>/dev/null || exit "$_h2o_deps_status"
