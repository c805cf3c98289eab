use super::base::{quantize_row, row_len, row_parts, BaseReader, BaseWriter};
use super::kld::{mean_and_uncertainty, median, percentile};
use super::*;

fn logits(n: usize, seed: u32) -> Vec<f32> {
    let mut x = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x % 20_000) as f32 / 1000.0 - 10.0
        })
        .collect()
}

fn log_softmax(l: &[f32]) -> Vec<f64> {
    let max = l.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let sum: f64 = l.iter().map(|&v| (v as f64 - max).exp()).sum();
    l.iter().map(|&v| v as f64 - max - sum.ln()).collect()
}

#[test]
fn nll_is_minus_log_softmax() {
    let l = logits(1000, 3);
    let ls = log_softmax(&l);
    for t in [0u32, 17, 999] {
        assert!((nll(&l, t) + ls[t as usize]).abs() < 1e-9);
    }
    // Uniform logits: every token has probability 1/n.
    assert!((nll(&[2.5; 64], 5) - (64f64).ln()).abs() < 1e-12);
}

#[test]
fn perplexity_and_its_error_follow_the_definitions() {
    let mut s = NllStats::default();
    for v in [1.0, 2.0, 3.0, 4.0] {
        s.add(v);
    }
    assert_eq!(s.count, 4);
    assert!((s.perplexity() - 2.5f64.exp()).abs() < 1e-12);
    // var = mean(x^2) - mean^2 = 7.5 - 6.25; error = ppl * sqrt(var / 3)
    let want = 2.5f64.exp() * (1.25f64 / 3.0).sqrt();
    assert!((s.uncertainty().unwrap() - want).abs() < 1e-12);
    let mut one = NllStats::default();
    one.add(1.0);
    assert_eq!(one.uncertainty(), None);
}

#[test]
fn a_quantized_row_gives_back_the_log_probabilities() {
    let l = logits(5001, 7);
    let row = quantize_row(&l);
    assert_eq!(row.len(), row_len(5001));
    assert_eq!(row_len(5001), 5002 + 4);
    let (scale, min_log_prob, q) = row_parts(&row);
    let ls = log_softmax(&l);
    let max = l.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    for (i, &v) in l.iter().enumerate() {
        let back = scale as f64 * q[i] as f64 + min_log_prob as f64;
        if v > max - 16.0 {
            // Within half a step (plus f32 rounding of the offsets).
            assert!((back - ls[i]).abs() <= scale as f64 * 0.5 + 1e-5, "token {i}");
        } else {
            assert_eq!(q[i], 0);
        }
    }
    // A flat row has no scale: every value is the minimum.
    let flat = quantize_row(&[1.0; 10]);
    let (s, m, q) = row_parts(&flat);
    assert_eq!(s, 0.0);
    assert!((m as f64 + 10f64.ln()).abs() < 1e-6);
    assert!(q.iter().all(|&v| v == 0));
}

#[test]
fn percentiles_interpolate_as_llama_cpp() {
    let v = [0.0, 1.0, 2.0, 3.0, 4.0];
    assert_eq!(percentile(&v, 0.0), 0.0);
    assert_eq!(percentile(&v, 1.0), 4.0);
    assert!((percentile(&v, 0.9) - 3.6).abs() < 1e-12);
    assert_eq!(median(&v), 2.0);
    assert_eq!(median(&v[..4]), 1.5);
    assert_eq!(mean_and_uncertainty(10.0, 30.0, 5), (2.0, 0.0)); // 10 values or fewer: no error
}

#[test]
fn rows_come_back_in_order_for_every_thread_count() {
    for n in [1, 2, 3] {
        let t = Threads::new(n);
        let got = per_row(&t, 37, |r| r * r);
        assert_eq!(got, (0..37).map(|r| r * r).collect::<Vec<_>>());
    }
}

fn base_file(n_ctx: usize, n_chunk: usize, n_vocab: usize) -> Vec<u8> {
    let mut bytes = Vec::new();
    let chunks = Chunking { n_ctx, n_chunk };
    let tokens: Vec<u32> = (0..n_ctx * n_chunk).map(|i| (i % n_vocab) as u32).collect();
    {
        let mut w = BaseWriter::new(&mut bytes, "mem");
        w.header(&chunks, n_vocab, &tokens).unwrap();
        for r in 0..n_chunk * chunks.scored() {
            w.row(&quantize_row(&logits(n_vocab, r as u32))).unwrap();
        }
        w.finish().unwrap();
    }
    bytes
}

#[test]
fn a_base_file_reads_back_what_was_written() {
    let bytes = base_file(8, 3, 11);
    let mut r = BaseReader::open(&bytes[..], bytes.len() as u64, "mem").unwrap();
    assert_eq!((r.chunks.n_ctx, r.chunks.n_chunk, r.n_vocab), (8, 3, 11));
    assert_eq!(r.tokens.len(), 24);
    assert_eq!(r.tokens[13], 2);
    let first = r.chunk_rows().unwrap();
    assert_eq!(first.len(), 3 * row_len(11));
    assert_eq!(&first[..row_len(11)], &quantize_row(&logits(11, 0))[..]);
}

#[test]
fn hostile_base_files_are_refused_before_allocating() {
    let good = base_file(8, 2, 5);
    let open = |b: &[u8]| BaseReader::open(b, b.len() as u64, "f").map(|_| ()).unwrap_err().to_string();
    assert!(open(&good[..10]).contains("header"), "{}", open(&good[..10]));
    let mut bad = good.clone();
    bad[0] = b'X';
    assert!(open(&bad).contains("_logits_"));
    // A truncated body: the header's sizes do not match the length.
    assert!(open(&good[..good.len() - 1]).contains("needs"));
    // Header fields that would ask for terabytes, or overflow.
    for (at, v) in [(8, u32::MAX), (16, i32::MAX as u32), (12, i32::MAX as u32), (12, 0), (16, u32::MAX)] {
        let mut b = good.clone();
        b[at..at + 4].copy_from_slice(&v.to_le_bytes());
        let e = open(&b);
        assert!(e.contains("not a KL-divergence base file"), "{e}");
    }
}
