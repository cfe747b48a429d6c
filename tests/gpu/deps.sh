# tests/gpu/deps.sh - sourced by tests/gpu/run.sh: make the build's tools and
# libraries visible on the GPU machine. Returns non-zero when something the build
# needs is missing.
# nvcc lives outside PATH in the usual CUDA toolkit install.
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
    export PATH="/usr/local/cuda/bin:$PATH"
fi
command -v meson >/dev/null && command -v ninja >/dev/null && command -v nvcc >/dev/null
