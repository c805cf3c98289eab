//! Q4_K: super-blocks of 256 values in 8 groups of 32; 4-bit values with a
//! 6-bit scale and 6-bit min per group, both times f16 super-scales,
//! `x = d * sc * q - dmin * m`; mirrors `block_q4_K` (ggml-common.h),
//! `get_scale_min_k4` and `dequantize_row_q4_K` (ggml-quants.c) of
//! <https://github.com/ggml-org/llama.cpp/tree/master/ggml/src>.

use super::float::{f16_le, f16_le_from};
use super::ksearch::{make_qkx2_quants_x8, nearest_int, Qkx2};
use super::{Block, QK_K};

/// One Q4_K super-block: 144 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockQ4K {
    /// Super-scale of the scales, f16 little-endian.
    pub d: [u8; 2],
    /// Super-scale of the mins, f16 little-endian.
    pub dmin: [u8; 2],
    /// Eight 6-bit scales and eight 6-bit mins (see [`scale_min_k4`]).
    pub scales: [u8; 12],
    /// 4-bit values: 32 bytes per pair of groups, group `2p` in the low
    /// nibbles and group `2p + 1` in the high nibbles.
    pub qs: [u8; QK_K / 2],
}

const _: () = assert!(std::mem::size_of::<BlockQ4K>() == 144);

// SAFETY: #[repr(C)] and made only of u8 arrays.
unsafe impl Block for BlockQ4K {}

/// (scale, min) of group `j` (0..8) from the 12 packed bytes shared by Q4_K
/// and Q5_K. Groups 0..4 use the low 6 bits of bytes `j` and `j + 4`; groups
/// 4..8 take their low nibbles from byte `j + 4` and their top two bits
/// from the spare top bits of bytes `j - 4` and `j`. `j` is taken modulo 8.
pub fn scale_min_k4(j: usize, q: &[u8; 12]) -> (u8, u8) {
    let j = j % 8;
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        let sc = (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4);
        let m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
        (sc, m)
    }
}

/// The per-group search of Q4_K and Q5_K (`quantize_row_q4_K_ref`,
/// `quantize_row_q5_K_ref`): for each group of 32, weights
/// `sqrt(mean(x^2)) + |x|` and a `make_qkx2_quants` search; then the eight
/// scales and mins rounded to 6 bits against their maxima and packed, and
/// the values rounded again (to `0..=p.nmax`) against the rounded ones.
/// Returns `(d, dmin, packed scales, levels)`.
#[inline(always)]
pub(crate) fn quantize_k4_groups(
    x: &[f32; QK_K],
    p: &Qkx2,
) -> ([u8; 2], [u8; 2], [u8; 12], [u8; QK_K]) {
    // Lane g holds group g: value i of every group at once.
    let mut xt = [[0f32; 8]; 32];
    let mut wt = [[0f32; 8]; 32];
    for g in 0..QK_K / 32 {
        let xg = &x[32 * g..][..32];
        let mut sum_x2 = 0.0f32;
        for &v in xg {
            sum_x2 += v * v;
        }
        let av_x = (sum_x2 / 32.0).sqrt();
        for i in 0..32 {
            xt[i][g] = xg[i];
            wt[i][g] = av_x + xg[i].abs();
        }
    }
    let mut lt = [[0u8; 8]; 32];
    let (scales, mins) = make_qkx2_quants_x8(p, &xt, &wt, &mut lt);
    let mut l = [0u8; QK_K];
    for (i, row) in lt.iter().enumerate() {
        for (g, &q) in row.iter().enumerate() {
            l[32 * g + i] = q;
        }
    }
    let (mut max_scale, mut max_min) = (0.0f32, 0.0f32);
    for g in 0..QK_K / 32 {
        if scales[g] > max_scale {
            max_scale = scales[g];
        }
        if mins[g] > max_min {
            max_min = mins[g];
        }
    }
    let inv_scale = if max_scale > 0.0 {
        63.0 / max_scale
    } else {
        0.0
    };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    let mut packed = [0u8; 12];
    for j in 0..QK_K / 32 {
        // C stores the rounded values in uint8_t (wrapping), then caps them.
        let ls = (nearest_int(inv_scale * scales[j]) as u8).min(63);
        let lm = (nearest_int(inv_min * mins[j]) as u8).min(63);
        if j < 4 {
            packed[j] = ls;
            packed[j + 4] = lm;
        } else {
            packed[j + 4] = (ls & 0x0f) | ((lm & 0x0f) << 4);
            packed[j - 4] |= (ls >> 4) << 6;
            packed[j] |= (lm >> 4) << 6;
        }
    }
    let d = f16_le_from(max_scale / 63.0);
    let dmin = f16_le_from(max_min / 63.0);
    let (df, dminf) = (f16_le(d), f16_le(dmin));
    for g in 0..QK_K / 32 {
        let (sc, m) = scale_min_k4(g, &packed);
        let dg = df * f32::from(sc);
        if dg == 0.0 {
            continue;
        }
        let dm = dminf * f32::from(m);
        for (o, &v) in l[32 * g..][..32].iter_mut().zip(&x[32 * g..][..32]) {
            *o = nearest_int((v + dm) / dg).clamp(0, p.nmax) as u8;
        }
    }
    (d, dmin, packed, l)
}

impl BlockQ4K {
    /// Quantizes 256 values as `quantize_row_q4_K_ref` (see
    /// `quantize_k4_groups`).
    #[inline(always)]
    pub fn from_f32(x: &[f32; QK_K]) -> Self {
        const SEARCH: Qkx2 = Qkx2 {
            nmax: 15,
            rmin: -1.0,
            rdelta: 0.1,
            nstep: 20,
            use_mad: false,
        };
        let (d, dmin, scales, l) = quantize_k4_groups(x, &SEARCH);
        let mut qs = [0u8; QK_K / 2];
        for p in 0..QK_K / 64 {
            for i in 0..32 {
                qs[32 * p + i] = l[64 * p + i] | (l[64 * p + i + 32] << 4);
            }
        }
        BlockQ4K {
            d,
            dmin,
            scales,
            qs,
        }
    }

    /// Dequantizes the super-block; per group `d1 = d * sc`, `m1 = dmin * m`
    /// and `y = d1 * q - m1`, in that order (as ggml).
    pub fn to_f32(&self, y: &mut [f32; QK_K]) {
        let d = f16_le(self.d);
        let dmin = f16_le(self.dmin);
        for (g, out) in y.chunks_exact_mut(32).enumerate() {
            let (sc, m) = scale_min_k4(g, &self.scales);
            let d1 = d * f32::from(sc);
            let m1 = dmin * f32::from(m);
            let shift = 4 * (g % 2);
            let q = &self.qs[32 * (g / 2)..][..32];
            for (y, &b) in out.iter_mut().zip(q) {
                *y = d1 * f32::from((b >> shift) & 0x0f) - m1;
            }
        }
    }
}
