//! Q6_K: super-blocks of 256 values in 16 groups of 16; 6-bit signed values
//! with an i8 scale per group times an f16 super-scale,
//! `x = d * sc * (q - 32)`; mirrors `block_q6_K` (ggml-common.h) and
//! `dequantize_row_q6_K` (ggml-quants.c) of
//! <https://github.com/ggml-org/llama.cpp/tree/master/ggml/src>.

use super::float::{f16_le, f16_le_from};
use super::ksearch::{make_qx_quants_rmse1_x8, nearest_int, GROUP_MAX_EPS};
use super::{Block, QK_K};

/// One Q6_K super-block: 210 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockQ6K {
    /// Low four bits. Each half (128 values) uses 64 bytes: value
    /// `l + 32k` (l < 32) of the half is in byte `l + 32 * (k % 2)`, low
    /// nibble for k < 2, high nibble otherwise.
    pub ql: [u8; QK_K / 2],
    /// High two bits: each half uses 32 bytes, value `l + 32k` of the half
    /// at bits `2k..2k+2` of byte `l`.
    pub qh: [u8; QK_K / 4],
    /// Group scales.
    pub scales: [i8; QK_K / 16],
    /// Super-scale, f16 little-endian.
    pub d: [u8; 2],
}

const _: () = assert!(std::mem::size_of::<BlockQ6K>() == 210);

// SAFETY: #[repr(C)] and made only of u8/i8 arrays.
unsafe impl Block for BlockQ6K {}

impl BlockQ6K {
    /// Dequantizes the super-block: `y = (d * sc) * q`, in that order (ggml
    /// writes `d * sc[is] * q` and C evaluates it left to right).
    pub fn to_f32(&self, y: &mut [f32; QK_K]) {
        let d = f16_le(self.d);
        // Run r (32 values, y[32r..32r + 32]) is in half h = r / 4 with
        // k = r % 4; its scales are groups 2r and 2r + 1.
        for (r, out) in y.chunks_exact_mut(32).enumerate() {
            let (h, k) = (r / 4, r % 4);
            let ql = &self.ql[64 * h + 32 * (k % 2)..][..32];
            let qh = &self.qh[32 * h..][..32];
            let nib = 4 * (k / 2);
            for (l, (y, (&lo, &hi))) in out.iter_mut().zip(ql.iter().zip(qh)).enumerate() {
                let q = (((lo >> nib) & 0x0f) | (((hi >> (2 * k)) & 3) << 4)) as i8 - 32;
                let sc = self.scales[2 * r + l / 16];
                *y = d * f32::from(sc) * f32::from(q);
            }
        }
    }

    /// Quantizes 256 values as `quantize_row_q6_K_ref`: each group of 16
    /// gets its scale from the `make_qx_quants` search, the scales are
    /// rounded to i8 against the one of largest magnitude (which maps to
    /// -128), and the values are rounded again against the rounded scales.
    #[inline(always)]
    pub fn from_f32(x: &[f32; QK_K]) -> Self {
        // Two passes of eight groups, lane g of pass h holding group 8h + g.
        let mut l = [0i8; QK_K];
        let mut scales = [0f32; QK_K / 16];
        for h in 0..2 {
            let xt: [[f32; 8]; 16] =
                std::array::from_fn(|i| std::array::from_fn(|g| x[16 * (8 * h + g) + i]));
            let mut lt = [[0i8; 8]; 16];
            let s = make_qx_quants_rmse1_x8(32, &xt, &mut lt);
            scales[8 * h..][..8].copy_from_slice(&s);
            for (i, row) in lt.iter().enumerate() {
                for (g, &q) in row.iter().enumerate() {
                    l[16 * (8 * h + g) + i] = q;
                }
            }
        }
        let mut max_scale = 0.0f32;
        let mut max_abs_scale = 0.0f32;
        for &s in &scales {
            if s.abs() > max_abs_scale {
                max_abs_scale = s.abs();
                max_scale = s;
            }
        }
        let mut y = BlockQ6K {
            ql: [0; QK_K / 2],
            qh: [0; QK_K / 4],
            scales: [0; QK_K / 16],
            d: [0; 2],
        };
        if max_abs_scale < GROUP_MAX_EPS {
            return y;
        }
        let iscale = -128.0 / max_scale;
        y.d = f16_le_from(1.0 / iscale);
        for (q, &s) in y.scales.iter_mut().zip(&scales) {
            // C stores the int in an int8_t: wrapping, as `as` does.
            *q = nearest_int(iscale * s).min(127) as i8;
        }
        let d = f16_le(y.d);
        for (g, &sc) in y.scales.iter().enumerate() {
            let dg = d * f32::from(sc);
            if dg == 0.0 {
                continue;
            }
            for (o, &v) in l[16 * g..][..16].iter_mut().zip(&x[16 * g..][..16]) {
                *o = (nearest_int(v / dg).clamp(-32, 31) + 32) as i8;
            }
        }
        for h in 0..2 {
            let l = &l[128 * h..];
            let ql = &mut y.ql[64 * h..][..64];
            for i in 0..32 {
                let q = [l[i], l[i + 32], l[i + 64], l[i + 96]].map(|v| v as u8);
                ql[i] = (q[0] & 0x0f) | ((q[2] & 0x0f) << 4);
                ql[i + 32] = (q[1] & 0x0f) | ((q[3] & 0x0f) << 4);
                y.qh[32 * h + i] =
                    (q[0] >> 4) | ((q[1] >> 4) << 2) | ((q[2] >> 4) << 4) | ((q[3] >> 4) << 6);
            }
        }
        y
    }
}
