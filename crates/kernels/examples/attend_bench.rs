//! Attention loops over an f16 cache, per kernel set, single thread, thread
//! CPU time (best of 9 runs): one query's scores against `n` cached keys,
//! and the weighted sum of `n` cached values, at Gemma 3's head size 256
//! and SmolLM2's 64:
//! `cargo run --release -p ferrite-kernels --example attend_bench`.

use std::hint::black_box;
use std::time::Instant;

use ferrite_kernels::attend::F16Rows;
use ferrite_kernels::dispatch::KernelSet;

fn main() {
    for head_dim in [256usize, 64] {
        let n = 512;
        let kv_dim = head_dim;
        let cache: Vec<u8> = (0..n * kv_dim)
            .flat_map(|i| half_bits((i % 97) as f32 * 0.01))
            .collect();
        let runs = [F16Rows {
            bytes: &cache,
            stride: 2 * kv_dim,
            n,
            cold: false,
        }];
        let q: Vec<f32> = (0..head_dim).map(|i| (i % 13) as f32 * 0.1).collect();
        let p: Vec<f32> = (0..n).map(|i| 1.0 / (1 + i) as f32).collect();
        for set in KernelSet::ALL {
            let Some(t) = set.table() else {
                println!("SKIPPED {}: not supported by this CPU", set.name());
                continue;
            };
            let mut s = vec![0f32; n];
            let mut o = vec![0f32; head_dim];
            let scores = best(|| (t.scores_f16.f)(&q, 1, &runs, head_dim, 0.1, black_box(&mut s)));
            let sums = best(|| (t.weighted_sum_f16.f)(&p, 1, &runs, black_box(&mut o)));
            println!(
                "head_dim {head_dim:>3}, {n} rows, {:>6}: scores {:>7.2} us, weighted sum {:>7.2} us",
                set.name(),
                scores * 1e6,
                sums * 1e6
            );
        }
    }
}

/// Best seconds per call over 9 runs of 200 calls.
fn best(mut f: impl FnMut()) -> f64 {
    (0..9)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..200 {
                f();
            }
            t.elapsed().as_secs_f64() / 200.0
        })
        .fold(f64::MAX, f64::min)
}

/// f16 bits of `x` (round to nearest even), little-endian.
fn half_bits(x: f32) -> [u8; 2] {
    ferrite_kernels::quant::f16_bits_from_f32(x).to_le_bytes()
}
