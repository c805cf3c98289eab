//! Q2_K: super-blocks of 256 values in 16 groups of 16; 2-bit values with a
//! 4-bit scale and 4-bit min per group, both times f16 super-scales,
//! `x = d * sc * q - dmin * m`; mirrors `block_q2_K` (ggml-common.h) and
//! `dequantize_row_q2_K` (ggml-quants.c) of
//! <https://github.com/ggml-org/llama.cpp/tree/master/ggml/src>.

use super::float::{f16_le, f16_le_from};
use super::ksearch::{make_qkx2_quants_x8, nearest_int, pack_2bit, Qkx2};
use super::{Block, QK_K};

/// One Q2_K super-block: 84 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockQ2K {
    /// Per group of 16: scale in the low nibble, min in the high nibble.
    pub scales: [u8; QK_K / 16],
    /// 2-bit values. Each half of the block (128 values) uses 32 bytes: the
    /// bits `2k..2k+2` of byte `l` hold value `32k + l` of that half.
    pub qs: [u8; QK_K / 4],
    /// Super-scale of the scales, f16 little-endian.
    pub d: [u8; 2],
    /// Super-scale of the mins, f16 little-endian.
    pub dmin: [u8; 2],
}

const _: () = assert!(std::mem::size_of::<BlockQ2K>() == 84);

// SAFETY: #[repr(C)] and made only of u8 arrays.
unsafe impl Block for BlockQ2K {}

impl BlockQ2K {
    /// Dequantizes the super-block; per group `dl = d * sc`, `ml = dmin * m`
    /// and `y = dl * q - ml`, in that order (as ggml).
    pub fn to_f32(&self, y: &mut [f32; QK_K]) {
        let d = f16_le(self.d);
        let dmin = f16_le(self.dmin);
        // Group g (16 values, y[16g..16g + 16]) lives in half g / 8, at
        // bit shift 2 * ((g / 2) % 4), bytes 16 * (g % 2) .. + 16.
        for (g, &sc) in self.scales.iter().enumerate() {
            let dl = d * f32::from(sc & 0x0f);
            let ml = dmin * f32::from(sc >> 4);
            let shift = 2 * ((g / 2) % 4);
            let q = &self.qs[32 * (g / 8) + 16 * (g % 2)..][..16];
            for (l, &b) in q.iter().enumerate() {
                y[16 * g + l] = dl * f32::from((b >> shift) & 3) - ml;
            }
        }
    }

    /// Quantizes 256 values as `quantize_row_q2_K_ref`: a `make_qkx2_quants`
    /// search (absolute errors weighted by |x|) per group of 16, scales and
    /// mins rounded to 4 bits against their maxima, then the values rounded
    /// again against the rounded scales and mins.
    #[inline(always)]
    pub fn from_f32(x: &[f32; QK_K]) -> Self {
        const SEARCH: Qkx2 = Qkx2 {
            nmax: 3,
            rmin: -0.5,
            rdelta: 0.1,
            nstep: 15,
            use_mad: true,
        };
        // Two passes of eight groups, lane g of pass h holding group 8h + g.
        let mut l = [0u8; QK_K];
        let mut scales = [0f32; QK_K / 16];
        let mut mins = [0f32; QK_K / 16];
        for h in 0..2 {
            let mut xt = [[0f32; 8]; 16];
            let mut wt = [[0f32; 8]; 16];
            for g in 0..8 {
                for i in 0..16 {
                    let v = x[16 * (8 * h + g) + i];
                    xt[i][g] = v;
                    wt[i][g] = v.abs();
                }
            }
            let mut lt = [[0u8; 8]; 16];
            let (s, m) = make_qkx2_quants_x8(&SEARCH, &xt, &wt, &mut lt);
            scales[8 * h..][..8].copy_from_slice(&s);
            mins[8 * h..][..8].copy_from_slice(&m);
            for (i, row) in lt.iter().enumerate() {
                for (g, &q) in row.iter().enumerate() {
                    l[16 * (8 * h + g) + i] = q;
                }
            }
        }
        let (mut max_scale, mut max_min) = (0.0f32, 0.0f32);
        for (&s, &m) in scales.iter().zip(&mins) {
            if s > max_scale {
                max_scale = s;
            }
            if m > max_min {
                max_min = m;
            }
        }
        let mut y = BlockQ2K {
            scales: [0; QK_K / 16],
            qs: [0; QK_K / 4],
            d: [0; 2],
            dmin: [0; 2],
        };
        if max_scale > 0.0 {
            let iscale = 15.0 / max_scale;
            for (q, &s) in y.scales.iter_mut().zip(&scales) {
                *q = nearest_int(iscale * s) as u8;
            }
            y.d = f16_le_from(max_scale / 15.0);
        } else {
            y.d = f16_le_from(0.0);
        }
        if max_min > 0.0 {
            let iscale = 15.0 / max_min;
            for (q, &m) in y.scales.iter_mut().zip(&mins) {
                *q = (i32::from(*q) | (nearest_int(iscale * m) << 4)) as u8;
            }
            y.dmin = f16_le_from(max_min / 15.0);
        } else {
            y.dmin = f16_le_from(0.0);
        }
        let (d, dmin) = (f16_le(y.d), f16_le(y.dmin));
        for (g, &sc) in y.scales.iter().enumerate() {
            let dg = d * f32::from(sc & 0x0f);
            if dg == 0.0 {
                continue;
            }
            let dm = dmin * f32::from(sc >> 4);
            for (o, &v) in l[16 * g..][..16].iter_mut().zip(&x[16 * g..][..16]) {
                *o = nearest_int((v + dm) / dg).clamp(0, 3) as u8;
            }
        }
        pack_2bit(&l, &mut y.qs);
        y
    }
}
