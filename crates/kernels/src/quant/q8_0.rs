//! Q8_0: 32 values as i8 times one f16 scale, `x = d * q`; mirrors
//! `block_q8_0` (ggml-common.h), `dequantize_row_q8_0` and
//! `quantize_row_q8_0_ref` (ggml-quants.c) of
//! <https://github.com/ggml-org/llama.cpp/tree/master/ggml/src>.

use super::float::{f16_le, f16_le_from};
use super::{Block, QK};

/// One Q8_0 block: 34 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockQ8_0 {
    /// Scale, f16 little-endian.
    pub d: [u8; 2],
    /// The quantized values.
    pub qs: [i8; QK],
}

const _: () = assert!(std::mem::size_of::<BlockQ8_0>() == 34);

// SAFETY: #[repr(C)] and made only of u8/i8 arrays.
unsafe impl Block for BlockQ8_0 {}

/// Symmetric 8-bit quantization of 32 values, shared by Q8_0 and Q8_1:
/// `d = amax / 127` (in f32, before rounding to f16) and
/// `q = round(x / d)`, halves away from zero (C's `roundf`).
pub(crate) fn quantize_q8(x: &[f32; QK]) -> (f32, [i8; QK]) {
    (crate::table::active().quantize_q8.f)(x)
}

/// The scalar reference of [`quantize_q8`].
pub(crate) fn quantize_q8_scalar(x: &[f32; QK]) -> (f32, [i8; QK]) {
    // C's `MAX(amax, fabsf(v))`, spelled out so that NaNs behave the same.
    let amax = x
        .iter()
        .fold(0.0f32, |m, v| if m > v.abs() { m } else { v.abs() });
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut qs = [0i8; QK];
    for (q, &v) in qs.iter_mut().zip(x) {
        // |v * id| <= 127 up to rounding, so the cast does not saturate for
        // finite input (and is saturating, not undefined, otherwise).
        *q = super::round_half_away(v * id) as i8;
    }
    (d, qs)
}

impl BlockQ8_0 {
    /// The scale as f32.
    pub fn d(&self) -> f32 {
        f16_le(self.d)
    }

    /// Dequantizes the block: `y = q * d`.
    pub fn to_f32(&self, y: &mut [f32; QK]) {
        let d = self.d();
        for (y, &q) in y.iter_mut().zip(&self.qs) {
            *y = f32::from(q) * d;
        }
    }

    /// Quantizes 32 values: `d = amax / 127` and `q = round(x / d)`, halves
    /// away from zero (C's `roundf`).
    pub fn from_f32(x: &[f32; QK]) -> Self {
        let (d, qs) = quantize_q8(x);
        BlockQ8_0 {
            d: f16_le_from(d),
            qs,
        }
    }
}

#[cfg(test)]
mod simd_tests {
    use super::*;

    #[test]
    fn fast_block_quantization_matches_scalar() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut blocks: Vec<[f32; QK]> = Vec::new();
        for case in 0..20_000 {
            let scale = [1e-30f32, 1e-3, 1.0, 3.0, 1e6, 3e38][case % 6];
            let mut x = [0f32; QK];
            for v in x.iter_mut() {
                *v = ((next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0) * scale;
            }
            if case % 7 == 0 {
                // Exact ties after scaling: amax 127 makes id exactly 1.
                x[0] = 127.0;
                for (i, v) in x.iter_mut().enumerate().skip(1) {
                    *v = (i as f32 - 16.0) + 0.5;
                }
            }
            blocks.push(x);
        }
        blocks.push([0.0; QK]);
        blocks.push([-0.0; QK]);
        let mut odd = [1.0f32; QK];
        odd[3] = f32::NAN;
        blocks.push(odd);
        odd[3] = f32::INFINITY;
        blocks.push(odd);
        odd[3] = f32::MIN_POSITIVE / 4.0;
        blocks.push(odd);
        for set in crate::dispatch::KernelSet::ALL {
            let Some(t) = set.table() else {
                eprintln!("SKIPPED {}: not supported by this CPU", set.name());
                continue;
            };
            for x in &blocks {
                let (d0, q0) = quantize_q8_scalar(x);
                let (d1, q1) = (t.quantize_q8.f)(x);
                assert!(
                    d0.to_bits() == d1.to_bits() || (d0.is_nan() && d1.is_nan()),
                    "{} {x:?}",
                    set.name()
                );
                assert_eq!(q0, q1, "{} {x:?}", set.name());
            }
        }
    }
}
