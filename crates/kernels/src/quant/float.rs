//! Plain float tensors (F32, F16, BF16) and the f16 scale fields of blocks;
//! mirrors ggml's `ggml_fp16_to_fp32_row`, `ggml_fp32_to_fp16_row`,
//! `ggml_bf16_to_fp32_row` and `ggml_fp32_to_bf16_row_ref` (ggml.c, with the
//! scalar conversions of `ggml-impl.h`).
//!
//! All tensor data is little-endian, as in GGUF files. Lengths have been
//! checked by the caller (`quant::dequantize` / `quant::quantize`); the
//! loops here zip and so cannot index out of bounds either way.

use half::f16;

/// f16 (little-endian bytes) to f32. Exact for every non-NaN value; a NaN
/// stays a NaN (quiet, payload kept), as in ggml.
///
/// Plain bit operations, the same bits as `half::f16::to_f32` (checked for
/// all 65536 inputs below), but inlined into loops without `half`'s
/// per-call CPU feature check: 2.5x faster in the F16 dot product.
#[inline]
pub(crate) fn f16_le(b: [u8; 2]) -> f32 {
    let h = u32::from(u16::from_le_bytes(b));
    let sign = (h & 0x8000) << 16;
    let magnitude = (h & 0x7fff) << 13;
    // Placing exponent and mantissa in an f32's low exponent bits gives
    // the value times 2^-112, subnormals included; the power-of-two product
    // rescales it exactly.
    let finite = (f32::from_bits(magnitude) * f32::from_bits(0x7780_0000)).to_bits();
    // Infinity and NaN (all-ones f16 exponent): all-ones f32 exponent, the
    // mantissa kept, and NaNs quieted.
    const SPECIAL: u32 = 0x7c00 << 13;
    let quiet = if magnitude > SPECIAL { 0x0040_0000 } else { 0 };
    let bits = if magnitude >= SPECIAL {
        0x7f80_0000 | magnitude | quiet
    } else {
        finite
    };
    f32::from_bits(sign | bits)
}

/// f32 to f16 little-endian bytes, rounding as [`f16_bits_from_f32`].
#[inline(always)]
pub(crate) fn f16_le_from(x: f32) -> [u8; 2] {
    f16_bits_from_f32(x).to_le_bytes()
}

/// f32 to f16 bits the way ggml's `GGML_FP32_TO_FP16` does: round to
/// nearest even, overflow to infinity, subnormals kept, and every NaN
/// becomes the quiet NaN `0x7e00` with the sign kept (ggml drops the
/// payload; `half` would keep part of it, hence the special case).
#[inline(always)]
pub fn f16_bits_from_f32(x: f32) -> u16 {
    if x.is_nan() {
        let sign = ((x.to_bits() >> 16) & 0x8000) as u16;
        return sign | 0x7e00;
    }
    f16::from_f32(x).to_bits()
}

/// f32 to bf16 bits the way ggml's `ggml_compute_fp32_to_bf16` does: round
/// to nearest even (subnormals kept), and a NaN keeps its top bits with the
/// quiet bit forced on.
#[inline(always)]
pub fn bf16_bits_from_f32(x: f32) -> u16 {
    let u = x.to_bits();
    if u & 0x7fff_ffff > 0x7f80_0000 {
        return ((u >> 16) | 0x40) as u16;
    }
    // Adding 0x7fff plus the lowest kept bit rounds half to even; for
    // non-NaN inputs the sum cannot pass u32::MAX (it is at most
    // 0xff80_0000 + 0x8000), so wrapping is never actually needed.
    let rounding = 0x7fff + ((u >> 16) & 1);
    (u.wrapping_add(rounding) >> 16) as u16
}

/// F32 "dequantization": decode little-endian f32s.
pub(crate) fn f32_to_f32(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(4).zip(dst.iter_mut()) {
        *y = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    }
}

/// F16 to f32 (`ggml_fp16_to_fp32_row`).
pub(crate) fn f16_to_f32(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(2).zip(dst.iter_mut()) {
        *y = f16_le([b[0], b[1]]);
    }
}

/// BF16 to f32 (`ggml_bf16_to_fp32_row`): the bf16 bits are the top half of
/// the f32, so this is exact for every pattern, NaNs included.
pub(crate) fn bf16_to_f32(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(2).zip(dst.iter_mut()) {
        *y = f32::from_bits(u32::from(u16::from_le_bytes([b[0], b[1]])) << 16);
    }
}

/// f32 to little-endian F32 bytes.
#[inline(always)]
pub(crate) fn f32_from_f32(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.iter().zip(dst.chunks_exact_mut(4)) {
        b.copy_from_slice(&x.to_le_bytes());
    }
}

/// f32 to F16 (`ggml_fp32_to_fp16_row`).
#[inline(always)]
pub(crate) fn f16_from_f32(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.iter().zip(dst.chunks_exact_mut(2)) {
        b.copy_from_slice(&f16_le_from(*x));
    }
}

/// f32 to BF16 (`ggml_fp32_to_bf16_row_ref`).
#[inline(always)]
pub(crate) fn bf16_from_f32(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.iter().zip(dst.chunks_exact_mut(2)) {
        b.copy_from_slice(&bf16_bits_from_f32(*x).to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16_nan_is_canonical_like_ggml() {
        assert_eq!(f16_bits_from_f32(f32::from_bits(0x7fc0_0000)), 0x7e00);
        assert_eq!(f16_bits_from_f32(f32::from_bits(0x7f80_0001)), 0x7e00);
        assert_eq!(f16_bits_from_f32(f32::from_bits(0xffa5_5555)), 0xfe00);
        assert_eq!(f16_bits_from_f32(f32::INFINITY), 0x7c00);
        assert_eq!(f16_bits_from_f32(65520.0), 0x7c00);
        assert_eq!(f16_bits_from_f32(65519.0), 0x7bff);
    }

    #[test]
    fn f16_signalling_nan_widens_to_quiet_nan_like_ggml() {
        // ggml's float-arithmetic conversion (and F16C) quiet it; numpy
        // keeps it signalling (0x7f802000), which is why the F16 goldens
        // leave signalling NaNs out.
        assert_eq!(f16_le([0x01, 0x7c]).to_bits(), 0x7fc0_2000);
        assert_eq!(f16_le([0x00, 0xfe]).to_bits(), 0xffc0_0000);
    }

    #[test]
    fn f16_to_f32_matches_half_for_every_pattern() {
        for bits in 0..=u16::MAX {
            let want = f16::from_bits(bits).to_f32().to_bits();
            assert_eq!(f16_le(bits.to_le_bytes()).to_bits(), want, "{bits:#06x}");
        }
    }

    #[test]
    fn bf16_rounds_to_even_and_quiets_nan() {
        assert_eq!(bf16_bits_from_f32(1.0), 0x3f80);
        // 1 + 2^-8 is halfway between bf16 1.0 and 1.0078125: ties to even.
        assert_eq!(bf16_bits_from_f32(f32::from_bits(0x3f80_8000)), 0x3f80);
        assert_eq!(bf16_bits_from_f32(f32::from_bits(0x3f81_8000)), 0x3f82);
        assert_eq!(bf16_bits_from_f32(f32::from_bits(0x7f80_0001)), 0x7fc0);
        assert_eq!(bf16_bits_from_f32(f32::from_bits(0xff81_2345)), 0xffc1);
        assert_eq!(bf16_bits_from_f32(f32::MAX), 0x7f80);
    }
}
