//! Dot products of the 32-value formats with 8-bit activations; mirrors
//! `ggml_vec_dot_q4_0_q8_0_generic`, `ggml_vec_dot_q4_1_q8_1_generic`,
//! `ggml_vec_dot_q5_0_q8_0_generic`, `ggml_vec_dot_q5_1_q8_1_generic` and
//! `ggml_vec_dot_q8_0_q8_0_generic` (ggml-cpu/quants.c) of
//! <https://github.com/ggml-org/llama.cpp/tree/master/ggml/src>.
//!
//! Each block pair adds `(d_w * d_x) * isum` to the row sum, with `isum` the
//! exact integer dot product of the quantized values. For the asymmetric
//! formats (`w = d_w * q + m_w`) the offset contributes `m_w * sum(x)`, and
//! `sum(x)` is taken, as in ggml, from the activation block's precomputed
//! `s = d_x * sum(q_x)` (Q8_1; computed with the f32 `d_x` and stored as
//! f16, so it differs from the sum of the dequantized values in the f16
//! rounding), so the term is `(d_w * d_x) * isum + m_w * s_x`.
//!
//! MXFP4 (`mxfp4_q8_0`) is the Q4_0 expression with the nibbles read
//! through the E2M1 table (`KVALUES`, doubled values in `-12..=12`) and
//! the scale `2^(e - 128)` in place of the f16 `d_w`.
//!
//! No overflow: `|isum| <= 32 * 31 * 128` (5-bit weights, i8 activations).

use super::{idot, sum_blocks};
use crate::quant::mxfp4::KVALUES;
use crate::quant::{
    BlockMxfp4, BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8_0, BlockQ8_1, QK,
};

/// `sum((q - offset) * q_x)` for a block of 4-bit values: value `j` is the
/// low nibble of byte `j`, value `j + 16` its high nibble.
#[inline(always)]
fn nibble_dot(qs: &[u8; QK / 2], offset: i32, q_x: &[i8; QK]) -> i32 {
    let (x_lo, x_hi) = q_x.split_at(QK / 2);
    let mut isum = 0i32;
    for ((&b, &x0), &x1) in qs.iter().zip(x_lo).zip(x_hi) {
        let q0 = i32::from(b & 0x0f) - offset;
        let q1 = i32::from(b >> 4) - offset;
        isum += q0 * i32::from(x0) + q1 * i32::from(x1);
    }
    isum
}

/// `sum((q - offset) * q_x)` for a block of 5-bit values: the low four
/// bits as in [`nibble_dot`], the fifth bit of value `j` is bit `j` of the
/// little-endian `qh`.
#[inline(always)]
fn five_bit_dot(qs: &[u8; QK / 2], qh: [u8; 4], offset: i32, q_x: &[i8; QK]) -> i32 {
    let qh = u32::from_le_bytes(qh);
    let (x_lo, x_hi) = q_x.split_at(QK / 2);
    let mut isum = 0i32;
    for (j, ((&b, &x0), &x1)) in qs.iter().zip(x_lo).zip(x_hi).enumerate() {
        let h0 = ((qh >> j) & 1) << 4;
        let h1 = ((qh >> (j + QK / 2)) & 1) << 4;
        let q0 = (u32::from(b & 0x0f) | h0) as i32 - offset;
        let q1 = (u32::from(b >> 4) | h1) as i32 - offset;
        isum += q0 * i32::from(x0) + q1 * i32::from(x1);
    }
    isum
}

/// Q4_0 x Q8_0: `w = d_w * (q - 8)`.
pub(super) fn q4_0_q8_0(w: &[u8], a: &[u8]) -> f32 {
    sum_blocks(w, a, |wb: &BlockQ4_0, ab: &BlockQ8_0| {
        let isum = nibble_dot(&wb.qs, 8, &ab.qs);
        (wb.d() * ab.d()) * isum as f32
    })
}

/// Q4_1 x Q8_1: `w = d_w * q + m_w`.
pub(super) fn q4_1_q8_1(w: &[u8], a: &[u8]) -> f32 {
    sum_blocks(w, a, |wb: &BlockQ4_1, ab: &BlockQ8_1| {
        let isum = nibble_dot(&wb.qs, 0, &ab.qs);
        (wb.d() * ab.d()) * isum as f32 + wb.m() * ab.s()
    })
}

/// Q5_0 x Q8_0: `w = d_w * (q - 16)`.
pub(super) fn q5_0_q8_0(w: &[u8], a: &[u8]) -> f32 {
    sum_blocks(w, a, |wb: &BlockQ5_0, ab: &BlockQ8_0| {
        let isum = five_bit_dot(&wb.qs, wb.qh, 16, &ab.qs);
        (wb.d() * ab.d()) * isum as f32
    })
}

/// Q5_1 x Q8_1: `w = d_w * q + m_w`.
pub(super) fn q5_1_q8_1(w: &[u8], a: &[u8]) -> f32 {
    sum_blocks(w, a, |wb: &BlockQ5_1, ab: &BlockQ8_1| {
        let isum = five_bit_dot(&wb.qs, wb.qh, 0, &ab.qs);
        (wb.d() * ab.d()) * isum as f32 + wb.m() * ab.s()
    })
}

/// Q8_0 x Q8_0: `w = d_w * q`.
pub(super) fn q8_0_q8_0(w: &[u8], a: &[u8]) -> f32 {
    sum_blocks(w, a, |wb: &BlockQ8_0, ab: &BlockQ8_0| {
        let isum = idot(wb.qs.iter().map(|&q| i32::from(q)), &ab.qs);
        (wb.d() * ab.d()) * isum as f32
    })
}

/// MXFP4 x Q8_0: `w = KVALUES[q] * 2^(e - 128)`; `|isum| <= 32 * 12 * 128`.
pub(super) fn mxfp4_q8_0(w: &[u8], a: &[u8]) -> f32 {
    sum_blocks(w, a, |wb: &BlockMxfp4, ab: &BlockQ8_0| {
        let (x_lo, x_hi) = ab.qs.split_at(QK / 2);
        let mut isum = 0i32;
        for ((&b, &x0), &x1) in wb.qs.iter().zip(x_lo).zip(x_hi) {
            let q0 = i32::from(KVALUES[usize::from(b & 0x0f)]);
            let q1 = i32::from(KVALUES[usize::from(b >> 4)]);
            isum += q0 * i32::from(x0) + q1 * i32::from(x1);
        }
        (wb.d() * ab.d()) * isum as f32
    })
}
