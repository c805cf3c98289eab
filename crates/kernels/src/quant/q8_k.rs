//! Q8_K: 256 values as i8 times an f32 scale, with sums of each 16 values,
//! used for activations in k-quant dot products; mirrors `block_q8_K`
//! (ggml-common.h), `quantize_row_q8_K_ref` and `dequantize_row_q8_K`
//! (ggml-quants.c) of
//! <https://github.com/ggml-org/llama.cpp/tree/master/ggml/src>.

use super::{Block, QK_K};

/// One Q8_K super-block: 292 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockQ8K {
    /// Scale, f32 little-endian (not f16).
    pub d: [u8; 4],
    /// The quantized values.
    pub qs: [i8; QK_K],
    /// Sum of each 16 consecutive values, i16 little-endian.
    pub bsums: [[u8; 2]; QK_K / 16],
}

const _: () = assert!(std::mem::size_of::<BlockQ8K>() == 292);

// SAFETY: #[repr(C)] and made only of u8/i8 arrays.
unsafe impl Block for BlockQ8K {}

impl BlockQ8K {
    /// The scale.
    pub fn d(&self) -> f32 {
        f32::from_le_bytes(self.d)
    }

    /// Sum of values `16 * i .. 16 * i + 16` (for `i` in 0..16).
    pub fn bsum(&self, i: usize) -> i16 {
        i16::from_le_bytes(self.bsums[i % (QK_K / 16)])
    }

    /// Dequantizes the block: `y = d * q`.
    pub fn to_f32(&self, y: &mut [f32; QK_K]) {
        let d = self.d();
        for (y, &q) in y.iter_mut().zip(&self.qs) {
            *y = d * f32::from(q);
        }
    }

    /// Quantizes 256 values: the value of largest magnitude (the first, on
    /// ties) maps to -127, `iscale = -127 / max`, `q = round(iscale * x)`
    /// with ties to even (ggml's `nearest_int`), capped at 127, and
    /// `d = 1 / iscale`.
    ///
    /// For an all-zero block ggml writes `d = 0` and zero values but leaves
    /// `bsums` untouched; here they are zero too (the sums of those values).
    ///
    /// Runs the active kernel set's version (`crate::table`), which gives
    /// [`BlockQ8K::from_f32_scalar`]'s bits.
    pub fn from_f32(x: &[f32; QK_K]) -> Self {
        (crate::table::active().quantize_q8k.f)(x)
    }

    /// An all-zero block (what an all-zero input quantizes to).
    pub(crate) const ZERO: BlockQ8K = BlockQ8K {
        d: [0; 4],
        qs: [0; QK_K],
        bsums: [[0; 2]; QK_K / 16],
    };

    /// The scalar reference of [`BlockQ8K::from_f32`].
    pub fn from_f32_scalar(x: &[f32; QK_K]) -> Self {
        let mut out = BlockQ8K::ZERO;
        let mut amax = 0.0f32;
        let mut max = 0.0f32;
        for &v in x {
            if v.abs() > amax {
                amax = v.abs();
                max = v;
            }
        }
        if amax == 0.0 {
            return out;
        }
        let iscale = -127.0 / max;
        for (q, &v) in out.qs.iter_mut().zip(x) {
            // `nearest_int` is round-half-even for |v| < 2^22; here
            // |iscale * v| <= 127 (NaN, from infinite input, gives 0 as in
            // ggml's bit trick).
            let n = super::round_ties_even(iscale * v) as i32;
            *q = n.min(127) as i8;
        }
        for (s, q) in out.bsums.iter_mut().zip(out.qs.chunks_exact(16)) {
            // 16 values of at most 127 in magnitude: fits in i16.
            let sum: i32 = q.iter().map(|&v| i32::from(v)).sum();
            *s = (sum as i16).to_le_bytes();
        }
        out.d = (1.0 / iscale).to_le_bytes();
        out
    }
}

#[cfg(test)]
mod set_tests {
    use super::*;
    use crate::dispatch::KernelSet;

    /// Every supported set's Q8_K quantization against the scalar
    /// reference: random magnitudes, exact ties of +max and -max (the first
    /// wins), values that round to +-127.5, zeros, tiny values and
    /// non-finite ones.
    #[test]
    fn every_set_quantizes_q8k_blocks_like_the_scalar_reference() {
        let mut next = crate::xorshift(0x9e37_79b9_7f4a_7c15u64);
        let mut blocks: Vec<[f32; QK_K]> = Vec::new();
        for k in 0..300 {
            let scale = f32::from_bits(((next() % 60) as u32 + 100) << 23);
            let mut x = [0f32; QK_K];
            for v in &mut x {
                *v = ((next() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale;
            }
            match k % 5 {
                0 => {
                    // Ties of magnitude, negative first or positive first.
                    let i = (next() % 128) as usize;
                    x[i] = -4.0 * scale;
                    x[i + 100] = 4.0 * scale;
                }
                1 => {
                    x[7] = 4.0 * scale;
                    x[200] = -4.0 * scale;
                }
                2 => {
                    // Products landing on halves: x = h * max / 127.
                    x[0] = 127.0;
                    for (i, v) in x.iter_mut().enumerate().skip(1) {
                        *v = ((i % 255) as f32 - 127.0) + 0.5;
                    }
                }
                _ => {}
            }
            blocks.push(x);
        }
        // Exact ties: max = -127 makes iscale exactly 1, so each product
        // is the value itself, halves among them (-126.5..=126.5; ties go
        // to even, not away from zero).
        let mut halves = [0f32; QK_K];
        halves[0] = -127.0;
        for (i, v) in halves.iter_mut().enumerate().skip(1) {
            *v = (i % 254) as f32 - 126.5;
        }
        blocks.push(halves);
        blocks.push([0.0; QK_K]);
        blocks.push([-0.0; QK_K]);
        let mut odd = [1.0f32; QK_K];
        odd[9] = f32::MIN_POSITIVE / 4.0;
        blocks.push(odd);
        odd[9] = f32::NAN;
        blocks.push(odd);
        odd[9] = f32::NEG_INFINITY;
        blocks.push(odd);
        for set in KernelSet::ALL {
            let Some(t) = set.table() else {
                eprintln!("SKIPPED {}: not supported by this CPU", set.name());
                continue;
            };
            for x in &blocks {
                let (want, got) = (BlockQ8K::from_f32_scalar(x), (t.quantize_q8k.f)(x));
                assert!(
                    got.d == want.d || (got.d().is_nan() && want.d().is_nan()),
                    "{} d",
                    set.name()
                );
                assert_eq!((got.qs, got.bsums), (want.qs, want.bsums), "{}", set.name());
            }
        }
    }
}
