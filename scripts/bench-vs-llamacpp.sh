#!/usr/bin/env bash
# Compares `ferrite bench` with llama.cpp's `llama-bench` on the same GGUF file:
# pp512 and tg128 at 1 and 2 threads, the two programs run alternately
# (ROUNDS rounds, each one `-r REPS` run of both per thread count), then the
# medians of the per-run means and the ratios ferrite / llama.cpp.
#
#   scripts/bench-vs-llamacpp.sh MODEL        # a .gguf path or a short name (smollm2)
#   ROUNDS=5 REPS=3 THREADS="1 2" scripts/bench-vs-llamacpp.sh smollm2
#
# llama.cpp comes from the llama-cpp-python sdist, built once and cached under
# $FERRITE_REFERENCE (scripts/env.sh): the output of
# scripts/build-llamacpp.sh (or $BUILD_LLAMACPP) is used if its
# llama-bench runs here. That build forces AVX-512 (SIGILL on CPUs without
# it), so otherwise the same source is built with -DGGML_NATIVE=ON into
# $FERRITE_LLAMACPP/build-native. Needs python3 (stdlib only) for the JSON;
# cmake + ninja only when it has to build.
#
# AVX2=1 compares the AVX2 kernel sets on an AVX-512 machine: ferrite runs with
# FERRITE_KERNELS=avx2 and llama.cpp is built (once, into
# $FERRITE_LLAMACPP/build-avx2) without GGML_NATIVE, with AVX2/FMA/F16C/BMI2
# on and every AVX-512, AVX-VNNI and AMX option off, as on a Zen 3.
#   AVX2=1 scripts/bench-vs-llamacpp.sh gemma3-270m
# (AVX2=1 BUILD_ONLY=1 only builds that llama-bench and prints its path.)
# FERRITE_BIN=path runs that ferrite binary instead of building this tree's.
# MEMBW=1 also runs the memory read probe (the kernels crate's `membw`
# example) before each round and prints, per thread count, its median read
# bandwidth next to the GB/s of weights each engine's tg reads (the weights
# ferrite reads per token, which llama.cpp reads too, times tokens/s): on a
# shared machine whose bandwidth changes from minute to minute, this says
# whether a decode ran at the machine's limit when it ran.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
. scripts/env.sh

[ $# -eq 1 ] || { echo "usage: $0 MODEL (a .gguf file or a short name)" >&2; exit 2; }
ROUNDS=${ROUNDS:-3}
REPS=${REPS:-3}
THREADS=${THREADS:-1 2}
N_PROMPT=${N_PROMPT:-512}
N_GEN=${N_GEN:-128}
VER=$FERRITE_LLAMACPP_PYTHON_VERSION
BUILD_LLAMACPP=${BUILD_LLAMACPP:-$repo/scripts/build-llamacpp.sh}

# The model file (llama-bench needs a path; short names as ferrite knows them).
model=$1
if [ ! -f "$model" ]; then
  dir=${FERRITE_MODELS:-$repo/models}
  case $model in
    smollm2) model=$dir/SmolLM2-135M-Instruct.Q4_1.gguf ;;
    gemma3-270m) model=$dir/gemma-3-270m-q4_k_m.gguf ;;
    qwen2.5-0.5b) model=$dir/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf ;;
    *) model=$dir/$model ;;
  esac
fi
[ -f "$model" ] || { echo "$0: no model file $model (run scripts/fetch-models.sh)" >&2; exit 1; }

log=$(mktemp -d)
trap 'rm -rf "$log"' EXIT

# A llama-bench that runs on this CPU: --help exits 0 and a tiny run succeeds
# (an AVX-512 build can pass --help and still die with SIGILL in a kernel).
runs_here() {
  [ -x "$1/llama-bench" ] && "$1/llama-bench" --help >/dev/null 2>&1 &&
    "$1/llama-bench" -m "$model" -p 8 -n 1 -r 1 -t 1 -o json >/dev/null 2>"$log/smoke.err"
}

# The source build-llamacpp.sh extracts, for the builds made here.
src=$FERRITE_LLAMACPP
extract_source() {
  [ -d "$src" ] && return
  mkdir -p "$FERRITE_REFERENCE" "$(dirname "$src")"
  (cd "$FERRITE_REFERENCE" &&
    { [ -f "llama_cpp_python-$VER.tar.gz" ] ||
      pip download -q --no-deps --no-binary llama-cpp-python -d . "llama-cpp-python==$VER"; } &&
    tar xzf "llama_cpp_python-$VER.tar.gz" &&
    mv "llama_cpp_python-$VER/vendor/llama.cpp" "$src")
}
# build DIR CMAKE_OPTION...: llama-bench into $src/DIR unless it runs already.
build() {
  local dir=$1
  shift
  bin=$src/$dir/bin
  runs_here "$bin" && return
  extract_source
  echo "building llama-bench with $* in $src/$dir (once)" >&2
  command -v cmake >/dev/null || pip install -q cmake ninja
  cmake -S "$src" -B "$src/$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF \
    -DLLAMA_BUILD_TESTS=OFF "$@" >/dev/null
  nice ninja -C "$src/$dir" -j"$(nproc)" llama-bench >/dev/null
  runs_here "$bin" || { echo "$0: $bin/llama-bench fails:" >&2; cat "$log/smoke.err" >&2; exit 1; }
}

llama_bin=
ferrite_env=()
if [ -n "${AVX2:-}" ]; then
  avx2_flags=(-DGGML_NATIVE=OFF -DGGML_SSE42=ON -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
    -DGGML_BMI2=ON -DGGML_AVX_VNNI=OFF -DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF
    -DGGML_AVX512_BF16=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF)
  build build-avx2 "${avx2_flags[@]}"
  llama_bin=$bin
  which_build="AVX2-only build $bin (${avx2_flags[*]})"
  ferrite_env=(env FERRITE_KERNELS=avx2)
  [ -n "${BUILD_ONLY:-}" ] && { echo "$bin"; exit 0; }
fi
# On a CPU without AVX-512, build-llamacpp.sh's build is tried only if it exists.
if [ -z "$llama_bin" ] && [ -x "$BUILD_LLAMACPP" ] &&
  { grep -qw avx512f /proc/cpuinfo 2>/dev/null || [ -e "$FERRITE_LLAMACPP_BIN/llama-bench" ]; }; then
  bin=$("$BUILD_LLAMACPP" | tail -n 1) || bin=
  if [ -n "$bin" ] && runs_here "$bin"; then
    llama_bin=$bin
    which_build="build-llamacpp.sh output $bin (resolves to $(readlink -f "$bin"))"
  else
    echo "note: build-llamacpp.sh's llama-bench ($bin) does not run here; using a native build" >&2
  fi
fi
if [ -z "$llama_bin" ]; then
  build build-native -DGGML_NATIVE=ON
  llama_bin=$bin
  which_build="native build $bin (-DGGML_NATIVE=ON)"
fi

if [ -n "${FERRITE_BIN:-}" ]; then
  ferrite=$FERRITE_BIN # another build, e.g. a baseline's
else
  cargo build --release -p ferrite-cli --quiet
  ferrite=$repo/target/release/ferrite
fi

# Each is completed by the thread count.
llama_cmd=("$llama_bin/llama-bench" -m "$model" -p "$N_PROMPT" -n "$N_GEN" -r "$REPS" -o json -t)
ferrite_cmd=("${ferrite_env[@]}" "$ferrite" bench "$model" -p "$N_PROMPT" -n "$N_GEN" -r "$REPS" --json -t)

echo "model:     $model"
echo "llama.cpp: $which_build"
echo "ferrite:   $ferrite"
echo "CPU:       $(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ //'), $(nproc) cores"
echo "commands (run alternately, $ROUNDS rounds, llama.cpp first in each):"
for t in $THREADS; do
  echo "  ${llama_cmd[*]} $t"
  echo "  ${ferrite_cmd[*]} $t"
done

# One line per run: "engine threads pp_tok_s tg_tok_s [kernels]".
parse_llama='import json, sys
tests = json.load(open(sys.argv[2]))
pick = lambda f: next((x["avg_ts"] for x in tests if f(x)), float("nan"))
pp = pick(lambda x: x["n_prompt"] > 0 and x["n_gen"] == 0)
tg = pick(lambda x: x["n_gen"] > 0 and x["n_prompt"] == 0)
print("llama.cpp", sys.argv[1], pp, tg)'
parse_ferrite='import json, sys
r = json.load(open(sys.argv[2]))
print("ferrite", sys.argv[1], r["pp_tok_s"] or "nan", r["tg_tok_s"] or "nan", r["kernels"])
print("weights", r["weights_read_per_token_bytes"] or "nan")'
results=$log/results
membw_bin=
if [ "${MEMBW:-0}" = 1 ]; then
  cargo build --release -p ferrite-kernels --example membw --quiet
  membw_bin=$repo/target/release/examples/membw
fi
for round in $(seq "$ROUNDS"); do
  if [ -n "$membw_bin" ]; then
    # "membw threads GB/s" lines: each thread count's wall-clock median.
    "$membw_bin" 512 7 | sed -n 's/^threads \([0-9]*\), wall clock: median \([0-9.]*\) GB\/s.*/membw \1 \2/p' >>"$results"
    grep '^membw' "$results" | tail -n 2 | sed "s/^/  round $round: /"
  fi
  for t in $THREADS; do
    "${llama_cmd[@]}" "$t" >"$log/out" 2>"$log/err" || { cat "$log/err" >&2; exit 1; }
    python3 -c "$parse_llama" "$t" "$log/out" >>"$results"
    "${ferrite_cmd[@]}" "$t" >"$log/out" 2>"$log/err" || { cat "$log/err" >&2; exit 1; }
    python3 -c "$parse_ferrite" "$t" "$log/out" >>"$results"
    grep -v '^weights\|^membw' "$results" | tail -n 2 | sed "s/^/  round $round: /"
  done
done

python3 - "$results" "$N_PROMPT" "$N_GEN" "$ROUNDS" "$REPS" <<'EOF'
import statistics, sys
path, p, n, rounds, reps = sys.argv[1:]
runs, kernels, membw, weights = {}, set(), {}, float("nan")
for line in open(path):
    if line.startswith("membw"):
        _, t, gbs = line.split()
        membw.setdefault(int(t), []).append(float(gbs))
        continue
    if line.startswith("weights"):
        weights = float(line.split()[1])
        continue
    engine, t, pp, tg, *rest = line.split()
    runs.setdefault((engine, int(t)), []).append((float(pp), float(tg)))
    kernels.update(rest)
med = statistics.median
print(f"\nferrite kernels: {', '.join(sorted(kernels))}")
print(f"medians of {rounds} runs x {reps} repetitions, t/s; ratio = ferrite / llama.cpp")
cols = ["threads", f"llama.cpp pp{p}", f"ferrite pp{p}", "ratio",
        f"llama.cpp tg{n}", f"ferrite tg{n}", "ratio"]
print("| " + " | ".join(cols) + " |")
print("|" + "|".join(["---:"] * len(cols)) + "|")
for t in sorted({t for _, t in runs}):
    l, f = runs[("llama.cpp", t)], runs[("ferrite", t)]
    lpp, ltg = med(x[0] for x in l), med(x[1] for x in l)
    fpp, ftg = med(x[0] for x in f), med(x[1] for x in f)
    print(f"| {t} | {lpp:.1f} | {fpp:.1f} | {fpp / lpp:.3f} | {ltg:.1f} | {ftg:.1f} | {ftg / ltg:.3f} |")
if membw:
    print(f"\nmemory read bandwidth (membw, median of the rounds' medians) and the weights")
    print(f"tg reads ({weights / 1e6:.1f} MB per token x median t/s), GB/s:")
    print("| threads | membw | llama.cpp tg | ferrite tg | ferrite / membw |")
    print("|---:|---:|---:|---:|---:|")
    for t in sorted({t for _, t in runs}):
        bw = med(membw.get(t, [float("nan")]))
        ltg = med(x[1] for x in runs[("llama.cpp", t)]) * weights / 1e9
        ftg = med(x[1] for x in runs[("ferrite", t)]) * weights / 1e9
        print(f"| {t} | {bw:.1f} | {ltg:.1f} | {ftg:.1f} | {ftg / bw:.2f} |")
EOF
