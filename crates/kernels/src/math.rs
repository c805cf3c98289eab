//! Element-wise functions for the encoder models (softmax's `exp`, exact
//! GELU's `erf`, SiLU), written once as branch-free scalar code on IEEE
//! operations only (`+ - * /`, `mul_add`, comparisons, bit casts), so that
//! the AVX2 build of the same loop (vectorized by the compiler, with
//! `mul_add` as the FMA instruction) gives the same bits as the portable
//! one. No libm: its results differ between platforms.
//!
//! Accuracy: `exp` within 2 ulp of the exact value on `[-87, 88]`; `erf`
//! within 4e-7 absolute (a rational fit, 3.2e-7 in f32).

const LOG2E: f32 = std::f32::consts::LOG2_E;
/// ln 2 split in two so that `n * LN2_HI` is exact for |n| < 2^9.
const LN2_HI: f32 = 0.693_145_75;
const LN2_LO: f32 = 1.428_606_8e-6;
/// Adding then subtracting 1.5 * 2^23 rounds to the nearest integer.
const ROUND_MAGIC: f32 = 12_582_912.0;

/// `e^x`; 0 below -87.3 (where the result would be subnormal), and `e^88`
/// above 88 (callers subtract a maximum first, or only need "huge").
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    let xc = x.clamp(-87.3, 88.0);
    // t = round(x * log2 e) + 1.5 * 2^23: the integer sits in t's low
    // mantissa bits, so 2^n is built with integer operations only (a
    // saturating `as i32` would not vectorize).
    let t = xc.mul_add(LOG2E, ROUND_MAGIC);
    let n = t - ROUND_MAGIC;
    let n_int = t.to_bits().wrapping_sub(ROUND_MAGIC.to_bits());
    let r = n.mul_add(-LN2_HI, xc);
    let r = n.mul_add(-LN2_LO, r);
    // e^r on |r| <= ln2 / 2: Taylor series to degree 7 (truncation error
    // below 6e-9 relative).
    let mut p: f32 = 1.0 / 5040.0;
    p = p.mul_add(r, 1.0 / 720.0);
    p = p.mul_add(r, 1.0 / 120.0);
    p = p.mul_add(r, 1.0 / 24.0);
    p = p.mul_add(r, 1.0 / 6.0);
    p = p.mul_add(r, 0.5);
    p = p.mul_add(r, 1.0);
    p = p.mul_add(r, 1.0);
    let scale = f32::from_bits(n_int.wrapping_add(127) << 23);
    let y = p * scale;
    if x < -87.3 {
        0.0
    } else {
        y
    }
}

/// The error function, to 4e-7 absolute: `x * P(t) / Q(t)` with
/// `t = x^2 / 16` on `|x| <= 4` (past that, erf is 1 in f32), a rational
/// fit to erf made by `scripts/research/fit-erf.py` (3.2e-7 worst case in f32).
#[inline(always)]
// P[0] is the fitted value, not 2/sqrt(pi) rounded to f32.
#[allow(clippy::approx_constant)]
pub fn erf(x: f32) -> f32 {
    const P: [f32; 6] = [
        1.128_379,
        3.140_031_8,
        13.687_761,
        16.399_378,
        18.877_008,
        2.070_69,
    ];
    const Q: [f32; 6] = [1.0, 8.116_079, 29.818_27, 63.261_28, 79.716_62, 39.300_743];
    let xc = x.clamp(-4.0, 4.0);
    let t = xc * xc * (1.0 / 16.0);
    let mut p = P[5];
    let mut q = Q[5];
    for i in (0..5).rev() {
        p = p.mul_add(t, P[i]);
        q = q.mul_add(t, Q[i]);
    }
    (xc * (p / q)).clamp(-1.0, 1.0)
}

/// GELU as BERT defines it: `x/2 * (1 + erf(x / sqrt 2))`.
#[inline(always)]
pub fn gelu_erf(x: f32) -> f32 {
    0.5 * x * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2))
}

/// GELU's tanh approximation (`gelu_new`, `gelu_pytorch_tanh`).
#[inline(always)]
pub fn gelu_tanh(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    let u = SQRT_2_OVER_PI * (0.044_715 * x * x).mul_add(x, x);
    // 0.5 * (1 + tanh(u)) = 1 / (1 + e^{-2u}): no cancellation where tanh
    // nears -1 (large negative x, where 1 + tanh(u) would lose most of its
    // digits), and it saturates cleanly at both ends.
    x / (1.0 + exp(-2.0 * u))
}

/// SiLU: `x * sigmoid(x)`.
#[inline(always)]
pub fn silu(x: f32) -> f32 {
    x / (1.0 + exp(-x))
}

/// An element-wise operation the encoder applies to whole rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    GeluErf,
    GeluTanh,
    Silu,
    Relu,
}

/// The body of every slice function below, compiled once per kernel set.
macro_rules! slice_fns {
    () => {
        #[inline(always)]
        pub fn activate(act: crate::math::Activation, xs: &mut [f32]) {
            use crate::math::*;
            match act {
                Activation::GeluErf => xs.iter_mut().for_each(|x| *x = gelu_erf(*x)),
                Activation::GeluTanh => xs.iter_mut().for_each(|x| *x = gelu_tanh(*x)),
                Activation::Silu => xs.iter_mut().for_each(|x| *x = silu(*x)),
                Activation::Relu => xs.iter_mut().for_each(|x| *x = x.max(0.0)),
            }
        }

        #[inline(always)]
        pub fn silu_mul(gate: &[f32], up: &mut [f32]) {
            for (u, &g) in up.iter_mut().zip(gate) {
                *u *= crate::math::silu(g);
            }
        }

        /// Sum in eight interleaved partial sums, folded in lane order,
        /// then the tail left to right.
        #[inline(always)]
        fn lane_sum(xs: &[f32], f: impl Fn(f32) -> f32) -> f32 {
            let mut lanes = [0f32; 8];
            let mut chunks = xs.chunks_exact(8);
            for c in &mut chunks {
                for (l, &v) in lanes.iter_mut().zip(c) {
                    *l += f(v);
                }
            }
            let mut sum = 0.0;
            for l in lanes {
                sum += l;
            }
            for &v in chunks.remainder() {
                sum += f(v);
            }
            sum
        }

        /// Layer normalization of `x` in place with weight `w` and bias `b`:
        /// mean, then the mean of squared deviations (two passes).
        #[inline(always)]
        pub fn layer_norm(x: &mut [f32], w: &[f32], b: &[f32], eps: f32) {
            let n = x.len() as f32;
            let mean = lane_sum(x, |v| v) / n;
            let var = lane_sum(x, |v| (v - mean) * (v - mean)) / n;
            let inv = 1.0 / (var + eps).sqrt();
            for ((v, &w), &b) in x.iter_mut().zip(w).zip(b) {
                *v = (*v - mean) * inv * w + b;
            }
        }

        /// `x = e^(x - max)` in place; returns the sum (left to right).
        #[inline(always)]
        pub fn exp_shifted_sum(xs: &mut [f32], max: f32) -> f32 {
            xs.iter_mut().for_each(|x| *x = crate::math::exp(*x - max));
            lane_sum(xs, |v| v)
        }
    };
}
pub(crate) use slice_fns;

mod portable {
    crate::math::slice_fns!();
}

/// Applies `act` to every value of `xs`.
pub fn activate(act: Activation, xs: &mut [f32]) {
    (crate::table::active().activate.f)(act, xs)
}

/// `up[i] *= silu(gate[i])` (SwiGLU).
pub fn silu_mul(gate: &[f32], up: &mut [f32]) {
    (crate::table::active().silu_mul.f)(gate, up)
}

/// Layer normalization in place: `(x - mean) / sqrt(var + eps) * w + b`,
/// with the sums taken as in [`softmax`].
pub fn layer_norm(x: &mut [f32], w: &[f32], b: &[f32], eps: f32) {
    assert!(
        w.len() >= x.len() && b.len() >= x.len(),
        "weights shorter than the row"
    );
    if x.is_empty() {
        return;
    }
    (crate::table::active().layer_norm.f)(x, w, b, eps)
}

/// The largest value of `xs` other than NaN (NaNs are passed over, as by
/// `f32::max`; negative infinity if there is none): the same value as
/// `xs.iter().copied().fold(f32::NEG_INFINITY, f32::max)`, but taken in
/// sixteen interleaved running maxima, so that it vectorizes instead of
/// being one chain of dependent comparisons (a 61,950-wide row of logits
/// waited ~50 us on that chain). Maxima are exact, so the order changes
/// nothing but, where the largest value is a zero, possibly its sign.
pub fn max_value(xs: &[f32]) -> f32 {
    const LANES: usize = 16;
    let mut lanes = [f32::NEG_INFINITY; LANES];
    let mut chunks = xs.chunks_exact(LANES);
    for c in &mut chunks {
        for (l, &v) in lanes.iter_mut().zip(c) {
            // `f32::max` itself does not vectorize as well (its NaN rule
            // costs a blend per step); `v > l` is false for a NaN `v`, and
            // `l` never becomes NaN.
            if v > *l {
                *l = v;
            }
        }
    }
    let mut max = f32::NEG_INFINITY;
    for v in lanes.into_iter().chain(chunks.remainder().iter().copied()) {
        if v > max {
            max = v;
        }
    }
    max
}

/// The index of the first largest value of `xs` (NaNs passed over; 0 if
/// `xs[0]` is NaN, or `xs` is empty or all NaN), as the loop
/// `if xs[i] > xs[best] { best = i }` finds it, in two vectorizing passes
/// ([`max_value`], then the first value equal to it).
pub fn argmax_first(xs: &[f32]) -> usize {
    match xs.first() {
        Some(v) if !v.is_nan() => {}
        _ => return 0,
    }
    let max = max_value(xs);
    xs.iter().position(|&v| v == max).unwrap_or(0)
}

/// Softmax of `xs` in place: `e^(x - max) / sum`, the sum taken in eight
/// interleaved partial sums folded in a fixed order.
pub fn softmax(xs: &mut [f32]) {
    if xs.is_empty() {
        return;
    }
    let max = xs.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum = (crate::table::active().exp_shifted_sum.f)(xs, max);
    let inv = 1.0 / sum;
    xs.iter_mut().for_each(|x| *x *= inv);
}

/// `x = e^(x - max)` for every value of `xs`, in place; returns their sum,
/// taken as in [`softmax`] (the pieces of a log-softmax).
pub fn exp_shifted_sum(xs: &mut [f32], max: f32) -> f32 {
    (crate::table::active().exp_shifted_sum.f)(xs, max)
}

/// The portable versions, for tests comparing kernel sets.
pub mod reference {
    pub use super::portable::{activate, exp_shifted_sum, layer_norm, silu_mul};
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `max_value` and `argmax_first` against the plain loops they replace,
    /// on rows with ties, NaNs, infinities and zeros of both signs, of
    /// lengths around the sixteen lanes.
    #[test]
    fn max_and_argmax_equal_the_plain_loops() {
        let specials = [
            f32::NAN,
            f32::NEG_INFINITY,
            f32::INFINITY,
            0.0,
            -0.0,
            1.5,
            -2.0,
        ];
        let mut next = crate::xorshift(0x9e37_79b9_7f4a_7c15u64);
        let mut cases = 0;
        for len in [0usize, 1, 2, 15, 16, 17, 31, 33, 100, 1000] {
            for _ in 0..200 {
                let row: Vec<f32> = (0..len)
                    .map(|_| match next() % 8 {
                        0 => specials[(next() % specials.len() as u64) as usize],
                        // Few distinct values: many ties.
                        1..=3 => (next() % 5) as f32 - 2.0,
                        _ => (next() % 10_000) as f32 / 37.0 - 100.0,
                    })
                    .collect();
                let want_max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let got_max = max_value(&row);
                // Equal as values (a zero's sign may differ).
                assert!(got_max == want_max, "{row:?}: max {got_max} vs {want_max}");
                let mut want_arg = 0;
                for (i, &v) in row.iter().enumerate() {
                    if v > row[want_arg] {
                        want_arg = i;
                    }
                }
                assert_eq!(argmax_first(&row), want_arg, "{row:?}");
                cases += 1;
            }
        }
        eprintln!("{cases} rows: max_value and argmax_first as the plain loops");
    }

    #[test]
    fn exp_is_within_two_ulp_of_f64() {
        let mut worst = 0f64;
        let mut x = -87.0f32;
        while x < 88.0 {
            let got = exp(x) as f64;
            let want = (x as f64).exp();
            let ulp = (want as f32).abs() as f64 * f32::EPSILON as f64;
            worst = worst.max((got - want).abs() / ulp);
            x += 0.001_37;
        }
        assert!(worst <= 2.0, "worst error {worst} ulp");
        assert_eq!(exp(-100.0), 0.0);
        assert_eq!(exp(0.0), 1.0);
        assert!(exp(f32::NAN).is_nan());
    }

    #[test]
    fn erf_and_gelu_match_f64() {
        for i in -6000..=6000 {
            let x = i as f32 * 0.001;
            let want = libm_erf(x as f64);
            assert!(
                (erf(x) as f64 - want).abs() < 4e-7,
                "erf({x}) = {} vs {want}",
                erf(x)
            );
            let g = 0.5 * x as f64 * (1.0 + libm_erf(x as f64 / 2f64.sqrt()));
            assert!((gelu_erf(x) as f64 - g).abs() < 2e-6, "gelu({x})");
            let s = x as f64 / (1.0 + (-x as f64).exp());
            assert!(
                (silu(x) as f64 - s).abs() < 1e-6 * (1.0 + s.abs()),
                "silu({x})"
            );
        }
        assert_eq!(erf(10.0), 1.0);
        assert_eq!(erf(-10.0), -1.0);
    }

    /// erf in f64 by its Taylor series (|x| < 3) or continued fraction.
    fn libm_erf(x: f64) -> f64 {
        let ax = x.abs();
        let v = if ax < 3.0 {
            let mut term = ax;
            let mut sum = ax;
            for n in 1..200 {
                term *= -ax * ax / n as f64;
                sum += term / (2 * n + 1) as f64;
            }
            sum * 2.0 / std::f64::consts::PI.sqrt()
        } else {
            // erfc continued fraction (Lentz), converges fast for x >= 3.
            let mut f = ax;
            for n in (1..60).rev() {
                f = ax + (n as f64 / 2.0) / f;
            }
            1.0 - (-ax * ax).exp() / (f * std::f64::consts::PI.sqrt())
        };
        v.copysign(x)
    }

    /// Every supported set's table entries against the portable code, on
    /// lengths that are not multiples of any vector width.
    #[test]
    fn every_kernel_set_gives_the_same_bits() {
        for set in crate::dispatch::KernelSet::ALL {
            let Some(t) = set.table() else {
                eprintln!("SKIPPED {}: not supported by this CPU", set.name());
                continue;
            };
            for len in [1usize, 7, 16, 33, 1003] {
                same_bits_in(t, len);
            }
        }
    }

    fn same_bits_in(t: &crate::table::KernelTable, len: usize) {
        let name = t.set.name();
        let xs: Vec<f32> = (0..len).map(|i| (i as f32 - 500.0) * 0.037).collect();
        for act in [
            Activation::GeluErf,
            Activation::GeluTanh,
            Activation::Silu,
            Activation::Relu,
        ] {
            let mut fast = xs.clone();
            (t.activate.f)(act, &mut fast);
            let mut slow = xs.clone();
            reference::activate(act, &mut slow);
            assert_eq!(bits(&fast), bits(&slow), "{name} {act:?} {len}");
        }
        let max = xs.iter().copied().fold(f32::MIN, f32::max);
        let (mut fast, mut slow) = (xs.clone(), xs.clone());
        let s1 = (t.exp_shifted_sum.f)(&mut fast, max);
        let s2 = reference::exp_shifted_sum(&mut slow, max);
        assert_eq!(s1.to_bits(), s2.to_bits(), "{name} {len}");
        assert_eq!(bits(&fast), bits(&slow), "{name} {len}");
        let w: Vec<f32> = (0..len).map(|i| 1.0 + i as f32 * 0.001).collect();
        let b: Vec<f32> = (0..len).map(|i| i as f32 * -0.002).collect();
        let (mut p, mut q) = (xs.clone(), xs.clone());
        (t.layer_norm.f)(&mut p, &w, &b, 1e-12);
        reference::layer_norm(&mut q, &w, &b, 1e-12);
        assert_eq!(bits(&p), bits(&q), "{name} {len}");
        let gate = xs.clone();
        let mut a = xs.iter().map(|x| x * 0.5).collect::<Vec<_>>();
        let mut b = a.clone();
        (t.silu_mul.f)(&gate, &mut a);
        reference::silu_mul(&gate, &mut b);
        assert_eq!(bits(&a), bits(&b), "{name} {len}");
    }

    fn bits(x: &[f32]) -> Vec<u32> {
        x.iter().map(|v| v.to_bits()).collect()
    }
}
