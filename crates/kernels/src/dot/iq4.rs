//! Dot products of the IQ4 formats (see `crate::quant::iq4`); mirror
//! `ggml_vec_dot_iq4_nl_q8_0_generic` and `ggml_vec_dot_iq4_xs_q8_K_generic`
//! (ggml-cpu/quants.c) of
//! <https://github.com/ggml-org/llama.cpp/tree/master/ggml/src>.
//!
//! IQ4_NL pairs with Q8_0 activations and has the Q4_0 expression with the
//! codes read through the table: `sum += (d_w * d_x) * isum`.
//!
//! IQ4_XS pairs with Q8_K and is a k-quant with one small scale per run of
//! 32: `isum = sum_runs (ls - 32) * sum(KVALUES_IQ4NL[q] * q_x)`, one f32
//! term per super-block, `(d_w * d_x) * isum`. (ggml adds one f32 term per
//! run, `(d_w * d_x * (ls - 32)) * sumi`; ours rounds once per super-block,
//! as the other k-quants here.)
//!
//! No overflow for any bytes: `|isum| <= 32 * 127 * 128` (IQ4_NL) and
//! `8 * 32 * (32 * 127 * 128) < 2^27` (IQ4_XS).

use super::sum_blocks;
use crate::quant::iq4::KVALUES_IQ4NL;
use crate::quant::{BlockIq4Nl, BlockIq4Xs, BlockQ8K, BlockQ8_0, QK};

/// `sum(KVALUES_IQ4NL[q] * q_x)` for one run of sixteen code bytes and its
/// 32 activations.
#[inline(always)]
pub(crate) fn run_dot(qs: &[u8], q_x: &[i8]) -> i32 {
    let (x_lo, x_hi) = q_x.split_at(QK / 2);
    let mut isum = 0i32;
    for ((&b, &x0), &x1) in qs.iter().zip(x_lo).zip(x_hi) {
        let w0 = i32::from(KVALUES_IQ4NL[usize::from(b & 0x0f)]);
        let w1 = i32::from(KVALUES_IQ4NL[usize::from(b >> 4)]);
        isum += w0 * i32::from(x0) + w1 * i32::from(x1);
    }
    isum
}

/// IQ4_NL x Q8_0.
pub(super) fn iq4_nl_q8_0(w: &[u8], a: &[u8]) -> f32 {
    sum_blocks(w, a, |wb: &BlockIq4Nl, ab: &BlockQ8_0| {
        (wb.d() * ab.d()) * run_dot(&wb.qs, &ab.qs) as f32
    })
}

/// The integer sum of one IQ4_XS super-block against a Q8_K block.
#[inline(always)]
pub(crate) fn iq4_xs_isum(wb: &BlockIq4Xs, ab: &BlockQ8K) -> i32 {
    let mut isum = 0i32;
    for (r, (qs, q_x)) in wb
        .qs
        .chunks_exact(16)
        .zip(ab.qs.chunks_exact(32))
        .enumerate()
    {
        isum += wb.run_scale(r) * run_dot(qs, q_x);
    }
    isum
}

/// IQ4_XS x Q8_K.
pub(super) fn iq4_xs_q8_k(w: &[u8], a: &[u8]) -> f32 {
    sum_blocks(w, a, |wb: &BlockIq4Xs, ab: &BlockQ8K| {
        (wb.d() * ab.d()) * iq4_xs_isum(wb, ab) as f32
    })
}
