//! Quantize -> dequantize error, measured as ggml's
//! `tests/test-quantize-fns.cpp` does, plus a per-value bound derived from
//! each format, on several block counts.
//!
//! ggml's metric (`array_rmse`) is `sqrt(sum (x - y)^2) / n` over the
//! synthetic signal `0.1 + 2 cos(i + offset)` of `n = 32 * 128` values, and
//! it must stay below `MAX_QUANTIZATION_TOTAL_ERROR = 0.002` for every type
//! tested here (ggml's looser thresholds, `_2BITS` 0.0075, `_3BITS` 0.0040
//! and so on, apply only to Q2_K, Q3_K, the IQ and ternary types).
//! Note the metric is the RMS error divided by `sqrt(n)`, so it shrinks with
//! `n`: it is only meaningful at ggml's length. At other lengths we check
//! the same bound per value, `rms < 0.002 * sqrt(4096) = 0.128`, and, much
//! tighter, a worst-case bound per value from the format's rounding rule.

use ferrite_kernels::quant::{dequantize, quantize, GgmlType};

/// ggml's `MAX_QUANTIZATION_TOTAL_ERROR`.
const MAX_TOTAL_ERROR: f32 = 0.002;
/// ggml's test length, `32 * 128`.
const GGML_TEST_SIZE: usize = 32 * 128;

const TYPES: [GgmlType; 7] = [
    GgmlType::Q8_0,
    GgmlType::Q8_1,
    GgmlType::Q8K,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
];

/// ggml's `generate_data`: `0.1 + 2 * cosf(i + offset)`, with the sum done in
/// double as in C (`0.1` is a double literal).
fn generate_data(offset: f32, n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| (0.1 + 2.0 * f64::from((i as f32 + offset).cos())) as f32)
        .collect()
}

/// ggml's `array_rmse`: `sqrtf(sum of squared differences) / n`.
fn ggml_total_error(a: &[f32], b: &[f32]) -> f32 {
    let sum: f64 = a
        .iter()
        .zip(b)
        .map(|(&x, &y)| (f64::from(x) - f64::from(y)).powi(2))
        .sum();
    (sum.sqrt() as f32) / a.len() as f32
}

fn round_trip(t: GgmlType, x: &[f32]) -> Vec<f32> {
    let bytes = t.bytes_for(x.len() as u64).expect("whole blocks") as usize;
    let mut q = vec![0u8; bytes];
    quantize(t, x, &mut q).expect("quantize");
    let mut y = vec![0.0f32; x.len()];
    dequantize(t, &q, &mut y).expect("dequantize");
    y
}

/// The largest error value `v` of block `x` may show after a round trip
/// through `t`, from the rounding rule of each quantizer. `d` is the f32
/// scale the quantizer computes; storing it as f16 moves every value by at
/// most `|q| * |d| * 2^-11`, and the f16 minimum by `|min| * 2^-11`.
fn max_error(t: GgmlType, x: &[f32], v: f32) -> f32 {
    let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let min = x.iter().fold(f32::MAX, |m, &v| m.min(v));
    let max = x.iter().fold(-f32::MAX, |m, &v| m.max(v));
    // The value of largest magnitude, with its sign (Q4_0 / Q5_0).
    let signed_max = x.iter().copied().find(|v| v.abs() == amax).unwrap_or(0.0);
    let f16_rel = 1.0 / 2048.0;
    let slack = 1e-6 * amax.max(1.0);
    slack
        + match t {
            // Round to nearest: half a step, q up to 127.
            GgmlType::Q8_0 | GgmlType::Q8_1 => {
                let d = amax / 127.0;
                0.5 * d + 127.0 * d * f16_rel
            }
            // Same, with an exact f32 scale.
            GgmlType::Q8K => 0.5 * amax / 127.0,
            // The largest value maps to -8 (-16) exactly and the rest round
            // half up, except that values past +7.5 (+15.5) on the other
            // side are clamped to +7 (+15), up to a whole step away.
            GgmlType::Q4_0 | GgmlType::Q5_0 => {
                let levels = if t == GgmlType::Q4_0 { 8.0 } else { 16.0 };
                let d = amax / levels;
                let clamped = v * (-levels / signed_max) > levels - 0.5;
                let steps = if clamped { 1.0 } else { 0.5 };
                steps * d + levels * d * f16_rel
            }
            // Round half up between min and max: half a step.
            GgmlType::Q4_1 | GgmlType::Q5_1 => {
                let levels = if t == GgmlType::Q4_1 { 15.0 } else { 31.0 };
                let d = (max - min) / levels;
                0.5 * d + levels * d * f16_rel + min.abs() * f16_rel
            }
            _ => unreachable!("not a type under test"),
        }
}

#[test]
fn total_error_at_ggml_test_size_is_within_ggml_threshold() {
    let x = generate_data(0.0, GGML_TEST_SIZE);
    for t in TYPES {
        let err = ggml_total_error(&x, &round_trip(t, &x));
        eprintln!("{t}: ggml total quantization error {err:.6} (threshold {MAX_TOTAL_ERROR})");
        assert!(
            err < MAX_TOTAL_ERROR,
            "{t}: total quantization error {err} >= {MAX_TOTAL_ERROR}"
        );
    }
}

#[test]
fn odd_block_counts_stay_within_bounds() {
    let per_value_rms = MAX_TOTAL_ERROR * (GGML_TEST_SIZE as f32).sqrt();
    for t in TYPES {
        let bs = t.block_size();
        for (k, blocks) in [1usize, 3, 7, 33].into_iter().enumerate() {
            let x = generate_data(0.37 + k as f32, blocks * bs);
            let y = round_trip(t, &x);

            let n = x.len() as f32;
            let rms = ggml_total_error(&x, &y) * n / n.sqrt();
            eprintln!("{t} x{blocks}: rms error {rms:.6} (bound {per_value_rms})");
            assert!(
                rms < per_value_rms,
                "{t} x{blocks}: rms error {rms} >= {per_value_rms}"
            );

            for (b, (xb, yb)) in x.chunks(bs).zip(y.chunks(bs)).enumerate() {
                for (i, (&xv, &yv)) in xb.iter().zip(yb).enumerate() {
                    let bound = max_error(t, xb, xv);
                    let e = (xv - yv).abs();
                    assert!(
                        e <= bound,
                        "{t} x{blocks}: block {b} value {i}: |{xv} - {yv}| = {e} > {bound}"
                    );
                }
            }
        }
    }
}
