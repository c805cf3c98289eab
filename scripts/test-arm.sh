#!/usr/bin/env bash
# ARM64 under emulation (called by scripts/test.sh, so CI runs it once):
# installs the cross toolchain if missing (the rustup target, Debian's
# gcc-aarch64-linux-gnu, libc6-dev-arm64-cross and qemu-user), cross-builds
# for aarch64-unknown-linux-gnu and runs under qemu-aarch64, once per
# emulated CPU model:
#   max          (FEAT_DotProd and FEAT_I8MM: the i8mm set, and below it
#                 dotprod, neon and scalar),
#   neoverse-n1  (dotprod but no i8mm: the dotprod set and the fallbacks),
#   cortex-a57   (ARMv8.0: the neon set and scalar only),
# checking first that the CPU model runs the set it should, then
# - the kernels crate's whole test suite (every set the CPU offers against
#   the scalar reference, bit for bit; the table tests);
# - tests/cross_arch.rs: GPT-2, bert-tiny and tiny-marian on the fixtures in
#   testdata/ give the x86_64 bits in every set the CPU offers;
# and under `max` the whole-model logits of SmolLM2 and Gemma 3 against
# the hashes frozen on x86_64 (tests/kernel_sets.rs; needs the models that
# scripts/fetch-models.sh fetches).
# Release code with the debug build's checks (overflow, debug assertions):
# debug code under emulation would be far slower.
#
#   scripts/test-arm.sh            # everything above
#   ARM_CPUS="max" scripts/test-arm.sh   # only some CPU models
set -euo pipefail
cd "$(dirname "$0")/.."

start=$SECONDS
TARGET=aarch64-unknown-linux-gnu
SYSROOT=/usr/aarch64-linux-gnu

if ! rustup target list --installed | grep -qx "$TARGET"; then
    rustup target add "$TARGET"
fi
if ! command -v aarch64-linux-gnu-gcc >/dev/null || ! command -v qemu-aarch64 >/dev/null \
    || [ ! -e "$SYSROOT/lib/ld-linux-aarch64.so.1" ]; then
    sudo=""
    if [ "$(id -u)" -ne 0 ]; then sudo=sudo; fi
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user >/dev/null
fi

export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export CARGO_PROFILE_ARM_INHERITS=release
export CARGO_PROFILE_ARM_DEBUG_ASSERTIONS=true
export CARGO_PROFILE_ARM_OVERFLOW_CHECKS=true
export CARGO_PROFILE_ARM_DEBUG=false
cargo_arm() {
    cargo "$1" --profile arm --target "$TARGET" "${@:2}"
}

# Build once (the runner does not change the binaries).
cargo_arm test --no-run -p ferrite-kernels
cargo_arm test --no-run -p ferrite --test cross_arch --test kernel_sets
echo "test-arm: built in $((SECONDS - start)) s"

want_set() {
    case "$1" in
        max) echo i8mm ;;
        neoverse-n1) echo dotprod ;;
        cortex-a57) echo neon ;;
        *) echo "unknown CPU model $1" >&2; exit 1 ;;
    esac
}

for cpu in ${ARM_CPUS:-max neoverse-n1 cortex-a57}; do
    t=$SECONDS
    runner="qemu-aarch64 -L $SYSROOT -cpu $cpu"
    export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="$runner"
    export FERRITE_TEST_RUNNER="$runner"
    want=$(want_set "$cpu")
    got=$(cargo_arm test -q -p ferrite-kernels --test dot_simd -- \
        --exact child_prints_kernel_set --ignored --nocapture 2>/dev/null \
        | sed -n 's/^kernel set: //p')
    if [ "$got" != "$want" ]; then
        echo "test-arm: -cpu $cpu runs the '$got' kernel set, expected '$want'" >&2
        exit 1
    fi
    cargo_arm test -p ferrite-kernels
    cargo_arm test -p ferrite --test cross_arch
    if [ "$cpu" = max ]; then
        cargo_arm test -p ferrite --test kernel_sets logits_are_bit_identical
    fi
    echo "test-arm: -cpu $cpu ($want) passed in $((SECONDS - t)) s"
done
echo "test-arm: all passed in $((SECONDS - start)) s"
