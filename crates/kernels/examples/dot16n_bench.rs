//! Throughput of a many-row kernel (`dot16n`), by default Q8_0's on an
//! opus-mt-sized product: 2048 rows of 512 values against 64 activation
//! rows (a beam-4 batch of 16 sentences), single-threaded, as G
//! `vpdpbusd`-equivalents (64 multiply-adds) per second and GMAC/s (the
//! machine limit: the `vnni_peak` example).
//!
//! ```text
//! cargo run --release -p ferrite-kernels --example dot16n_bench [-- TYPE [ROWS COLS TOKENS]]
//! ```
//!
//! e.g. `q4_k 1024 1024 512`: a Llama-3-shaped prefill product of 512
//! tokens (the kernel takes 64 tokens per call, as `matmul` calls it).

use std::hint::black_box;

use ferrite_kernels::dispatch::vec_dot_kernel;
use ferrite_kernels::dot::{interleave, GroupKernels};
use ferrite_kernels::quant::{act_panels, quantize, GgmlType};

/// Thread CPU time on Linux (other processes on a shared machine do not
/// count).
#[path = "common/clock.rs"]
mod clock;

/// Activation rows per kernel call (as `matmul`'s `CHUNK`).
const CALL: usize = 64;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let t = match args.first() {
        Some(name) => match GgmlType::from_name(name) {
            Some(t) => t,
            None => {
                eprintln!("unknown type {name}");
                std::process::exit(2);
            }
        },
        None => GgmlType::Q8_0,
    };
    let num = |i: usize, default: usize| -> usize {
        args.get(i).map_or(default, |a| match a.parse() {
            Ok(n) if n > 0 => n,
            _ => {
                eprintln!("not a positive number: {a}");
                std::process::exit(2);
            }
        })
    };
    let (rows, cols, tokens) = (num(1, 2048), num(2, 512), num(3, 64));
    let (rows, tokens) = (rows.next_multiple_of(16), tokens.next_multiple_of(CALL));
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
    let Some(k) = vec_dot_kernel(t) else {
        println!("no kernel for {}", t.name());
        return;
    };
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
    let at = k.act_type;
    let act_row = at.bytes_for(cols as u64).expect("whole blocks") as usize;
    let mut acts = vec![0u8; tokens * act_row];
    quantize(at, &rnd(tokens * cols), &mut acts).expect("quantize");
    // The Q8_0 activation panels (`matmul` passes none for other types).
    let mut panels = Vec::new();
    if at == GgmlType::Q8_0 {
        act_panels(&acts, act_row, &mut panels);
    }
    let per_row = act_row / 34;
    let Some(GroupKernels::Eight {
        dot16n: Some(dot16n),
        ..
    }) = k.group_kernels()
    else {
        println!("no dot16n in this kernel set");
        return;
    };
    let mut out = vec![[0f32; 16]; CALL];
    let per_call = |out: &mut Vec<[f32; 16]>| {
        for g in (0..rows).step_by(16) {
            let grp = &groups[g * row_bytes..(g + 16) * row_bytes];
            for t0 in (0..tokens).step_by(CALL) {
                let a = &acts[t0 * act_row..(t0 + CALL) * act_row];
                let p = panels
                    .get(t0 * per_row..(t0 + CALL) * per_row)
                    .unwrap_or_default();
                dot16n(grp, a, act_row, p, &mut out[..]);
                black_box(&out);
            }
        }
    };
    for _ in 0..3 {
        // About 2.7 G multiply-adds per timing, whatever the shape.
        let reps = (2_684_354_560 / (rows * cols * tokens)).max(1);
        let t0 = clock::now();
        for _ in 0..reps {
            per_call(&mut out);
        }
        let dt = (clock::now() - t0).as_secs_f64();
        let dpbusd = (reps * rows * cols * tokens) as f64 / 64.0;
        println!(
            "dot16n {}: {:.2} G vpdpbusd/s = {:.1} GMAC/s, {:.1} us per product ({})",
            t.name(),
            dpbusd / dt / 1e9,
            64.0 * dpbusd / dt / 1e9,
            dt / reps as f64 * 1e6,
            clock::NAME
        );
    }
}
