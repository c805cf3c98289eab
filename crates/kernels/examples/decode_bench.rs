//! One-token (decode) throughput of the eight-row group kernel (`dot8`)
//! of Q4_K and Q6_K over a matrix of `cols` columns and `MiB` MiB, one
//! thread: larger than the last-level cache, the weights stream from
//! memory as in decode (compare with `membw`'s read bandwidth); a few MiB,
//! they come from cache (the kernel's compute bound). Prints GB/s of
//! weights read, timed by the thread's CPU time (a shared machine's wall
//! clock also counts waiting for a core).
//!
//! ```text
//! cargo run --release -p ferrite-kernels --example decode_bench -- [cols] [MiB]
//! ```

use std::hint::black_box;

use ferrite_kernels::dispatch::vec_dot_kernel;
use ferrite_kernels::dot::interleave;
use ferrite_kernels::quant::{quantize, GgmlType};

mod common;
use common::thread_cpu_secs;

fn main() {
    let mut args = std::env::args().skip(1);
    let cols: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(1024);
    let mib: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(256);
    // Values in [-1, 1) (what they are does not change the speed).
    let rnd = |n: usize| -> Vec<f32> { (0..n).map(|i| (i as f32 * 0.618).sin()).collect() };
    for t in [GgmlType::Q4K, GgmlType::Q6K] {
        let k = vec_dot_kernel(t).expect("a kernel");
        let Some(dot8) = k.dot8.filter(|_| k.group_rows == 8) else {
            println!("{t}: no eight-row kernel in this set");
            continue;
        };
        let row_bytes = t.bytes_for(cols as u64).expect("whole blocks") as usize;
        let rows = ((mib << 20) / row_bytes).max(8) / 8 * 8;
        // One group of rows quantized, repeated (the values do not matter).
        let mut w = vec![0u8; 16 * row_bytes];
        quantize(t, &rnd(16 * cols), &mut w).expect("quantize");
        let mut one = vec![0u8; w.len()];
        for (src, dst) in w
            .chunks_exact(8 * row_bytes)
            .zip(one.chunks_exact_mut(8 * row_bytes))
        {
            assert!(interleave::interleave(t, 8, src, dst));
        }
        let groups: Vec<u8> = one.iter().copied().cycle().take(rows * row_bytes).collect();
        let a_t = k.act_type;
        let mut act = vec![0u8; a_t.bytes_for(cols as u64).expect("whole blocks") as usize];
        quantize(a_t, &rnd(cols), &mut act).expect("quantize");
        let run8 = || {
            let mut out = [0f32; 8];
            for g in groups.chunks_exact(8 * row_bytes) {
                dot8(g, &act, &mut out);
                black_box(&out);
            }
        };
        let time = |f: &dyn Fn()| {
            let mut times = Vec::new();
            for _ in 0..7 {
                let t0 = thread_cpu_secs();
                f();
                times.push(thread_cpu_secs() - t0);
            }
            times.sort_by(|a, b| a.total_cmp(b));
            groups.len() as f64 / times[times.len() / 2] / 1e9
        };
        println!(
            "{t} x {cols} cols, {} MiB: dot8 {:.1} GB/s",
            groups.len() >> 20,
            time(&run8)
        );
    }
}
