#!/usr/bin/env bash
# Runs every cargo-fuzz target in fuzz/ for a bounded time (the test
# command's fuzzing step; see fuzz/README.md for longer runs).
#
#   FUZZ_SECONDS   seconds per target (default 30)
#   FUZZ_TARGETS   space-separated targets (default: every target)
#
# Each target starts from its committed seeds (fuzz/seeds/TARGET/, if any)
# plus what earlier runs on this machine found (fuzz/corpus/TARGET/,
# git-ignored). A crash, a leak, an allocation over -malloc_limit_mb, a
# process over -rss_limit_mb or an input slower than -timeout fails the
# step; libFuzzer leaves the input in fuzz/artifacts/TARGET/.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"

if ! command -v cargo-fuzz >/dev/null; then
    cargo install cargo-fuzz --locked
fi
# cargo-fuzz passes nightly-only flags (sanitizers); the stable toolchain
# takes them with RUSTC_BOOTSTRAP.
export RUSTC_BOOTSTRAP=1

seconds="${FUZZ_SECONDS:-30}"
targets="${FUZZ_TARGETS:-$(cargo fuzz list)}"

cargo fuzz build
for t in $targets; do
    mkdir -p "corpus/$t"
    dirs=("corpus/$t")
    [ -d "seeds/$t" ] && dirs+=("seeds/$t")
    extra=()
    [ -f "$t.dict" ] && extra+=("-dict=$t.dict")
    echo "fuzz-ci: $t for ${seconds}s"
    log="$(mktemp)"
    if ! cargo fuzz run "$t" "${dirs[@]}" -- \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
        -malloc_limit_mb=1024 -max_len=65536 -print_final_stats=1 \
        "${extra[@]}" >"$log" 2>&1; then
        tail -n 60 "$log" >&2
        echo "fuzz-ci: $t FAILED; inputs in fuzz/artifacts/$t/" >&2
        exit 1
    fi
    grep -E "^stat::number_of_executed_units|^Done" "$log" || true
    rm -f "$log"
done
echo "fuzz-ci: every target ran ${seconds}s without a failure"
