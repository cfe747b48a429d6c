#!/bin/sh
# emu_attn.sh [N] - build and run emu_attn.c (the decode and prefill attention kernels
# as host C++ under cuda_emu.h, N random cases each, default 40, each with the fp16
# and the int8 KV cache), emu_kv.c (the compaction and the int8 block init, N cases)
# and emu_ops.c (the families' norm, activation and rotary kernels), against
# cuda_ref.c; exits nonzero
# on any mismatch. The .cu files are copied with their launches (kernel<<<grid, block, smem, stream>>>
# (args);) turned into emu_run calls and their `extern __shared__` arrays into
# emu_smem; nothing else of them changes. Needs g++, gcc, python3 and the CUDA headers
# (no GPU, no libcudart). Work files go to a temporary directory, removed at exit.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
cuda_inc=${CUDA_INC:-/usr/local/cuda/include}
n=${1:-40}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for k in cuda_decode_attn cuda_prefill_attn cuda_kv_compact cuda_kv_blocks cuda_norm cuda_act \
    cuda_rope; do
    python3 - "$root/cuda/$k.cu" "$tmp/${k}_emu.cpp" <<'PY'
import re, sys
s = open(sys.argv[1]).read()
s = s.replace('#include "', '#include "cuda_emu.h"\n#include "', 1)  # before any header
s = re.sub(r'extern __shared__ (\w+) (\w+)\[\];', r'\1 *\2 = (\1 *)emu_smem;', s)
def launch(m):
    cfg = [p.strip() for p in re.split(r',(?![^()]*\))', m.group(2))]
    smem = cfg[2] if len(cfg) > 2 else '0'
    return 'emu_run(%s, dim3(%s), %s, [&]() { %s(%s); });' % (cfg[0], cfg[1], smem,
                                                             m.group(1), m.group(3))
s, n = re.subn(r'(\w+)<<<(.*?)>>>\(\s*([^;]*?)\);', launch, s, flags=re.S)
if n == 0: sys.exit('no launch found in ' + sys.argv[1])
open(sys.argv[2], 'w').write(s)
PY
done
inc="-I$here -I$root/cuda -I$root/tests/lib -I$root/tests -I$root/engine/model -I$root/engine/util -I$cuda_inc"
cd "$tmp"
gcc -O1 -std=gnu11 $inc -c "$here/emu_attn.c" "$here/emu_ops.c" "$here/emu_kv.c" \
    "$root/tests/lib/paged_case.c" \
    "$root/cuda/cuda_ref.c"
g++ -O1 -std=c++17 $inc -c "$here/cuda_emu.cpp" ./*_emu.cpp
g++ -o emu_attn emu_attn.o paged_case.o cuda_ref.o cuda_emu.o cuda_decode_attn_emu.o \
    cuda_prefill_attn_emu.o -lpthread -lm
g++ -o emu_kv emu_kv.o paged_case.o cuda_ref.o cuda_emu.o cuda_kv_compact_emu.o \
    cuda_kv_blocks_emu.o -lpthread -lm
g++ -o emu_ops emu_ops.o paged_case.o cuda_ref.o cuda_emu.o cuda_norm_emu.o cuda_act_emu.o \
    cuda_rope_emu.o -lpthread -lm
./emu_ops
./emu_kv "$n"
./emu_attn "$n"
