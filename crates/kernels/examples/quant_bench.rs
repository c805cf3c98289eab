//! Throughput of the weight quantizers (`quant::quantize`'s body, the
//! `quantize_row` entry of each kernel set this CPU runs), single-threaded,
//! on random rows of 4864 values (Qwen2.5-0.5B's FFN width, whole Q4_K
//! super-blocks); reported as ns per value.
//!
//! ```text
//! cargo run --release -p ferrite-kernels --example quant_bench [-- TYPE...]
//! ```
//!
//! Type names (`Q4_K`, `q5_0`, ...) limit the run to those types (default:
//! every type with a quantizer).

use std::hint::black_box;
use std::time::Instant;

use ferrite_kernels::dispatch::KernelSet;
use ferrite_kernels::quant::{GgmlType, ALL_TYPES};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    const COLS: usize = 4864;
    // Every type with a quantizer whose blocks divide the row.
    let mut types: Vec<GgmlType> = ALL_TYPES
        .iter()
        .copied()
        .filter(|t| t.can_quantize() && t.bytes_for(COLS as u64).is_some())
        .collect();
    if !args.is_empty() {
        types.retain(|t| args.iter().any(|a| a.eq_ignore_ascii_case(t.name())));
    }
    const ROWS: usize = 64;
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let x: Vec<f32> = (0..COLS * ROWS)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            ((seed >> 40) as f32 / (1u64 << 23) as f32 - 1.0) * 0.05
        })
        .collect();
    print!("{:8}", "type");
    let sets: Vec<_> = KernelSet::ALL
        .iter()
        .filter_map(|&s| s.table().map(|t| (s, t)))
        .collect();
    for (s, _) in &sets {
        print!("{:>12}", s.name());
    }
    println!("   (ns per value)");
    for t in types {
        print!("{:8}", t.name());
        let row = t.bytes_for(COLS as u64).expect("whole blocks") as usize;
        let mut out = vec![0u8; row];
        for (_, table) in &sets {
            let mut best = f64::MAX;
            for _ in 0..15 {
                let start = Instant::now();
                for r in x.chunks_exact(COLS) {
                    (table.quantize_row.f)(t, black_box(r), &mut out);
                    black_box(&out);
                }
                best = best.min(start.elapsed().as_secs_f64());
            }
            print!("{:>12.2}", best * 1e9 / (COLS * ROWS) as f64);
        }
        println!();
    }
}
