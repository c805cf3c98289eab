//! The machine limit the many-row integer kernels are measured against:
//! one core's rate of `vpdpbusd` (u8 x i8, four products added into each
//! i32 lane) on registers only, no loads, twelve independent accumulator
//! chains (more than latency x throughput on current cores), for 512-bit
//! and 256-bit registers. Reported as G instructions/s and as GMAC/s
//! (64 multiply-adds per 512-bit instruction, 32 per 256-bit), the units
//! `dot16n_bench` reports its kernels in.
//!
//! ```text
//! cargo run --release -p ferrite-kernels --example vnni_peak
//! ```

/// Thread CPU time on Linux (other processes on a shared machine do not
/// count).
#[path = "common/clock.rs"]
mod clock;

/// Iterations of the twelve-instruction loop body per timed run.
const ITERS: u64 = 50_000_000;

fn main() {
    #[cfg(target_arch = "x86_64")]
    {
        if !(is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512vnni")
            && is_x86_feature_detected!("avx512vl"))
        {
            println!("no AVX-512 VNNI on this CPU");
            return;
        }
        for _ in 0..3 {
            // SAFETY: the CPU supports AVX512F, AVX512VL and AVX512-VNNI
            // (checked above).
            let (s512, sink512) = time(|| unsafe { x86::chains512(ITERS) });
            // SAFETY: as above.
            let (s256, sink256) = time(|| unsafe { x86::chains256(ITERS) });
            let n = (ITERS * 12) as f64;
            println!(
                "vpdpbusd zmm: {:.2} G/s = {:.1} GMAC/s | ymm: {:.2} G/s = {:.1} GMAC/s ({}; sinks {} {})",
                n / s512 / 1e9,
                64.0 * n / s512 / 1e9,
                n / s256 / 1e9,
                32.0 * n / s256 / 1e9,
                clock::NAME,
                sink512,
                sink256,
            );
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    println!("this probe is for x86-64 (AVX-512 VNNI)");
}

/// Seconds `f` takes, and its result.
fn time(f: impl FnOnce() -> i32) -> (f64, i32) {
    let t0 = clock::now();
    let r = std::hint::black_box(f());
    ((clock::now() - t0).as_secs_f64(), r)
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// `iters` rounds of twelve independent 512-bit `vpdpbusd`; returns a
    /// lane of their sum so that nothing is optimized away.
    #[target_feature(enable = "avx512f,avx512vl,avx512vnni")]
    pub unsafe fn chains512(iters: u64) -> i32 {
        let a = _mm512_set1_epi8(std::hint::black_box(3));
        let b = _mm512_set1_epi8(std::hint::black_box(-5));
        // Different starts, so that no two chains are the same value.
        let mut acc: [__m512i; 12] = std::array::from_fn(|i| _mm512_set1_epi32(i as i32));
        for _ in 0..iters {
            for c in acc.iter_mut() {
                *c = _mm512_dpbusd_epi32(*c, a, b);
            }
            // Keeps the twelve chains in registers, one loop trip apart.
            std::arch::asm!("", options(nomem, nostack, preserves_flags));
        }
        let mut s = _mm512_setzero_si512();
        for c in acc {
            s = _mm512_add_epi32(s, c);
        }
        _mm_cvtsi128_si32(_mm512_castsi512_si128(s))
    }

    /// As [`chains512`], 256-bit registers.
    #[target_feature(enable = "avx512f,avx512vl,avx512vnni")]
    pub unsafe fn chains256(iters: u64) -> i32 {
        let a = _mm256_set1_epi8(std::hint::black_box(3));
        let b = _mm256_set1_epi8(std::hint::black_box(-5));
        let mut acc: [__m256i; 12] = std::array::from_fn(|i| _mm256_set1_epi32(i as i32));
        for _ in 0..iters {
            for c in acc.iter_mut() {
                *c = _mm256_dpbusd_epi32(*c, a, b);
            }
            std::arch::asm!("", options(nomem, nostack, preserves_flags));
        }
        let mut s = _mm256_setzero_si256();
        for c in acc {
            s = _mm256_add_epi32(s, c);
        }
        _mm_cvtsi128_si32(_mm256_castsi256_si128(s))
    }
}
