//! The scalar reference dot products (`ferrite_kernels::dot`) against f64
//! references, on odd block counts.
//!
//! Accuracy is measured with the metric of ggml's
//! `tests/test-quantize-fns.cpp`, `|dot - reference| / n`, which must stay
//! below `MAX_DOT_PRODUCT_ERROR = 0.02`. ggml's reference is the dot product
//! of the *original* f32 weights; ours is the dot product of the
//! *dequantized* weights with the original f32 activations, which leaves
//! out the weight format's own quantization error (measured by
//! `quant_roundtrip.rs`) and is the only choice for the k-quants, whose
//! test weights are random blocks (we have no k-quant quantizer). ggml's
//! own test, on its own data, is reproduced too for the types we can
//! quantize. A second test removes quantization entirely and bounds the
//! kernels' f32 rounding; a third checks the documented summation order
//! bit for bit.
//!
//! The metric is an absolute error divided by `n`, and a dot-product error
//! made of independent roundings grows like `sqrt(n)`, so the metric
//! shrinks like `1 / sqrt(n)`: it is only comparable with ggml's at ggml's
//! length, `32 * 128`. Rows shorter than that make it stricter; for longer
//! rows we also check it rescaled to that length,
//! `|dot - reference| / sqrt(n * 4096)`, so no length loosens it.

use ferrite_kernels::dot::vec_dot_kernel;
use ferrite_kernels::quant::{
    as_blocks, dequantize, f16_bits_from_f32, mxfp4::e8m0_half, quantize, BlockIq4Nl, BlockIq4Xs,
    BlockMxfp4, BlockQ2K, BlockQ3K, BlockQ4K, BlockQ4_0, BlockQ4_1, BlockQ5K, BlockQ5_0, BlockQ5_1,
    BlockQ6K, BlockQ8K, BlockQ8_0, BlockQ8_1, GgmlType, ALL_TYPES,
};
use std::mem::offset_of;
use GgmlType::*;

/// ggml's `MAX_DOT_PRODUCT_ERROR`.
const MAX_DOT_PRODUCT_ERROR: f64 = 0.02;
/// ggml's `MAX_QUANTIZATION_REFERENCE_ERROR`, its bound for the F32 dot.
const MAX_F32_DOT_ERROR: f64 = 0.0001;
/// ggml's test length, `32 * 128`.
const GGML_TEST_SIZE: usize = 32 * 128;

/// Every weight type with a kernel.
const WEIGHT_TYPES: [GgmlType; 16] = [
    F32, F16, Bf16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2K, Q3K, Q4K, Q5K, Q6K, Mxfp4, Iq4Nl, Iq4Xs,
];

/// A small deterministic generator (xorshift64*), so the test needs no crates.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }

    /// Values in the range of ggml's test signal `0.1 + 2 cos(..)`.
    fn values(&mut self, n: usize) -> Vec<f32> {
        (0..n)
            .map(|_| 0.1 + 2.0 * (2.0 * self.unit() - 1.0))
            .collect()
    }
}

/// ggml's `generate_data`: `0.1 + 2 * cosf(i + offset)`.
fn generate_data(offset: f32, n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| (0.1 + 2.0 * f64::from((i as f32 + offset).cos())) as f32)
        .collect()
}

fn bytes_for(t: GgmlType, n: usize) -> usize {
    t.bytes_for(n as u64).expect("whole blocks") as usize
}

fn quantized(t: GgmlType, x: &[f32]) -> Vec<u8> {
    let mut q = vec![0u8; bytes_for(t, x.len())];
    quantize(t, x, &mut q).expect("quantize");
    q
}

fn dequantized(t: GgmlType, q: &[u8], n: usize) -> Vec<f32> {
    let mut y = vec![0.0f32; n];
    dequantize(t, q, &mut y).expect("dequantize");
    y
}

/// Byte offsets of a weight block's f16 scale `d` and of its f16 min (`m`
/// for Q4_1/Q5_1, `dmin` for Q2_K/Q4_K/Q5_K), if it has one.
fn scale_fields(t: GgmlType) -> (usize, Option<usize>) {
    match t {
        Q4_0 => (offset_of!(BlockQ4_0, d), None),
        Q5_0 => (offset_of!(BlockQ5_0, d), None),
        Q8_0 => (offset_of!(BlockQ8_0, d), None),
        Q4_1 => (offset_of!(BlockQ4_1, d), Some(offset_of!(BlockQ4_1, m))),
        Q5_1 => (offset_of!(BlockQ5_1, d), Some(offset_of!(BlockQ5_1, m))),
        Q2K => (offset_of!(BlockQ2K, d), Some(offset_of!(BlockQ2K, dmin))),
        Q3K => (offset_of!(BlockQ3K, d), None),
        Q4K => (offset_of!(BlockQ4K, d), Some(offset_of!(BlockQ4K, dmin))),
        Q5K => (offset_of!(BlockQ5K, d), Some(offset_of!(BlockQ5K, dmin))),
        Q6K => (offset_of!(BlockQ6K, d), None),
        Iq4Nl => (offset_of!(BlockIq4Nl, d), None),
        Iq4Xs => (offset_of!(BlockIq4Xs, d), None),
        _ => unreachable!("{t} has no f16 scale fields"),
    }
}

fn get_f16(block: &[u8], at: usize) -> f32 {
    let mut y = [0.0f32];
    dequantize(F16, &block[at..at + 2], &mut y).expect("one f16");
    y[0]
}

fn set_f16(block: &mut [u8], at: usize, v: f32) {
    block[at..at + 2].copy_from_slice(&f16_bits_from_f32(v).to_le_bytes());
}

/// Sets `d` (and the min, if the format has one) of every block in `q`.
fn set_scales(t: GgmlType, q: &mut [u8], d: f32, min: f32) {
    let (d_at, min_at) = scale_fields(t);
    for block in q.chunks_exact_mut(t.type_size()) {
        set_f16(block, d_at, d);
        if let Some(m_at) = min_at {
            set_f16(block, m_at, min);
        }
    }
}

/// Random k-quant blocks (we have no k-quant quantizer): random bytes for
/// the packed values and group scales, and f16 super-scales chosen per
/// block so that the largest dequantized weight has magnitude about 2, the
/// amplitude of ggml's test signal (`d` of either sign, `dmin` positive).
fn random_k_blocks(t: GgmlType, blocks: usize, rng: &mut Rng) -> Vec<u8> {
    let (ts, bs) = (t.type_size(), t.block_size());
    let mut q = rng.bytes(blocks * ts);
    for block in q.chunks_exact_mut(ts) {
        let sign = if rng.next().is_multiple_of(2) {
            1.0
        } else {
            -1.0
        };
        let d0 = sign * (0.5 + 0.5 * rng.unit());
        let dmin0 = 0.5 + 0.5 * rng.unit();
        set_scales(t, block, d0, dmin0);
        let y = dequantized(t, block, bs);
        let amax = y.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        if amax > 0.0 {
            let c = 2.0 / amax;
            set_scales(t, block, d0 * c, dmin0 * c);
        }
    }
    q
}

/// Weights of type `t` for `n` values: (bytes, dequantized values).
fn weights(t: GgmlType, n: usize, rng: &mut Rng) -> (Vec<u8>, Vec<f32>) {
    let q = if t.can_quantize() {
        quantized(t, &rng.values(n))
    } else {
        random_k_blocks(t, n / t.block_size(), rng)
    };
    let y = dequantized(t, &q, n);
    (q, y)
}

/// Row lengths: odd block counts for the block formats, odd lengths (and
/// partial 32-lane chunks) for the float ones.
fn lengths(t: GgmlType) -> Vec<usize> {
    if t.block_size() == 1 {
        vec![1, 3, 7, 33, 31 * 33, 255 * 7]
    } else {
        [1, 3, 7, 33].iter().map(|b| b * t.block_size()).collect()
    }
}

fn dot_f64(a: &[f32], b: &[f32]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(&x, &y)| f64::from(x) * f64::from(y))
        .sum()
}

/// The largest of ggml's metric and its rescaling to ggml's length.
fn ggml_metric(dot: f32, reference: f64, n: usize) -> (f64, f64) {
    let e = (f64::from(dot) - reference).abs();
    (e / n as f64, e / (n as f64 * GGML_TEST_SIZE as f64).sqrt())
}

#[test]
fn pairs_weight_types_with_ggml_activation_types() {
    let want = [
        (F32, F32),
        (F16, F32),
        (Bf16, F32),
        (Q4_0, Q8_0),
        (Q5_0, Q8_0),
        (Q8_0, Q8_0),
        (Mxfp4, Q8_0),
        (Q4_1, Q8_1),
        (Q5_1, Q8_1),
        (Q2K, Q8K),
        (Q3K, Q8K),
        (Q4K, Q8K),
        (Q5K, Q8K),
        (Q6K, Q8K),
        (Iq4Nl, Q8_0),
        (Iq4Xs, Q8K),
    ];
    for t in ALL_TYPES {
        let got = vec_dot_kernel(t).map(|k| k.act_type);
        let expected = want.iter().find(|(w, _)| *w == t).map(|&(_, a)| a);
        assert_eq!(got, expected, "{t}");
        if let Some(a) = got {
            assert!(a.can_quantize(), "{t}: activations {a} cannot be quantized");
        }
    }
}

#[test]
fn error_vs_dequantized_weights_is_within_ggml_threshold() {
    let mut report = Vec::new();
    for t in WEIGHT_TYPES {
        let kernel = vec_dot_kernel(t).expect("kernel");
        let (mut worst, mut worst_scaled) = (0.0f64, 0.0f64);
        for seed in 0..5u64 {
            let mut rng = Rng::new(seed * 100 + u64::from(t.id()));
            for n in lengths(t) {
                let (w, w_deq) = weights(t, n, &mut rng);
                let x = rng.values(n);
                let a = quantized(kernel.act_type, &x);
                let got = (kernel.dot)(&w, &a);
                let (e, e_scaled) = ggml_metric(got, dot_f64(&w_deq, &x), n);
                assert!(
                    e < MAX_DOT_PRODUCT_ERROR && e_scaled < MAX_DOT_PRODUCT_ERROR,
                    "{t} n={n} seed={seed}: error {e} (at ggml's length {e_scaled}) >= {MAX_DOT_PRODUCT_ERROR}"
                );
                worst = worst.max(e);
                worst_scaled = worst_scaled.max(e_scaled);
            }
        }
        // ggml's own signal as activations, at ggml's length.
        let mut rng = Rng::new(7);
        let (w, w_deq) = weights(t, GGML_TEST_SIZE, &mut rng);
        let x = generate_data(1.0, GGML_TEST_SIZE);
        let a = quantized(kernel.act_type, &x);
        let (e_ggml, _) = ggml_metric((kernel.dot)(&w, &a), dot_f64(&w_deq, &x), x.len());
        assert!(e_ggml < MAX_DOT_PRODUCT_ERROR, "{t}: ggml signal: {e_ggml}");
        report.push(format!(
            "{t:>5}: worst |dot - ref| / n = {worst:.3e}, rescaled to n = 4096: {worst_scaled:.3e}, ggml signal n = 4096: {e_ggml:.3e} (threshold {MAX_DOT_PRODUCT_ERROR})"
        ));
    }
    eprintln!("dot error vs dequantized weights x f32 activations:");
    for line in report {
        eprintln!("  {line}");
    }
}

/// ggml's `test_vec_dot_q` for the types we can quantize: weights and
/// activations are ggml's signal, the reference uses the original weights
/// (products rounded to f32, summed in f64, as ggml's `dot_product`).
#[test]
fn ggml_test_quantize_fns_dot_product_error() {
    let w = generate_data(0.0, GGML_TEST_SIZE);
    let x = generate_data(1.0, GGML_TEST_SIZE);
    let reference: f64 = w.iter().zip(&x).map(|(&a, &b)| f64::from(a * b)).sum();
    for t in WEIGHT_TYPES.into_iter().filter(|t| t.can_quantize()) {
        let kernel = vec_dot_kernel(t).expect("kernel");
        let got = (kernel.dot)(&quantized(t, &w), &quantized(kernel.act_type, &x));
        let e = (f64::from(got) - reference).abs() / GGML_TEST_SIZE as f64;
        eprintln!("{t:>5}: ggml dot product error {e:.3e} (threshold {MAX_DOT_PRODUCT_ERROR})");
        assert!(e < MAX_DOT_PRODUCT_ERROR, "{t}: {e}");
    }
}

/// ggml's `test_vec_dot_f32`, with its lengths and bound.
#[test]
fn ggml_test_vec_dot_f32() {
    let kernel = vec_dot_kernel(F32).expect("kernel");
    for n in [
        1, 2, 3, 5, 7, 8, 15, 16, 17, 31, 33, 63, 67, 127, 129, 193, 255, 1023,
    ] {
        let (w, x) = (generate_data(0.0, n), generate_data(1.0, n));
        let reference: f64 = w.iter().zip(&x).map(|(&a, &b)| f64::from(a * b)).sum();
        let got = (kernel.dot)(&quantized(F32, &w), &quantized(F32, &x));
        let e = (f64::from(got) - reference).abs() / n as f64;
        assert!(e < MAX_F32_DOT_ERROR, "n={n}: {e}");
    }
}

/// The offset (min) term of each dequantized weight, zero for the
/// symmetric formats: dequantizing with the scale `d` zeroed leaves `m`
/// (Q4_1, Q5_1) or `-dmin * m` (Q2_K, Q4_K, Q5_K).
fn offsets(t: GgmlType, q: &[u8], n: usize) -> Vec<f32> {
    if t.block_size() == 1 || t == Mxfp4 || scale_fields(t).1.is_none() {
        return vec![0.0; n];
    }
    let mut q = q.to_vec();
    let d_at = scale_fields(t).0;
    for block in q.chunks_exact_mut(t.type_size()) {
        set_f16(block, d_at, 0.0);
    }
    dequantized(t, &q, n)
}

/// The kernel's own arithmetic, without quantization error: compared with
/// the f64 dot product of the dequantized weights and the dequantized
/// activations, the only differences are f32 roundings.
///
/// One exception is made explicit: Q4_1/Q5_1 take `sum(x)` of an activation
/// block from Q8_1's `s`, an f16 rounding of `d * sum(q)` with the f32 `d`,
/// not from the dequantized values `f16(d) * q`; the reference uses `s` too,
/// i.e. it adds `m * (s - sum(x))` per block.
///
/// Bound (first order in `u = 2^-24`, worst case, no cancellation assumed):
/// every weight and activation is rounded at most 3 times when dequantized
/// (`(d * sc) * q - dmin * m`), relative to `|d q| + |m|`; each block term
/// is rounded at most 4 times (two products of three factors, one
/// subtraction) and the terms pass through at most `blocks - 1` sequential
/// f32 additions (float types: `ceil(n / 32)` additions per lane and 5
/// folds). With `S = sum (|w| + 2|m|) |x| (+ sum |m s|)`, which bounds
/// `sum (|d q| + |m|) |x|`, the error is at most `(depth + 8) u S`, `depth`
/// being the number of sequential additions.
#[test]
fn kernel_arithmetic_is_exact_up_to_f32_rounding() {
    let u = f64::from(f32::EPSILON) / 2.0;
    let mut report = Vec::new();
    for t in WEIGHT_TYPES {
        let kernel = vec_dot_kernel(t).expect("kernel");
        let (mut worst_units, mut worst_rel) = (0.0f64, 0.0f64);
        for seed in 0..5u64 {
            let mut rng = Rng::new(seed * 1000 + u64::from(t.id()));
            for n in lengths(t) {
                let (w, w_deq) = weights(t, n, &mut rng);
                let a = quantized(kernel.act_type, &rng.values(n));
                let a_deq = dequantized(kernel.act_type, &a, n);
                let off = offsets(t, &w, n);

                let mut reference = dot_f64(&w_deq, &a_deq);
                let mut s_mag: f64 = w_deq
                    .iter()
                    .zip(&off)
                    .zip(&a_deq)
                    .map(|((&w, &m), &x)| {
                        (f64::from(w.abs()) + 2.0 * f64::from(m.abs())) * f64::from(x.abs())
                    })
                    .sum();
                if matches!(t, Q4_1 | Q5_1) {
                    let blocks = as_blocks::<BlockQ8_1>(&a).unwrap();
                    for ((ab, x), m) in blocks.iter().zip(a_deq.chunks(32)).zip(off.chunks(32)) {
                        let (m, s) = (f64::from(m[0]), f64::from(ab.s()));
                        let sum_x: f64 = x.iter().map(|&v| f64::from(v)).sum();
                        reference += m * (s - sum_x);
                        s_mag += (m * s).abs();
                    }
                }
                let depth = if t.block_size() == 1 {
                    n.div_ceil(32) + 5
                } else {
                    n / t.block_size()
                };
                let got = (kernel.dot)(&w, &a);
                let err = (f64::from(got) - reference).abs();
                let bound = (depth + 8) as f64 * u * s_mag;
                assert!(
                    err <= bound,
                    "{t} n={n} seed={seed}: |{got} - {reference}| = {err:e} > {bound:e}"
                );
                worst_units = worst_units.max(err / (u * s_mag));
                worst_rel = worst_rel.max(err / reference.abs());

                // Any address works, with the same bits.
                let mut w1 = vec![0u8; 1];
                w1.extend_from_slice(&w);
                let mut a3 = vec![0u8; 3];
                a3.extend_from_slice(&a);
                let moved = (kernel.dot)(&w1[1..], &a3[3..]);
                assert_eq!(moved.to_bits(), got.to_bits(), "{t} n={n}: misaligned");
            }
        }
        report.push(format!(
            "{t:>5}: worst error {worst_units:.2} u*S (bound (depth + 8) u*S), worst relative error {worst_rel:.2e}"
        ));
    }
    eprintln!("dot error vs dequantized weights x dequantized activations:");
    for line in report {
        eprintln!("  {line}");
    }
}

#[test]
fn random_bytes_never_panic() {
    let mut rng = Rng::new(0x5eed);
    for t in WEIGHT_TYPES {
        let kernel = vec_dot_kernel(t).expect("kernel");
        let a_t = kernel.act_type;
        let unit = t.block_size().max(a_t.block_size());
        for _ in 0..200 {
            // Consistent lengths: the same number of values on both sides.
            let n = unit * (rng.next() % 6) as usize;
            let w = rng.bytes(bytes_for(t, n));
            let a = rng.bytes(bytes_for(a_t, n));
            let _ = (kernel.dot)(&w, &a);
            // Inconsistent lengths: any garbage, but no panic.
            let (w_len, a_len) = (rng.next() % 2000, rng.next() % 2000);
            let w = rng.bytes(w_len as usize);
            let a = rng.bytes(a_len as usize);
            let _ = (kernel.dot)(&w, &a);
        }
        // Extremes, every pairing: all bits set (NaN scales, -1 and
        // all-ones values), all clear, and the largest magnitudes (-128).
        let n = 3 * unit;
        for w_byte in [0xff, 0x00, 0x80, 0x7f] {
            for a_byte in [0xff, 0x00, 0x80, 0x7f] {
                let w = vec![w_byte; bytes_for(t, n)];
                let _ = (kernel.dot)(&w, &vec![a_byte; bytes_for(a_t, n)]);
            }
        }
        assert_eq!((kernel.dot)(&[], &[]), 0.0, "{t}");
    }
}

/// `(d, min)` of one weight block (min 0 if it has none), and a copy of the
/// block with them replaced by `new`.
fn weight_scales(t: GgmlType, block: &[u8], new: (f32, f32)) -> ((f32, f32), Vec<u8>) {
    if t == Mxfp4 {
        // Its scale is a power of two, `2^(e - 128)`: e = 128 makes it 1
        // (there is no 0, and no min; the caller ignores `msum`).
        let mut q = block.to_vec();
        q[offset_of!(BlockMxfp4, e)] = 128;
        return ((e8m0_half(block[0]), 0.0), q);
    }
    let (d_at, min_at) = scale_fields(t);
    let old = (
        get_f16(block, d_at),
        min_at.map_or(0.0, |m| get_f16(block, m)),
    );
    let mut q = block.to_vec();
    set_scales(t, &mut q, new.0, new.1);
    (old, q)
}

/// `(d, s)` of one activation block (`s` 0 but for Q8_1), and a copy of the
/// block with `d` set to 1.
fn act_scales(t: GgmlType, block: &[u8]) -> ((f32, f32), Vec<u8>) {
    let mut q = block.to_vec();
    let old = match t {
        Q8_0 | Q8_1 => {
            let d_at = offset_of!(BlockQ8_0, d);
            assert_eq!(d_at, offset_of!(BlockQ8_1, d));
            let s = if t == Q8_1 {
                get_f16(block, offset_of!(BlockQ8_1, s))
            } else {
                0.0
            };
            set_f16(&mut q, d_at, 1.0);
            (get_f16(block, d_at), s)
        }
        Q8K => {
            let d_at = offset_of!(BlockQ8K, d);
            let d = f32::from_le_bytes(block[d_at..d_at + 4].try_into().unwrap());
            q[d_at..d_at + 4].copy_from_slice(&1.0f32.to_le_bytes());
            (d, 0.0)
        }
        _ => unreachable!("{t}"),
    };
    (old, q)
}

/// The documented order, checked independently of the kernels' code: the
/// integer sums of each block pair are read back through the kernel with
/// the scales set to 1 and 0 (exact while they stay below 2^24), then the
/// documented f32 expression is evaluated here and the terms are added in
/// block order; the row's result must have exactly these bits. The float
/// kernels are checked the same way with single products and 32 lanes.
#[test]
fn results_follow_the_documented_order() {
    for t in WEIGHT_TYPES {
        let kernel = vec_dot_kernel(t).expect("kernel");
        let a_t = kernel.act_type;
        for seed in 0..3u64 {
            let mut rng = Rng::new(seed * 77 + u64::from(t.id()));
            let n = if t.block_size() == 1 {
                5 * 32 + 13
            } else {
                9 * t.block_size()
            };
            let (w, _) = weights(t, n, &mut rng);
            let a = quantized(a_t, &rng.values(n));
            let got = (kernel.dot)(&w, &a);

            let expected = if t.block_size() == 1 {
                let (ws, as_) = (t.type_size(), a_t.type_size());
                let mut lanes = [0.0f32; 32];
                for i in 0..n {
                    let p = (kernel.dot)(&w[i * ws..][..ws], &a[i * as_..][..as_]);
                    lanes[i % 32] += p;
                }
                let mut width = 16;
                while width > 0 {
                    for i in 0..width {
                        lanes[i] += lanes[i + width];
                    }
                    width /= 2;
                }
                lanes[0]
            } else {
                let mut sum = 0.0f32;
                let blocks = w.chunks(t.type_size()).zip(a.chunks(a_t.type_size()));
                for (wb, ab) in blocks {
                    let ((d, min), w1) = weight_scales(t, wb, (1.0, 0.0));
                    let ((d_x, s_x), a1) = act_scales(a_t, ab);
                    let isum = (kernel.dot)(&w1, &a1);
                    let (_, w0) = weight_scales(t, wb, (0.0, 1.0));
                    let msum = -(kernel.dot)(&w0, &a1);
                    assert!(isum.abs() < 16_777_216.0 && msum.abs() < 16_777_216.0);
                    sum += match t {
                        Q4_0 | Q5_0 | Q8_0 | Q3K | Q6K | Mxfp4 | Iq4Nl | Iq4Xs => (d * d_x) * isum,
                        Q4_1 | Q5_1 => (d * d_x) * isum + min * s_x,
                        Q2K | Q4K | Q5K => (d_x * d) * isum - (d_x * min) * msum,
                        _ => unreachable!("{t}"),
                    };
                }
                sum
            };
            assert_eq!(
                got.to_bits(),
                expected.to_bits(),
                "{t} seed={seed}: {got} != {expected}"
            );
        }
    }
}
