//! GFLOP/s of the f32 GEMM on encoder-sized shapes, single thread, and
//! the core's f32 FMA peak for comparison:
//! `cargo run --release -p ferrite-kernels --example gemm_bench`
//! (MiniLM's shapes), `... --example gemm_bench -- mpnet` (768 wide,
//! all-mpnet-base-v2 and nomic-embed-text's shapes); beside each shape's,
//! the optional int8 product's figures (`gemm_w8a16`, GFLOP/s counting
//! its integer multiply-adds as two operations, activation rounding
//! included; and GMAC/s, against the register-only peak of its
//! `vpmaddwd` + `vpaddd` sequence printed at the top) and, with AVX512-BF16, the bf16
//! product's.
//!
//! Times are the thread's CPU time on Linux (the machine may be shared:
//! other processes' turns do not count), wall time elsewhere (`clock`).

use ferrite_kernels::gemm::{gemm, Acts, OutPtr, PackedWeights};
use ferrite_kernels::gemm_bf16::{self, PackedBf16};
use ferrite_kernels::gemm_w8a16::{self, PackedW8};

/// The measurements' clock: the thread's CPU time on Linux.
#[path = "common/clock.rs"]
mod clock;

/// Seconds of [`clock::now`].
fn seconds() -> f64 {
    clock::now().as_secs_f64()
}

fn main() {
    println!(
        "kernel set: {}; times: {}",
        ferrite_kernels::dispatch::kernel_set_name(),
        clock::NAME
    );
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
        // SAFETY: AVX2 and FMA were detected just above.
        let peak = unsafe { fma_peak_gflops() };
        println!("f32 FMA peak of one core: {peak:.1} GFLOP/s (12 independent 8-lane chains)");
        // SAFETY: as above.
        let (regs, kernel) = unsafe { (madd_peak_gmacs(false), madd_peak_gmacs(true)) };
        println!(
            "int16 vpmaddwd+vpaddd peak (AVX2, 256-bit): {regs:.1} GMAC/s in registers, \
             {kernel:.1} GMAC/s with the AVX2 int8 tile's loads (2 weight lines, 4 broadcasts per 8)"
        );
    }
    let mpnet = std::env::args().nth(1).as_deref() == Some("mpnet");
    let (dim, ffn, n_layers) = if mpnet {
        (768, 3072, 12)
    } else {
        (384, 1536, 6)
    };
    let minilm_shapes = [
        (800, 1152, 384),
        (800, 384, 1536),
        (25, 1152, 384),
        (480, 1152, 384),
        (480, 1536, 384),
        (480, 384, 1536),
        (16, 1536, 384),
        (256, 256, 32),
    ];
    let mpnet_shapes = [
        (800, 2304, 768),
        (800, 768, 768),
        (800, 3072, 768),
        (800, 768, 3072),
        (25, 2304, 768),
        (25, 768, 3072),
    ];
    let shapes: &[(usize, usize, usize)] = if mpnet { &mpnet_shapes } else { &minilm_shapes };
    for &(m, n, k) in shapes {
        let a: Vec<f32> = (0..m * k).map(|i| (i % 97) as f32 * 0.01).collect();
        let w: Vec<f32> = (0..n * k).map(|i| (i % 89) as f32 * 0.01).collect();
        let packed = PackedWeights::pack(&w, n, k);
        let mut c = vec![0f32; m * n];
        let acts = Acts { a: &a, lda: k, m };
        gemm(acts, &packed, &mut c);
        let mut best = f64::MAX;
        for _ in 0..7 {
            let t = seconds();
            gemm(acts, &packed, &mut c);
            best = best.min(seconds() - t);
        }
        let gflops = 2.0 * (m * n * k) as f64 / best / 1e9;
        // The optional bf16 product (`--bf16`), where the CPU has it, and
        // the int8 product (`--int8`, every CPU).
        let time = |f: &dyn Fn(OutPtr<'static>)| {
            let mut best = f64::MAX;
            for _ in 0..8 {
                let t = seconds();
                f(OutPtr::plain(c.as_ptr().cast_mut(), n));
                best = best.min(seconds() - t);
            }
            format!(
                "{:8.3} ms {:6.1} GFLOP/s ({:5.1} GMAC/s)",
                best * 1e3,
                2.0 * (m * n * k) as f64 / best / 1e9,
                (m * n * k) as f64 / best / 1e9
            )
        };
        let row = |j: usize, out: &mut [f32]| out.copy_from_slice(&w[j * k..(j + 1) * k]);
        let bf16 = if gemm_bf16::available() {
            let packed = PackedBf16::from_rows(n, k, row);
            // SAFETY: c holds m x n values, not otherwise used meanwhile.
            let f = |out: OutPtr<'_>| unsafe {
                gemm_bf16::gemm_bf16_panels(acts, &packed, 0..packed.n_panels(), out)
            };
            format!("  bf16 {}", time(&f))
        } else {
            String::new()
        };
        let packed = PackedW8::from_rows(n, k, None, row);
        // SAFETY: as above.
        let f = |out: OutPtr<'_>| unsafe {
            gemm_w8a16::gemm_w8a16_panels(acts, &packed, 0..packed.n_panels(), out)
        };
        let int8 = format!("  int8 {}", time(&f));
        println!(
            "m={m:4} n={n:5} k={k:5}: {:8.3} ms  {gflops:6.1} GFLOP/s{bf16}{int8}",
            best * 1e3
        );
    }

    // An encoder pass: QKV, output, up, down products of every layer with
    // distinct weights (MiniLM: 6 layers, 42 MB of f32, more than the L3
    // cache; mpnet: 12 layers, 340 MB), as the model streams them.
    let passes: &[(usize, bool)] = if mpnet {
        &[(800, false), (25, false)]
    } else {
        &[
            (800, false),
            (200, false),
            (2500, false),
            (25, false),
            (25, true),
            (20, false),
            (8, false),
            (8, true),
        ]
    };
    for &(m, hot) in passes {
        let shapes = [(3 * dim, dim), (dim, dim), (ffn, dim), (dim, ffn)];
        let layers: Vec<Vec<PackedWeights>> = (0..n_layers)
            .map(|l| {
                shapes
                    .iter()
                    .map(|&(n, k)| {
                        let w: Vec<f32> =
                            (0..n * k).map(|i| ((i + l) % 89) as f32 * 0.01).collect();
                        PackedWeights::pack(&w, n, k)
                    })
                    .collect()
            })
            .collect();
        let a: Vec<f32> = (0..m * ffn).map(|i| (i % 97) as f32 * 0.01).collect();
        let mut c = vec![0f32; m * 3 * ffn];
        let flops: f64 = n_layers as f64
            * shapes
                .iter()
                .map(|&(n, k)| 2.0 * (m * n * k) as f64)
                .sum::<f64>();
        let mut best = f64::MAX;
        for _ in 0..5 {
            let t = seconds();
            for layer in &layers {
                let layer = if hot { &layers[0] } else { layer };
                for w in layer {
                    gemm(
                        Acts {
                            a: &a,
                            lda: w.k(),
                            m,
                        },
                        w,
                        &mut c,
                    );
                }
            }
            best = best.min(seconds() - t);
        }
        println!(
            "encoder pass, m={m:4}, {} weights: {:8.3} ms  {:6.1} GFLOP/s",
            if hot { "hot " } else { "cold" },
            best * 1e3,
            flops / best / 1e9
        );
    }
}

/// GFLOP/s of back-to-back 8-lane fused multiply-adds: twelve independent
/// chains, more than the FMA units' latency times their throughput, so the
/// units never wait. No f32 GEMM can run faster than this on the core.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn fma_peak_gflops() -> f64 {
    use std::arch::x86_64::*;
    let x = _mm256_set1_ps(0.999_9);
    let y = _mm256_set1_ps(1e-4);
    // acc = acc * x + y settles near 1: no overflow, no subnormals.
    let mut acc = [_mm256_setzero_ps(); 12];
    let iters = 50_000_000u64;
    let t = seconds();
    for _ in 0..iters {
        for a in acc.iter_mut() {
            *a = _mm256_fmadd_ps(*a, x, y);
        }
    }
    let secs = seconds() - t;
    let mut sum = _mm256_setzero_ps();
    for a in acc {
        sum = _mm256_add_ps(sum, a);
    }
    std::hint::black_box(sum);
    (iters * 12 * 16) as f64 / secs / 1e9
}

/// GMAC/s (16-bit multiply-adds) of AVX2 `vpmaddwd` (8 lanes of two
/// products added) each followed by a `vpaddd` into one of 12 independent
/// accumulators: the inner steps of the AVX2 `--int8` product. With
/// `loads`, each group of 8 pairs also loads two 32-byte weight lines and
/// broadcasts four 32-bit activation pairs from memory (L1), as one step
/// of the AVX2 tile of 4 rows by 16 features does; without, every operand
/// is in registers. Written in assembly so that the compiler can neither
/// hoist nor drop the loop-invariant products.
///
/// # Safety
/// The CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn madd_peak_gmacs(loads: bool) -> f64 {
    use std::arch::asm;
    let mem = [1i16; 64];
    let p = mem.as_ptr();
    let iters = 20_000_000u64;
    let t = seconds();
    // Each iteration: 16 vpmaddwd of 16 multiply-adds each.
    for _ in 0..iters {
        if loads {
            // SAFETY: reads `mem` (128 bytes) only; clobbers the listed
            // registers.
            unsafe {
                asm!(
                    "vmovdqu ymm14, [{p}]",
                    "vmovdqu ymm15, [{p} + 32]",
                    "vpbroadcastd ymm13, [{p} + 64]",
                    "vpmaddwd ymm12, ymm13, ymm14", "vpaddd ymm0, ymm0, ymm12",
                    "vpmaddwd ymm12, ymm13, ymm15", "vpaddd ymm1, ymm1, ymm12",
                    "vpbroadcastd ymm13, [{p} + 68]",
                    "vpmaddwd ymm12, ymm13, ymm14", "vpaddd ymm2, ymm2, ymm12",
                    "vpmaddwd ymm12, ymm13, ymm15", "vpaddd ymm3, ymm3, ymm12",
                    "vpbroadcastd ymm13, [{p} + 72]",
                    "vpmaddwd ymm12, ymm13, ymm14", "vpaddd ymm4, ymm4, ymm12",
                    "vpmaddwd ymm12, ymm13, ymm15", "vpaddd ymm5, ymm5, ymm12",
                    "vpbroadcastd ymm13, [{p} + 76]",
                    "vpmaddwd ymm12, ymm13, ymm14", "vpaddd ymm6, ymm6, ymm12",
                    "vpmaddwd ymm12, ymm13, ymm15", "vpaddd ymm7, ymm7, ymm12",
                    "vmovdqu ymm14, [{p} + 96]",
                    "vmovdqu ymm15, [{p} + 64]",
                    "vpbroadcastd ymm13, [{p} + 80]",
                    "vpmaddwd ymm12, ymm13, ymm14", "vpaddd ymm0, ymm0, ymm12",
                    "vpmaddwd ymm12, ymm13, ymm15", "vpaddd ymm1, ymm1, ymm12",
                    "vpbroadcastd ymm13, [{p} + 84]",
                    "vpmaddwd ymm12, ymm13, ymm14", "vpaddd ymm2, ymm2, ymm12",
                    "vpmaddwd ymm12, ymm13, ymm15", "vpaddd ymm3, ymm3, ymm12",
                    "vpbroadcastd ymm13, [{p} + 88]",
                    "vpmaddwd ymm12, ymm13, ymm14", "vpaddd ymm4, ymm4, ymm12",
                    "vpmaddwd ymm12, ymm13, ymm15", "vpaddd ymm5, ymm5, ymm12",
                    "vpbroadcastd ymm13, [{p} + 92]",
                    "vpmaddwd ymm12, ymm13, ymm14", "vpaddd ymm6, ymm6, ymm12",
                    "vpmaddwd ymm12, ymm13, ymm15", "vpaddd ymm7, ymm7, ymm12",
                    p = in(reg) p,
                    out("ymm0") _, out("ymm1") _, out("ymm2") _, out("ymm3") _,
                    out("ymm4") _, out("ymm5") _, out("ymm6") _, out("ymm7") _,
                    out("ymm12") _, out("ymm13") _, out("ymm14") _, out("ymm15") _,
                    options(nostack, readonly),
                );
            }
        } else {
            // SAFETY: registers only; clobbers the listed ones.
            unsafe {
                asm!(
                    "vpmaddwd ymm12, ymm14, ymm15", "vpaddd ymm0, ymm0, ymm12",
                    "vpmaddwd ymm13, ymm14, ymm15", "vpaddd ymm1, ymm1, ymm13",
                    "vpmaddwd ymm12, ymm14, ymm15", "vpaddd ymm2, ymm2, ymm12",
                    "vpmaddwd ymm13, ymm14, ymm15", "vpaddd ymm3, ymm3, ymm13",
                    "vpmaddwd ymm12, ymm14, ymm15", "vpaddd ymm4, ymm4, ymm12",
                    "vpmaddwd ymm13, ymm14, ymm15", "vpaddd ymm5, ymm5, ymm13",
                    "vpmaddwd ymm12, ymm14, ymm15", "vpaddd ymm6, ymm6, ymm12",
                    "vpmaddwd ymm13, ymm14, ymm15", "vpaddd ymm7, ymm7, ymm13",
                    "vpmaddwd ymm12, ymm14, ymm15", "vpaddd ymm8, ymm8, ymm12",
                    "vpmaddwd ymm13, ymm14, ymm15", "vpaddd ymm9, ymm9, ymm13",
                    "vpmaddwd ymm12, ymm14, ymm15", "vpaddd ymm10, ymm10, ymm12",
                    "vpmaddwd ymm13, ymm14, ymm15", "vpaddd ymm11, ymm11, ymm13",
                    "vpmaddwd ymm12, ymm14, ymm15", "vpaddd ymm0, ymm0, ymm12",
                    "vpmaddwd ymm13, ymm14, ymm15", "vpaddd ymm1, ymm1, ymm13",
                    "vpmaddwd ymm12, ymm14, ymm15", "vpaddd ymm2, ymm2, ymm12",
                    "vpmaddwd ymm13, ymm14, ymm15", "vpaddd ymm3, ymm3, ymm13",
                    out("ymm0") _, out("ymm1") _, out("ymm2") _, out("ymm3") _,
                    out("ymm4") _, out("ymm5") _, out("ymm6") _, out("ymm7") _,
                    out("ymm8") _, out("ymm9") _, out("ymm10") _, out("ymm11") _,
                    out("ymm12") _, out("ymm13") _, out("ymm14") _, out("ymm15") _,
                    options(nostack, nomem),
                );
            }
        }
    }
    let secs = seconds() - t;
    (iters * 16 * 16) as f64 / secs / 1e9
}
