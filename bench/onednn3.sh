#!/usr/bin/env bash
# bench/onednn3.sh - fetch oneDNN 3.x from PyPI into PREFIX (include/ and lib/), for a
# build that measures it against the system's oneDNN 2.6 (meson -Donednn_prefix=PREFIX;
# docs/benchmarks.md, "oneDNN 3.x").
#
# Usage: bench/onednn3.sh PREFIX
# The wheels are onednn-cpu-gomp and onednn-devel-cpu-gomp 2023.2.0 (oneDNN 3.2): the
# newest OpenMP (libgomp) build on PyPI. The newer `onednn` wheels (2024.0 = 3.3 up to
# 2026.1 = 3.13) are SYCL + TBB builds that need Intel's compiler runtime, and TBB's
# threads are not bounded by the engine's OpenMP thread count (cpu_gemm.c refuses to
# build against them). The versions and sha256 sums are pinned: pip checks them, so a
# prefix always holds the library the docs' numbers were measured with.
# pip downloads the two wheels (no dependencies, no install, nothing outside PREFIX but
# pip's own cache) and python3 unpacks them. Prints the meson option to use and exits
# 0, or says what failed and exits 1. Needs network; the default build never runs it.
set -euo pipefail

prefix=${1:?usage: onednn3.sh PREFIX}
mkdir -p "$prefix"
prefix=$(cd "$prefix" && pwd)
lib=libdnnl.so.3.2
# lib/libdnnl.so is made last, so a prefix that has it is complete.
if [ -e "$prefix/lib/libdnnl.so" ]; then
    echo "-Donednn_prefix=$prefix"
    exit 0
fi

wheels="$prefix/wheels"
mkdir -p "$wheels"
cat > "$wheels/requirements.txt" <<'EOF'
onednn-cpu-gomp==2023.2.0 --hash=sha256:2f22a54d6a890ed14bfa185d42a4be65d8b5b1df85dc1f0f3a9abe31620416fb
onednn-devel-cpu-gomp==2023.2.0 --hash=sha256:9763c69e8c907e119056bd52ad918ca84ac9ba939d130a99dfa95ccca3e5e284
EOF
python3 -m pip download --quiet --no-deps --require-hashes --only-binary=:all: \
    -d "$wheels" -r "$wheels/requirements.txt" || {
    echo "onednn3.sh: pip download failed (network? pip?)" >&2
    exit 1
}

# Each wheel keeps its files under NAME-VERSION.data/data/. The runtime wheel stores
# libdnnl.so, .so.3 and .so.3.2 as three 55 MB copies: unpack one, link the others.
python3 - "$wheels" "$prefix" "$lib" <<'EOF'
import glob, os, sys, zipfile
wheels, prefix, lib = sys.argv[1:]
for whl in sorted(glob.glob(os.path.join(wheels, "onednn_*cpu_gomp-2023.2.0-*.whl"))):
    with zipfile.ZipFile(whl) as z:
        for name in z.namelist():
            parts = name.split("/")
            if len(parts) < 4 or not parts[0].endswith(".data") or parts[1] != "data":
                continue
            rel = parts[2:]
            if rel[0] not in ("include", "lib") or rel[-1] in ("libdnnl.so", "libdnnl.so.3"):
                continue
            dst = os.path.join(prefix, *rel)
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            with z.open(name) as src, open(dst + ".part", "wb") as out:
                out.write(src.read())
            os.replace(dst + ".part", dst)
EOF
if [ ! -f "$prefix/lib/$lib" ] || [ ! -f "$prefix/include/oneapi/dnnl/dnnl.h" ]; then
    echo "onednn3.sh: the wheels did not hold lib/$lib and include/oneapi/dnnl/dnnl.h" >&2
    exit 1
fi
rm -rf "$wheels" # 40 MB that nothing reads again
ln -sfn "$lib" "$prefix/lib/libdnnl.so.3"
ln -sfn libdnnl.so.3 "$prefix/lib/libdnnl.so"
echo "-Donednn_prefix=$prefix"
