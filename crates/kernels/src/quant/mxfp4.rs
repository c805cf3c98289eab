//! MXFP4 (OCP microscaling FP4, what gpt-oss's GGUF files use for the
//! expert matrices): 32 values as 4-bit E2M1 codes times one shared E8M0
//! power-of-two scale. Mirrors `block_mxfp4` (ggml-common.h),
//! `dequantize_row_mxfp4` and `quantize_row_mxfp4_ref` (ggml-quants.c) of
//! <https://github.com/ggml-org/llama.cpp/tree/master/ggml/src>, and
//! gguf-py's `gguf.quants.MXFP4`.
//!
//! As in ggml, the E2M1 values are stored doubled, as small integers
//! ([`KVALUES`]: `0, 0.5, 1, 1.5, 2, 3, 4, 6` times 2, and their negatives),
//! and the scale is halved to match: `x = KVALUES[q] * 2^(e - 128)`
//! ([`e8m0_half`]).

use super::{Block, QK};

/// The sixteen E2M1 codes' values, doubled (code 8 is -0, read as 0).
pub const KVALUES: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/// One MXFP4 block: 17 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockMxfp4 {
    /// The shared exponent, E8M0 (a biased power of two).
    pub e: u8,
    /// Byte `j` holds code `j` in its low nibble and code `j + 16` in its
    /// high nibble.
    pub qs: [u8; QK / 2],
}

const _: () = assert!(std::mem::size_of::<BlockMxfp4>() == 17);

// SAFETY: #[repr(C)] and made only of u8 fields.
unsafe impl Block for BlockMxfp4 {}

/// Half the E8M0 scale `e`, `2^(e - 128)`, exactly (ggml's
/// `ggml_e8m0_to_fp32_half`): an f32 subnormal for `e < 2`, else the
/// exponent field `e - 1`. `e = 255` (E8M0's NaN) gives `2^127` as in ggml.
#[inline(always)]
pub fn e8m0_half(e: u8) -> f32 {
    let bits = if e < 2 {
        0x0020_0000u32 << e
    } else {
        u32::from(e - 1) << 23
    };
    f32::from_bits(bits)
}

impl BlockMxfp4 {
    /// The block's scale as the dot products use it, [`e8m0_half`].
    pub fn d(&self) -> f32 {
        e8m0_half(self.e)
    }

    /// Dequantizes the block: `y = KVALUES[q] * d`.
    pub fn to_f32(&self, y: &mut [f32; QK]) {
        let d = self.d();
        for (j, &q) in self.qs.iter().enumerate() {
            y[j] = f32::from(KVALUES[usize::from(q & 0x0f)]) * d;
            y[j + QK / 2] = f32::from(KVALUES[usize::from(q >> 4)]) * d;
        }
    }

    /// Quantizes 32 values as ggml does: `e = floor(log2(amax)) - 2 + 127`
    /// (0 when every value is zero), then each value's code is the first of
    /// the sixteen whose `KVALUES[i] * d` is nearest. Values whose largest
    /// magnitude is below `2^-125` (where ggml's conversion of a negative
    /// exponent to `uint8_t` is undefined) get `e = 0`, and NaNs code 0.
    #[inline(always)]
    pub fn from_f32(x: &[f32; QK]) -> Self {
        let mut amax = 0.0f32;
        for &v in x {
            if amax < v.abs() {
                amax = v.abs();
            }
        }
        let e = if amax > 0.0 {
            let e = amax.log2().floor() - 2.0 + 127.0;
            if e >= 0.0 {
                e as u8
            } else {
                0
            }
        } else {
            0
        };
        let d = e8m0_half(e);
        let best = |v: f32| -> u8 {
            let mut best = 0u8;
            let mut best_err = (f32::from(KVALUES[0]) * d - v).abs();
            for (i, &k) in KVALUES.iter().enumerate().skip(1) {
                let err = (f32::from(k) * d - v).abs();
                if err < best_err {
                    best = i as u8;
                    best_err = err;
                }
            }
            best
        };
        let mut qs = [0u8; QK / 2];
        for (j, q) in qs.iter_mut().enumerate() {
            *q = best(x[j]) | (best(x[j + QK / 2]) << 4);
        }
        BlockMxfp4 { e, qs }
    }
}
