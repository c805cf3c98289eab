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

#[cfg(test)]
mod tests {
    use super::*;

    /// The codes of a block, in value order (`qs[j]` low nibble is value
    /// `j`, high nibble value `j + 16`).
    fn codes(b: &BlockMxfp4) -> [u8; QK] {
        let mut c = [0u8; QK];
        for (j, &q) in b.qs.iter().enumerate() {
            c[j] = q & 0x0f;
            c[j + QK / 2] = q >> 4;
        }
        c
    }

    fn block(head: &[f32]) -> [f32; QK] {
        let mut x = [0.0f32; QK];
        x[..head.len()].copy_from_slice(head);
        x
    }

    #[test]
    fn zeros_give_scale_zero_and_code_zero() {
        let b = BlockMxfp4::from_f32(&[0.0; QK]);
        assert_eq!(b, BlockMxfp4 { e: 0, qs: [0; 16] });
        // -0.0 is not above 0 either, and codes as +0.
        let b = BlockMxfp4::from_f32(&[-0.0; QK]);
        assert_eq!(b, BlockMxfp4 { e: 0, qs: [0; 16] });
    }

    /// Worked by hand: amax 6 gives e = floor(log2 6) - 2 + 127 = 127 and
    /// d = 2^(127 - 128) = 0.5, so the grid is 0, 0.5, 1, 1.5, 2, 3, 4, 6.
    /// Ties go to the first (lowest) code: 0.25 and -0.25 to 0, 2.5 to 2
    /// (code 4), 5 to 4 (code 6).
    #[test]
    fn hand_checked_block_and_ties() {
        let x = block(&[
            6.0,
            -6.0,
            1.0,
            0.25,
            -0.25,
            2.5,
            5.0,
            -1.5,
            -0.0,
            3.1,
            100.0 / 101.0,
        ]);
        let b = BlockMxfp4::from_f32(&x);
        assert_eq!(b.e, 127);
        assert_eq!(b.d(), 0.5);
        let c = codes(&b);
        assert_eq!(&c[..11], &[7, 15, 2, 0, 0, 4, 6, 11, 0, 5, 2]);
        assert!(c[11..].iter().all(|&q| q == 0));
        // The layout: value 16 is the high nibble of byte 0.
        let mut x = [0.0f32; QK];
        x[16] = 6.0;
        assert_eq!(BlockMxfp4::from_f32(&x).qs[0], 0x70);
    }

    /// A power-of-two maximum sits on code 6 (value 4d), not on the top
    /// code: amax 1 gives e = 125, d = 1/8.
    #[test]
    fn power_of_two_max() {
        let b = BlockMxfp4::from_f32(&block(&[1.0, -0.7]));
        assert_eq!(b.e, 125);
        // -0.7 is nearest -0.75 (= -6 * 1/8, code 13).
        assert_eq!(&codes(&b)[..2], &[6, 13]);
    }

    /// The extremes: f32::MAX (log2 rounds to 128, e = 253; the codes
    /// whose values overflow to infinity are never nearest, so code 5 =
    /// 1.5 * 2^127) and a block below 2^-125 (e = 0, subnormal d = 2^-128).
    #[test]
    fn extremes() {
        let b = BlockMxfp4::from_f32(&block(&[f32::MAX, -f32::MAX]));
        assert_eq!(b.e, 253);
        assert_eq!(&codes(&b)[..2], &[5, 13]);
        let mut y = [0.0; QK];
        b.to_f32(&mut y);
        assert_eq!(y[0], 1.5 * 2f32.powi(127));
        assert!(y.iter().all(|v| v.is_finite()));

        let b = BlockMxfp4::from_f32(&block(&[1e-38]));
        assert_eq!(b.e, 0);
        assert_eq!(b.d(), 2f32.powi(-128));
        // 1e-38 / 2^-128 = 3.40...: nearest grid value 3 (code 3).
        assert_eq!(codes(&b)[0], 3);
    }

    /// Round trip: a block whose codes include a magnitude of 8 or 12
    /// (codes 6, 7, 14, 15) dequantizes to values that quantize back to the
    /// same scale and codes (code 8, -0, comes back as code 0), and no
    /// value moves by more than half a grid step (or, above the top value,
    /// the clamp) on any block.
    #[test]
    fn round_trip() {
        let mut s = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        for _ in 0..2000 {
            let e = 2 + (next() % 248) as u8;
            let mut qs = [0u8; 16];
            for q in qs.iter_mut() {
                *q = next() as u8;
            }
            let top = [6u8, 7, 14, 15][(next() % 4) as usize];
            let i = (next() % 16) as usize;
            qs[i] = (qs[i] & 0xf0) | top;
            let b = BlockMxfp4 { e, qs };
            let mut y = [0.0; QK];
            b.to_f32(&mut y);
            let back = BlockMxfp4::from_f32(&y);
            assert_eq!(back.e, e);
            let want: Vec<u8> = codes(&b)
                .iter()
                .map(|&c| if c == 8 { 0 } else { c })
                .collect();
            assert_eq!(codes(&back).as_slice(), want.as_slice(), "e {e}");

            // Arbitrary values: within half the widest step of the grid
            // (8d to 12d: 2d) up to 12d, and above it (the maximum can be
            // just under 16d) clamped to 12d, so within 4d.
            let mut x = [0.0f32; QK];
            for v in x.iter_mut() {
                *v = ((next() >> 40) as f32 - 8_388_608.0) * 2f32.powi(-((next() % 30) as i32));
            }
            let q = BlockMxfp4::from_f32(&x);
            let mut y = [0.0; QK];
            q.to_f32(&mut y);
            let d = q.d();
            for (a, b) in x.iter().zip(&y) {
                let bound = if a.abs() <= 12.0 * d { 2.0 } else { 4.0 } * d;
                assert!((a - b).abs() <= bound, "{a} -> {b} (d {d})");
            }
        }
    }
}
