//! Q3_K: super-blocks of 256 values in 16 groups of 16; 3-bit signed values
//! (2 low bits plus a high-bit mask) with a 6-bit signed scale per group
//! times an f16 super-scale, `x = d * (sc - 32) * (q - 4)`; mirrors
//! `block_q3_K` (ggml-common.h) and `dequantize_row_q3_K` (ggml-quants.c) of
//! <https://github.com/ggml-org/llama.cpp/tree/master/ggml/src>.

use super::float::{f16_le, f16_le_from};
use super::ksearch::{make_q3_quants_rmse, nearest_int, pack_2bit};
use super::{Block, QK_K};

/// One Q3_K super-block: 110 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockQ3K {
    /// High bits: bit `k` of byte `l` belongs to value `32k + l`; a *clear*
    /// bit means 4 is subtracted.
    pub hmask: [u8; QK_K / 8],
    /// Low 2 bits, laid out as in Q2_K.
    pub qs: [u8; QK_K / 4],
    /// Sixteen 6-bit scales (see [`BlockQ3K::scales`]).
    pub scales: [u8; 12],
    /// Super-scale, f16 little-endian.
    pub d: [u8; 2],
}

const _: () = assert!(std::mem::size_of::<BlockQ3K>() == 110);

// SAFETY: #[repr(C)] and made only of u8 arrays.
unsafe impl Block for BlockQ3K {}

impl BlockQ3K {
    /// The 16 group scales, already offset by -32 (range -32..=31).
    ///
    /// Scale `j` has its low nibble in byte `j` (j < 8, low nibble) or
    /// `j - 8` (high nibble), and its top two bits in byte `8 + j % 4` at
    /// bit `2 * (j / 4)`.
    pub fn scales(&self) -> [i8; 16] {
        let b = &self.scales;
        let mut out = [0i8; 16];
        for (j, s) in out.iter_mut().enumerate() {
            let low = if j < 8 { b[j] & 0x0f } else { b[j - 8] >> 4 };
            let high = (b[8 + j % 4] >> (2 * (j / 4))) & 3;
            *s = (low | (high << 4)) as i8 - 32;
        }
        out
    }

    /// Dequantizes the super-block; per group `dl = d * sc` and
    /// `y = dl * q` (as ggml).
    pub fn to_f32(&self, y: &mut [f32; QK_K]) {
        let d = f16_le(self.d);
        // Group g (y[16g..16g + 16]) lives in half g / 8, at bit shift
        // 2 * k with k = (g / 2) % 4, bytes 16 * (g % 2) .. + 16; its high
        // bits are bit 4 * (g / 8) + k of the same hmask bytes.
        for (g, &sc) in self.scales().iter().enumerate() {
            let dl = d * f32::from(sc);
            let k = (g / 2) % 4;
            let m = 1u8 << (4 * (g / 8) + k);
            let lo = 16 * (g % 2);
            let q = &self.qs[32 * (g / 8) + lo..][..16];
            let h = &self.hmask[lo..][..16];
            for (l, (&qb, &hb)) in q.iter().zip(h).enumerate() {
                let v = ((qb >> (2 * k)) & 3) as i8 - if hb & m != 0 { 0 } else { 4 };
                y[16 * g + l] = dl * f32::from(v);
            }
        }
    }

    /// Quantizes 256 values as `quantize_row_q3_K_ref`: a `make_q3_quants`
    /// search per group of 16, the 16 scales rounded to 6 bits against the
    /// one of largest magnitude (which maps to -32), then the values
    /// rounded again against the rounded scales.
    #[inline(always)]
    pub fn from_f32(x: &[f32; QK_K]) -> Self {
        let mut l = [0i8; QK_K];
        let mut scales = [0f32; QK_K / 16];
        let mut max_scale = 0.0f32;
        let mut amax = 0.0f32;
        for (g, s) in scales.iter_mut().enumerate() {
            *s = make_q3_quants_rmse(4, &x[16 * g..][..16], &mut l[16 * g..][..16]);
            if s.abs() > amax {
                amax = s.abs();
                max_scale = *s;
            }
        }
        let mut y = BlockQ3K {
            hmask: [0; QK_K / 8],
            qs: [0; QK_K / 4],
            scales: [0; 12],
            d: [0; 2],
        };
        if max_scale != 0.0 {
            let iscale = -32.0 / max_scale;
            for (j, &s) in scales.iter().enumerate() {
                // C keeps the rounded value in an int8_t (wrapping).
                let q = (nearest_int(iscale * s) as i8).clamp(-32, 31) + 32;
                let q = q as u8;
                if j < 8 {
                    y.scales[j] = q & 0x0f;
                } else {
                    y.scales[j - 8] |= (q & 0x0f) << 4;
                }
                y.scales[8 + j % 4] |= (q >> 4) << (2 * (j / 4));
            }
            y.d = f16_le_from(1.0 / iscale);
        } else {
            y.d = f16_le_from(0.0);
        }
        let d = f16_le(y.d);
        for (g, &sc) in y.scales().iter().enumerate() {
            let dg = d * f32::from(sc);
            if dg == 0.0 {
                continue;
            }
            for (o, &v) in l[16 * g..][..16].iter_mut().zip(&x[16 * g..][..16]) {
                *o = (nearest_int(v / dg).clamp(-4, 3) + 4) as i8;
            }
        }
        // The high bit of value j goes to bit j / 32 of byte j % 32.
        let mut low = [0u8; QK_K];
        for (j, (&v, o)) in l.iter().zip(low.iter_mut()).enumerate() {
            let mut v = v as u8;
            if v > 3 {
                y.hmask[j % 32] |= 1 << (j / 32);
                v -= 4;
            }
            *o = v;
        }
        pack_2bit(&low, &mut y.qs);
        y
    }
}
