//! Throughput of the dot-product kernels, scalar reference vs every SIMD set
//! this CPU runs, on a SmolLM2-135M-sized weight matrix (576 rows of 1536
//! values, one activation row), single-threaded; reported as GB/s of
//! weight bytes (the matrix fits in L2 for the quantized types). Where the
//! fastest set has a four-row kernel (`VecDotKernel::dot4`), it is timed
//! too, against four calls of that set's `dot`.
//!
//! ```text
//! cargo run --release -p ferrite-kernels --example dot_bench [-- [ROWS COLS] [TYPE...]]
//! ```
//!
//! Type names (`Q4_0`, `q6_k`, ...) limit the run to those types.

use std::hint::black_box;
use std::time::Duration;

use ferrite_kernels::dispatch::{kernel_set_name, KernelSet};
use ferrite_kernels::dot::interleave;
use ferrite_kernels::quant::{act_panels, quantize, GgmlType, ALL_TYPES};

/// xorshift64*: deterministic inputs without extra crates.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn values(&mut self, n: usize) -> Vec<f32> {
        (0..n)
            .map(|_| (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0)
            .collect()
    }
}

/// Weights of `rows x cols` values of type `t`: quantized random values
/// where we have a quantizer, else random bytes with the leading f16 scales
/// (and the Q6_K one, at the end) set to 1/64 so nothing overflows.
fn weights(t: GgmlType, rows: usize, cols: usize, rng: &mut Rng) -> Vec<u8> {
    let n = rows * cols;
    let size = t.bytes_for(n as u64).expect("whole blocks") as usize;
    let mut w = vec![0u8; size];
    if t.can_quantize() {
        quantize(t, &rng.values(n), &mut w).expect("quantize");
        return w;
    }
    w.iter_mut().for_each(|b| *b = rng.next() as u8);
    let scale = 0x2400u16.to_le_bytes(); // f16 1/64
    for block in w.chunks_exact_mut(t.type_size()) {
        match t {
            GgmlType::Q6K => block[208..210].copy_from_slice(&scale),
            GgmlType::Q3K => block[108..110].copy_from_slice(&scale),
            GgmlType::Q2K => {
                block[80..82].copy_from_slice(&scale);
                block[82..84].copy_from_slice(&scale);
            }
            _ => {
                block[0..2].copy_from_slice(&scale);
                block[2..4].copy_from_slice(&scale);
            }
        }
    }
    w
}

/// A clock for the measurements: on Linux the thread's CPU time, so that
/// other processes on a shared machine do not count; elsewhere wall time.
#[path = "common/clock.rs"]
mod clock;

/// Best time of a few runs of `reps` passes over all rows.
fn time_matrix(dot: fn(&[u8], &[u8]) -> f32, w: &[u8], a: &[u8], rows: usize) -> Duration {
    let row_bytes = w.len() / rows;
    best_time(|| {
        let mut s = 0.0f32;
        for row in w.chunks_exact(row_bytes) {
            s += dot(black_box(row), black_box(a));
        }
        black_box(s);
    })
}

/// As [`time_matrix`], `N` rows per call of a many-row kernel (`dot4`,
/// or `dot8` on weights already repacked by `interleave`; `rows` a
/// multiple of `N`).
fn time_matrix_n<const N: usize>(
    dot_n: fn(&[u8], &[u8], &mut [f32; N]),
    w: &[u8],
    a: &[u8],
    rows: usize,
) -> Duration {
    let row_bytes = w.len() / rows;
    best_time(|| {
        let mut out = [0.0f32; N];
        let mut s = 0.0f32;
        for group in w.chunks_exact(N * row_bytes) {
            dot_n(black_box(group), black_box(a), &mut out);
            s += out.iter().sum::<f32>();
        }
        black_box(s);
    })
}

/// Best time of a few runs of `reps` calls of `pass`.
fn best_time(pass: impl Fn()) -> Duration {
    // Calibrate to ~50 ms per run.
    let start = clock::now();
    let mut reps = 0u32;
    while clock::now() - start < Duration::from_millis(20) {
        pass();
        reps += 1;
    }
    let reps = (reps * 5 / 2).max(1);
    let mut best = Duration::MAX;
    for _ in 0..7 {
        let start = clock::now();
        for _ in 0..reps {
            pass();
        }
        best = best.min((clock::now() - start) / reps);
    }
    best
}

fn main() {
    let (dims, names): (Vec<String>, Vec<String>) = std::env::args()
        .skip(1)
        .partition(|a| a.parse::<usize>().is_ok());
    let dims: Vec<usize> = dims.iter().filter_map(|a| a.parse().ok()).collect();
    let (rows, cols) = match dims[..] {
        [r, c] => (r, c),
        _ => (576, 1536),
    };
    let only: Vec<GgmlType> = names
        .iter()
        .map(|n| GgmlType::from_name(n).unwrap_or_else(|| panic!("unknown type {n}")))
        .collect();
    let sets: Vec<KernelSet> = KernelSet::ALL
        .into_iter()
        .filter(|s| s.is_supported())
        .collect();
    println!(
        "dot kernels, {rows} x {cols} weights, one thread, best of 7 ({}); dispatch picks \"{}\"",
        clock::NAME,
        kernel_set_name()
    );
    print!("{:>5} {:>9}", "type", "KiB");
    for s in &sets {
        print!(" {:>13}", format!("{} GB/s", s.name()));
    }
    println!(
        " {:>8} {:>15} {:>9} {:>15} {:>9}",
        "speedup", "dot4 GB/s", "dot4/dot", "dot8 GB/s", "dot8/dot"
    );
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for t in ALL_TYPES {
        let Some(scalar) = KernelSet::Scalar.vec_dot_kernel(t) else {
            continue;
        };
        if cols % t.block_size() != 0 || !(only.is_empty() || only.contains(&t)) {
            continue;
        }
        let w = weights(t, rows, cols, &mut rng);
        let mut a = vec![0u8; scalar.act_type.bytes_for(cols as u64).unwrap_or(0) as usize];
        quantize(scalar.act_type, &rng.values(cols), &mut a).expect("quantize activations");
        print!("{:>5} {:>9.1}", t.name(), w.len() as f64 / 1024.0);
        let mut gbs = Vec::new();
        for s in &sets {
            let k = s
                .vec_dot_kernel(t)
                .expect("kernel for a type with a scalar one");
            let secs = time_matrix(k.dot, &w, &a, rows).as_secs_f64();
            let rate = w.len() as f64 / secs / 1e9;
            gbs.push(rate);
            let note = if s.has_own_kernel(t) { " " } else { "*" };
            print!(" {:>12.2}{note}", rate);
        }
        let speedup = gbs.last().copied().unwrap_or(0.0) / gbs[0];
        print!(" {speedup:>7.2}x");
        let dot4 = sets
            .last()
            .and_then(|s| s.vec_dot_kernel(t))
            .and_then(|k| k.dot4);
        match dot4 {
            Some(dot4) if rows % 4 == 0 => {
                let secs = time_matrix_n(dot4, &w, &a, rows).as_secs_f64();
                let rate = w.len() as f64 / secs / 1e9;
                let vs = rate / gbs.last().copied().unwrap_or(rate);
                print!(" {rate:>15.2} {vs:>8.2}x");
            }
            _ => print!(" {:>15} {:>9}", "-", "-"),
        }
        let dot8 = sets
            .last()
            .and_then(|s| s.vec_dot_kernel(t))
            .and_then(|k| k.dot8);
        let row_bytes = w.len() / rows;
        let mut packed = vec![0u8; w.len()];
        let repacked = rows % 8 == 0
            && w.chunks_exact(8 * row_bytes)
                .zip(packed.chunks_exact_mut(8 * row_bytes))
                .all(|(src, dst)| interleave::interleave(t, 8, src, dst));
        match dot8 {
            Some(dot8) if repacked => {
                let secs = time_matrix_n(dot8, &packed, &a, rows).as_secs_f64();
                let rate = w.len() as f64 / secs / 1e9;
                let vs = rate / gbs.last().copied().unwrap_or(rate);
                println!(" {rate:>15.2} {vs:>8.2}x");
            }
            _ => println!(" {:>15} {:>9}", "-", "-"),
        }
    }
    println!("* no kernel of its own in this set: the scalar fallback");
    prefill(&sets, rows, cols, &only, &mut rng);
}

/// Activation rows of the prefill figures.
const PREFILL_TOKENS: usize = 64;

/// The prefill products as `Linear::block_products` runs them: every
/// group of the repacked matrix against [`PREFILL_TOKENS`] activation
/// rows, in calls of 32 rows, with the set's widest kernel (`dot16n` on
/// pairs of groups, else `dot8n`, else `dot8` row by row), per set, as
/// GMAC/s (multiply-adds of weights by activations).
fn prefill(sets: &[KernelSet], rows: usize, cols: usize, only: &[GgmlType], rng: &mut Rng) {
    println!("\nprefill: {PREFILL_TOKENS} activation rows, GMAC/s (kernel: 16n, 8n or 8)");
    for t in ALL_TYPES {
        if !rows.is_multiple_of(16)
            || !cols.is_multiple_of(t.block_size())
            || !(only.is_empty() || only.contains(&t))
        {
            continue;
        }
        let kernels: Vec<_> = sets
            .iter()
            .filter_map(|s| Some((s, s.vec_dot_kernel(t)?)))
            .filter(|(_, k)| k.dot8.is_some() && k.group_rows == 8)
            .collect();
        let Some(&(_, first)) = kernels.first() else {
            continue;
        };
        let act_type = first.act_type;
        let w = weights(t, rows, cols, rng);
        let row_bytes = w.len() / rows;
        let mut packed = vec![0u8; w.len()];
        let ok = w
            .chunks_exact(8 * row_bytes)
            .zip(packed.chunks_exact_mut(8 * row_bytes))
            .all(|(src, dst)| interleave::interleave(t, 8, src, dst));
        if !ok {
            continue;
        }
        let act_row = act_type.bytes_for(cols as u64).unwrap_or(0) as usize;
        let mut acts = vec![0u8; act_row * PREFILL_TOKENS];
        for a in acts.chunks_exact_mut(act_row) {
            quantize(act_type, &rng.values(cols), a).expect("quantize activations");
        }
        let mut panels = Vec::new();
        if act_type == GgmlType::Q8_0 {
            act_panels(&acts, act_row, &mut panels);
        }
        let per_row = act_row / 34;
        print!("{:>5}", t.name());
        for (s, k) in kernels {
            let (name, secs) = if let Some(dot16n) = k.dot16n {
                let secs = best_time(|| {
                    let mut out = [[0f32; 16]; 32];
                    for groups in packed.chunks_exact(16 * row_bytes) {
                        for t0 in (0..PREFILL_TOKENS).step_by(32) {
                            let a = &acts[t0 * act_row..(t0 + 32) * act_row];
                            let p = panels
                                .get(t0 * per_row..(t0 + 32) * per_row)
                                .unwrap_or_default();
                            dot16n(black_box(groups), black_box(a), act_row, p, &mut out);
                            black_box(&out);
                        }
                    }
                });
                ("16n", secs)
            } else if let Some(dot8n) = k.dot8n {
                let secs = best_time(|| {
                    let mut out = [[0f32; 8]; 32];
                    for group in packed.chunks_exact(8 * row_bytes) {
                        for t0 in (0..PREFILL_TOKENS).step_by(32) {
                            let a = &acts[t0 * act_row..(t0 + 32) * act_row];
                            dot8n(black_box(group), black_box(a), act_row, &mut out);
                            black_box(&out);
                        }
                    }
                });
                ("8n", secs)
            } else {
                let dot8 = k.dot8.expect("filtered");
                let secs = best_time(|| {
                    let mut out = [0f32; 8];
                    for group in packed.chunks_exact(8 * row_bytes) {
                        for a in acts.chunks_exact(act_row) {
                            dot8(black_box(group), black_box(a), &mut out);
                            black_box(&out);
                        }
                    }
                });
                ("8", secs)
            };
            let macs = (rows * cols * PREFILL_TOKENS) as f64;
            let rate = macs / secs.as_secs_f64() / 1e9;
            print!(" {:>8} {name:>3} {rate:>7.1}", s.name());
        }
        println!();
    }
}
