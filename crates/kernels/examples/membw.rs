//! Memory read bandwidth probe: the roofline of one-token decode, which
//! reads every weight it uses once per token.
//!
//! Streams through a buffer much larger than the last-level cache with 1
//! and 2 threads (each thread reads its own contiguous half, as the
//! matrix products split their rows), and prints the median GB/s
//! (10^9 bytes per second) over several passes. The reads are 64-byte
//! vector loads summed into a few accumulators (AVX-512 where the CPU has
//! it, else AVX2, else plain u64 adds), so the loop is limited by memory,
//! not by instructions.
//!
//! On a shared machine the wall clock counts time the threads were not
//! running; each pass is also timed by the threads' own CPU time (Linux
//! `CLOCK_THREAD_CPUTIME_ID`; the bytes over the longest thread's time),
//! which is what to compare with `perf stat`'s task-clock of a decode run.
//! With 2 threads that figure assumes they ran at the same time (else it
//! is optimistic); the best wall-clock pass is a bound from below.
//!
//! `cargo run --release -p ferrite-kernels --example membw -- [MiB] [passes]`
//! (default 1024 MiB, 9 passes). Compare with the "weights read per token"
//! and "GB/s" that `ferrite bench` prints for decode.

use std::time::Instant;

mod common;
use common::thread_cpu_secs;

fn main() {
    let mut args = std::env::args().skip(1);
    let mib: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(1024);
    let passes: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(9);
    let bytes = mib.max(1) << 20;
    // u64 words, touched once so the pages exist before timing.
    let buf: Vec<u64> = (0..bytes / 8).map(|i| i as u64).collect();
    println!(
        "buffer {} MiB, {} passes, reader: {}",
        mib,
        passes,
        reader_name()
    );
    for threads in [1usize, 2] {
        let mut rates = Vec::with_capacity(passes);
        let mut cpu_rates = Vec::with_capacity(passes);
        let mut check = 0u64;
        for _ in 0..passes.max(1) {
            let part = buf.len().div_ceil(threads);
            let t0 = Instant::now();
            let sums: Vec<(u64, f64)> = std::thread::scope(|s| {
                let handles: Vec<_> = buf
                    .chunks(part)
                    .map(|c| {
                        s.spawn(move || {
                            let c0 = thread_cpu_secs();
                            let sum = read_all(c);
                            (sum, thread_cpu_secs() - c0)
                        })
                    })
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).collect()
            });
            let secs = t0.elapsed().as_secs_f64();
            let cpu = sums.iter().map(|s| s.1).fold(0.0, f64::max);
            check = check.wrapping_add(sums.iter().fold(0u64, |a, b| a.wrapping_add(b.0)));
            rates.push(bytes as f64 / secs / 1e9);
            cpu_rates.push(bytes as f64 / cpu / 1e9);
        }
        for (what, rates) in [
            ("wall clock", &mut rates),
            ("thread CPU time", &mut cpu_rates),
        ] {
            rates.sort_by(|a, b| a.total_cmp(b));
            println!(
                "threads {threads}, {what}: median {:.1} GB/s (min {:.1}, max {:.1})",
                rates[rates.len() / 2],
                rates[0],
                rates[rates.len() - 1],
            );
        }
        println!("  [checksum {:x}]", check & 0xffff);
    }
}

fn reader_name() -> &'static str {
    #[cfg(target_arch = "x86_64")]
    {
        if is_x86_feature_detected!("avx512f") {
            return "avx512";
        }
        if is_x86_feature_detected!("avx2") {
            return "avx2";
        }
    }
    "u64"
}

/// A checksum of every word of `words` (so that no read is skipped).
fn read_all(words: &[u64]) -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        if is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512F.
            return unsafe { read_avx512(words) };
        }
        if is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2.
            return unsafe { read_avx2(words) };
        }
    }
    read_plain(words)
}

fn read_plain(words: &[u64]) -> u64 {
    let mut acc = [0u64; 8];
    let chunks = words.chunks_exact(8);
    let tail = chunks.remainder();
    for c in chunks {
        for (a, &w) in acc.iter_mut().zip(c) {
            *a = a.wrapping_add(w);
        }
    }
    let tail = tail.iter().fold(0u64, |a, &b| a.wrapping_add(b));
    acc.iter().fold(tail, |a, &b| a.wrapping_add(b))
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn read_avx512(words: &[u64]) -> u64 {
    use std::arch::x86_64::*;
    let chunks = words.chunks_exact(32);
    let tail = read_plain(chunks.remainder());
    let mut acc = [_mm512_setzero_si512(); 4];
    for c in chunks {
        for (i, a) in acc.iter_mut().enumerate() {
            // SAFETY: words 8i..8i + 8 of the 32-word chunk are readable;
            // `loadu` needs no alignment.
            let v = unsafe { _mm512_loadu_si512(c.as_ptr().add(8 * i).cast()) };
            *a = _mm512_add_epi64(*a, v);
        }
    }
    let mut out = [0u64; 8];
    let s = _mm512_add_epi64(
        _mm512_add_epi64(acc[0], acc[1]),
        _mm512_add_epi64(acc[2], acc[3]),
    );
    // SAFETY: `out` is 8 writable u64.
    unsafe { _mm512_storeu_si512(out.as_mut_ptr().cast(), s) };
    out.iter().fold(tail, |a, &b| a.wrapping_add(b))
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn read_avx2(words: &[u64]) -> u64 {
    use std::arch::x86_64::*;
    let chunks = words.chunks_exact(16);
    let tail = read_plain(chunks.remainder());
    let mut acc = [_mm256_setzero_si256(); 4];
    for c in chunks {
        for (i, a) in acc.iter_mut().enumerate() {
            // SAFETY: words 4i..4i + 4 of the 16-word chunk are readable;
            // `loadu` needs no alignment.
            let v = unsafe { _mm256_loadu_si256(c.as_ptr().add(4 * i).cast()) };
            *a = _mm256_add_epi64(*a, v);
        }
    }
    let mut out = [0u64; 4];
    let s = _mm256_add_epi64(
        _mm256_add_epi64(acc[0], acc[1]),
        _mm256_add_epi64(acc[2], acc[3]),
    );
    // SAFETY: `out` is 4 writable u64.
    unsafe { _mm256_storeu_si256(out.as_mut_ptr().cast(), s) };
    out.iter().fold(tail, |a, &b| a.wrapping_add(b))
}
