//! Q5_K: Q4_K plus a fifth bit per value, `x = d * sc * q - dmin * m` with
//! `q` in 0..32; mirrors `block_q5_K` (ggml-common.h) and
//! `dequantize_row_q5_K` (ggml-quants.c) of
//! <https://github.com/ggml-org/llama.cpp/tree/master/ggml/src>.

use super::float::f16_le;
use super::ksearch::Qkx2;
use super::q4_k::{quantize_k4_groups, scale_min_k4};
use super::{Block, QK_K};

/// One Q5_K super-block: 176 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockQ5K {
    /// Super-scale of the scales, f16 little-endian.
    pub d: [u8; 2],
    /// Super-scale of the mins, f16 little-endian.
    pub dmin: [u8; 2],
    /// Eight 6-bit scales and mins, packed as in Q4_K.
    pub scales: [u8; 12],
    /// Fifth bits: bit `g` of byte `l` belongs to value `l` of group `g`.
    pub qh: [u8; QK_K / 8],
    /// Low four bits, laid out as in Q4_K.
    pub qs: [u8; QK_K / 2],
}

const _: () = assert!(std::mem::size_of::<BlockQ5K>() == 176);

// SAFETY: #[repr(C)] and made only of u8 arrays.
unsafe impl Block for BlockQ5K {}

impl BlockQ5K {
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
            let ql = &self.qs[32 * (g / 2)..][..32];
            for ((y, &lo), &hi) in out.iter_mut().zip(ql).zip(&self.qh) {
                let q = ((lo >> shift) & 0x0f) + if hi & (1 << g) != 0 { 16 } else { 0 };
                *y = d1 * f32::from(q) - m1;
            }
        }
    }

    /// Quantizes 256 values as `quantize_row_q5_K_ref` (the Q4_K scheme
    /// with 32 levels and its own search range).
    #[inline(always)]
    pub fn from_f32(x: &[f32; QK_K]) -> Self {
        const SEARCH: Qkx2 = Qkx2 {
            nmax: 31,
            rmin: -0.5,
            rdelta: 0.1,
            nstep: 15,
            use_mad: false,
        };
        let (d, dmin, scales, l) = quantize_k4_groups(x, &SEARCH);
        let mut qs = [0u8; QK_K / 2];
        let mut qh = [0u8; QK_K / 8];
        for p in 0..QK_K / 64 {
            for i in 0..32 {
                let (mut l1, mut l2) = (l[64 * p + i], l[64 * p + i + 32]);
                if l1 > 15 {
                    l1 -= 16;
                    qh[i] |= 1 << (2 * p);
                }
                if l2 > 15 {
                    l2 -= 16;
                    qh[i] |= 2 << (2 * p);
                }
                qs[32 * p + i] = l1 | (l2 << 4);
            }
        }
        BlockQ5K {
            d,
            dmin,
            scales,
            qh,
            qs,
        }
    }
}
