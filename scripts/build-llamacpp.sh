#!/usr/bin/env bash
# Builds llama.cpp, the reference the goldens and benchmarks compare with.
#
# Source: the llama.cpp tree vendored in the llama-cpp-python sdist on PyPI
# (version $FERRITE_LLAMACPP_PYTHON_VERSION, scripts/env.sh), unpacked to
# $FERRITE_LLAMACPP. Build: $FERRITE_LLAMACPP/build, binaries in build/bin,
# native for this CPU (its best of AVX2 / AVX-512), except on CPUs that list
# AMX: there llama.cpp's native build uses AMX tile instructions that die
# with SIGILL on the VMs this project runs on, so the build names every
# other x86 feature the CPU has instead (FERRITE_LLAMACPP_AMX=1 keeps the
# native build anyway; FERRITE_LLAMACPP_NO_AMX=1 forces the non-AMX build).
#
# Idempotent: a build whose binaries are all there and run on this CPU is
# kept (one made on another CPU is rebuilt). Prints the bin directory on
# its last line. About 15 minutes on two cores.
#
#   scripts/build-llamacpp.sh             # fetch, unpack and build if needed
#   scripts/build-llamacpp.sh --dry-run   # say what would be done, change nothing
#
# Needs a C++ compiler, cmake and ninja (from the reference venv,
# scripts/setup-refenv.sh, when the system has none).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/env.sh"
dry=
case "${1:-}" in
  --dry-run) dry=1 ;;
  "") ;;
  *) echo "usage: scripts/build-llamacpp.sh [--dry-run]" >&2; exit 2 ;;
esac
run() { if [ -n "$dry" ]; then echo "would run: $*"; else "$@"; fi; }

# The programs the scripts call.
targets=(llama-bench llama-tokenize llama-completion llama-embedding llama-perplexity llama-quantize
         llama-server llama-imatrix llama-mtmd-cli llama-speculative llama-speculative-simple llama-lookup)
bin=$FERRITE_LLAMACPP_BIN

built_here() {
  local t
  for t in "${targets[@]}"; do [ -x "$bin/$t" ] || return 1; done
  # A build for another CPU dies here with SIGILL.
  "$bin/llama-bench" --list-devices >/dev/null 2>&1
}
if built_here; then echo "$bin"; exit 0; fi

# Tools: the system's, else the reference venv's pinned ones.
[ -d "$FERRITE_REFENV/bin" ] && PATH="$PATH:$FERRITE_REFENV/bin"
for tool in cmake ninja; do
  command -v "$tool" >/dev/null || { echo "no $tool: install it, or run scripts/setup-refenv.sh (it pins one)" >&2; [ -n "$dry" ] || exit 1; }
done
pip=(python3 -m pip)
[ -x "$FERRITE_REFENV/bin/pip" ] && pip=("$FERRITE_REFENV/bin/pip")

# The source tree.
ver=$FERRITE_LLAMACPP_PYTHON_VERSION
sdist=$FERRITE_REFERENCE/llama_cpp_python-$ver.tar.gz
if [ ! -f "$FERRITE_LLAMACPP/CMakeLists.txt" ]; then
  run mkdir -p "$FERRITE_REFERENCE"
  [ -f "$sdist" ] || run "${pip[@]}" download --quiet --no-deps --no-binary llama-cpp-python \
      -d "$FERRITE_REFERENCE" "llama-cpp-python==$ver"
  run tar -xzf "$sdist" -C "$FERRITE_REFERENCE" "llama_cpp_python-$ver/vendor/llama.cpp"
  run mkdir -p "$(dirname "$FERRITE_LLAMACPP")"
  run mv "$FERRITE_REFERENCE/llama_cpp_python-$ver/vendor/llama.cpp" "$FERRITE_LLAMACPP"
  run rm -rf "$FERRITE_REFERENCE/llama_cpp_python-$ver"
fi

# The CPU features: native, or every feature but AMX spelled out.
cpu_has() { grep -qw "$1" /proc/cpuinfo; }
options=(-DGGML_NATIVE=ON)
if [ -n "${FERRITE_LLAMACPP_NO_AMX:-}" ] || { cpu_has amx_int8 && [ -z "${FERRITE_LLAMACPP_AMX:-}" ]; }; then
  options=(-DGGML_NATIVE=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF
           -DGGML_SSE42=ON -DGGML_AVX=ON -DGGML_F16C=ON -DGGML_FMA=ON -DGGML_BMI2=ON -DGGML_AVX2=ON)
  for pair in avx_vnni:AVX_VNNI avx512f:AVX512 avx512vbmi:AVX512_VBMI avx512_vnni:AVX512_VNNI avx512_bf16:AVX512_BF16; do
    cpu_has "${pair%%:*}" && options+=("-DGGML_${pair#*:}=ON")
  done
fi

run rm -rf "$FERRITE_LLAMACPP/build"
run cmake -S "$FERRITE_LLAMACPP" -B "$FERRITE_LLAMACPP/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF "${options[@]}"
run ninja -C "$FERRITE_LLAMACPP/build" -j"$(nproc)" "${targets[@]}"
echo "$bin"
