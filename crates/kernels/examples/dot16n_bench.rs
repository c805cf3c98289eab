//! Throughput of the many-row Q8_0 kernel (`dot16n`) on an opus-mt-sized
//! product: 2048 rows of 512 values against 64 activation rows (a beam-4
//! batch of 16 sentences), single-threaded, as G `vpdpbusd`-equivalents
//! (64 multiply-adds) per second.
//!
//! ```text
//! cargo run --release -p ferrite-kernels --example dot16n_bench
//! ```

use std::hint::black_box;
use std::time::Instant;

use ferrite_kernels::dispatch::vec_dot_kernel;
use ferrite_kernels::dot::{interleave, GroupKernels};
use ferrite_kernels::quant::{act_panels, quantize, GgmlType};

fn main() {
    let (rows, cols, tokens) = (2048usize, 512usize, 64usize);
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut rnd = |n: usize| -> Vec<f32> {
        (0..n)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                (seed >> 40) as f32 / (1u64 << 23) as f32 - 1.0
            })
            .collect()
    };
    let t = GgmlType::Q8_0;
    let k = vec_dot_kernel(t).expect("a Q8_0 kernel");
    let row_bytes = t.bytes_for(cols as u64).expect("whole blocks") as usize;
    let mut w = vec![0u8; rows * row_bytes];
    quantize(t, &rnd(rows * cols), &mut w).expect("quantize");
    let gr = k.group_rows;
    let mut groups = vec![0u8; w.len()];
    for (src, dst) in w
        .chunks_exact(gr * row_bytes)
        .zip(groups.chunks_exact_mut(gr * row_bytes))
    {
        assert!(interleave::interleave(t, gr, src, dst));
    }
    let mut acts = vec![0u8; tokens * row_bytes];
    quantize(t, &rnd(tokens * cols), &mut acts).expect("quantize");
    let mut panels = Vec::new();
    act_panels(&acts, row_bytes, &mut panels);
    let Some(GroupKernels::Eight {
        dot16n: Some(dot16n),
        ..
    }) = k.group_kernels()
    else {
        println!("no dot16n in this kernel set");
        return;
    };
    let mut out = vec![[0f32; 16]; 32];
    let per_call = |out: &mut Vec<[f32; 16]>| {
        for g in (0..rows).step_by(16) {
            let grp = &groups[g * row_bytes..(g + 16) * row_bytes];
            for t0 in (0..tokens).step_by(32) {
                let a = &acts[t0 * row_bytes..(t0 + 32) * row_bytes];
                let p = &panels[t0 * (row_bytes / 34)..(t0 + 32) * (row_bytes / 34)];
                dot16n(grp, a, row_bytes, p, &mut out[..]);
                black_box(&out);
            }
        }
    };
    for _ in 0..3 {
        let reps = 40;
        let t0 = Instant::now();
        for _ in 0..reps {
            per_call(&mut out);
        }
        let dt = t0.elapsed().as_secs_f64();
        let dpbusd = (reps * rows * cols * tokens) as f64 / 64.0;
        println!(
            "dot16n: {:.2} G vpdpbusd/s, {:.1} us per product",
            dpbusd / dt / 1e9,
            dt / reps as f64 * 1e6
        );
    }
}
