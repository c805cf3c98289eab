//! Block formats of ggml tensors: the type table and one module per format.
//!
//! A ggml tensor row is a sequence of fixed-size *blocks*; each block packs
//! `block_size()` values into `type_size()` bytes (scales plus quantized
//! integers). The layouts mirror ggml's `ggml-common.h` and the reference
//! (de)quantizers in ggml's `ggml-quants.c`; every module here is plain scalar
//! code that is always compiled and serves as the reference for SIMD kernels.
//! Upstream: <https://github.com/ggml-org/llama.cpp/tree/master/ggml/src>.
//!
//! [`dequantize`] and [`quantize`] are the entry points; the block structs
//! can also be viewed in place over file bytes with [`as_blocks`].

use std::fmt;

pub(crate) mod float;
pub mod iq4;
mod ksearch;
pub mod mxfp4;
pub mod q2_k;
pub mod q3_k;
pub mod q4_0;
pub mod q4_1;
pub mod q4_k;
pub mod q5_0;
pub mod q5_1;
pub mod q5_k;
pub mod q6_k;
pub mod q8_0;
pub mod q8_1;
pub mod q8_k;

pub use float::{bf16_bits_from_f32, f16_bits_from_f32};
pub use iq4::{BlockIq4Nl, BlockIq4Xs};
pub use mxfp4::BlockMxfp4;
pub use q2_k::BlockQ2K;
pub use q3_k::BlockQ3K;
pub use q4_0::BlockQ4_0;
pub use q4_1::BlockQ4_1;
pub use q4_k::BlockQ4K;
pub use q5_0::BlockQ5_0;
pub use q5_1::BlockQ5_1;
pub use q5_k::BlockQ5K;
pub use q6_k::BlockQ6K;
pub use q8_0::{act_panels, quantize_acts_row, ActBlockFacts, BlockQ8_0, ACT_PANEL_ROWS};
pub use q8_1::BlockQ8_1;
pub use q8_k::BlockQ8K;

/// Number of values in a "legacy" quantization block (Q4_0 ... Q8_1).
pub const QK: usize = 32;
/// Number of values in a k-quant super-block (Q2_K ... Q8_K).
pub const QK_K: usize = 256;

/// A ggml tensor type, numbered as in the GGUF file format (`ggml_type`).
///
/// Every type that can appear in a GGUF file is listed, so that headers of
/// files using formats we cannot compute with yet still parse and `inspect`.
/// Ids that ggml has retired (4, 5, 31-33, 36-38) are not types.
///
/// Note: Q8_1 is 36 bytes (`sizeof(block_q8_1)` in ggml: f16 d, f16 s,
/// 32 x i8); the `gguf` Python package's size table says 40, a leftover of
/// an older layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u32)]
pub enum GgmlType {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q4_1 = 3,
    Q5_0 = 6,
    Q5_1 = 7,
    Q8_0 = 8,
    Q8_1 = 9,
    Q2K = 10,
    Q3K = 11,
    Q4K = 12,
    Q5K = 13,
    Q6K = 14,
    Q8K = 15,
    Iq2Xxs = 16,
    Iq2Xs = 17,
    Iq3Xxs = 18,
    Iq1S = 19,
    Iq4Nl = 20,
    Iq3S = 21,
    Iq2S = 22,
    Iq4Xs = 23,
    I8 = 24,
    I16 = 25,
    I32 = 26,
    I64 = 27,
    F64 = 28,
    Iq1M = 29,
    Bf16 = 30,
    Tq1_0 = 34,
    Tq2_0 = 35,
    Mxfp4 = 39,
    Nvfp4 = 40,
    Q1_0 = 41,
}

/// Every type, in id order.
pub const ALL_TYPES: [GgmlType; 34] = {
    use GgmlType::*;
    [
        F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, Q2K, Q3K, Q4K, Q5K, Q6K, Q8K, Iq2Xxs, Iq2Xs,
        Iq3Xxs, Iq1S, Iq4Nl, Iq3S, Iq2S, Iq4Xs, I8, I16, I32, I64, F64, Iq1M, Bf16, Tq1_0, Tq2_0,
        Mxfp4, Nvfp4, Q1_0,
    ]
};

impl GgmlType {
    /// The type with GGUF id `id`, or `None` for an unknown or retired id.
    pub fn from_id(id: u32) -> Option<GgmlType> {
        ALL_TYPES.iter().copied().find(|t| t.id() == id)
    }

    /// The type spelled `name` the way ggml spells it (`"Q4_K"`, `"BF16"`).
    pub fn from_name(name: &str) -> Option<GgmlType> {
        ALL_TYPES
            .iter()
            .copied()
            .find(|t| t.name().eq_ignore_ascii_case(name))
    }

    /// The GGUF type id.
    pub fn id(self) -> u32 {
        self as u32
    }

    /// The name as ggml spells it (`ggml_type_name`), e.g. `Q4_K`, `BF16`.
    pub fn name(self) -> &'static str {
        self.traits().0
    }

    /// Number of values per block.
    pub fn block_size(self) -> usize {
        self.traits().1
    }

    /// Number of bytes per block.
    pub fn type_size(self) -> usize {
        self.traits().2
    }

    /// Bytes taken by `n` values, or `None` if `n` is not a whole number of
    /// blocks or the size overflows.
    pub fn bytes_for(self, n: u64) -> Option<u64> {
        let bs = self.block_size() as u64;
        if !n.is_multiple_of(bs) {
            return None;
        }
        (n / bs).checked_mul(self.type_size() as u64)
    }

    /// Whether [`dequantize`] supports this type.
    pub fn can_dequantize(self) -> bool {
        use GgmlType::*;
        matches!(
            self,
            F32 | F16
                | Bf16
                | Q4_0
                | Q4_1
                | Q5_0
                | Q5_1
                | Q8_0
                | Q8_1
                | Q2K
                | Q3K
                | Q4K
                | Q5K
                | Q6K
                | Q8K
                | Mxfp4
                | Iq4Nl
                | Iq4Xs
        )
    }

    /// Whether [`quantize`] supports this type: the same types as
    /// [`dequantize`] except the i-quants, which are only read.
    pub fn can_quantize(self) -> bool {
        self.can_dequantize() && !matches!(self, GgmlType::Iq4Nl | GgmlType::Iq4Xs)
    }

    /// (name, values per block, bytes per block), from ggml's type traits.
    fn traits(self) -> (&'static str, usize, usize) {
        use GgmlType::*;
        match self {
            F32 => ("F32", 1, 4),
            F16 => ("F16", 1, 2),
            Q4_0 => ("Q4_0", QK, 2 + QK / 2),
            Q4_1 => ("Q4_1", QK, 4 + QK / 2),
            Q5_0 => ("Q5_0", QK, 2 + 4 + QK / 2),
            Q5_1 => ("Q5_1", QK, 4 + 4 + QK / 2),
            Q8_0 => ("Q8_0", QK, 2 + QK),
            Q8_1 => ("Q8_1", QK, 4 + QK),
            Q2K => ("Q2_K", QK_K, QK_K / 16 + QK_K / 4 + 4),
            Q3K => ("Q3_K", QK_K, QK_K / 8 + QK_K / 4 + 12 + 2),
            Q4K => ("Q4_K", QK_K, 4 + 12 + QK_K / 2),
            Q5K => ("Q5_K", QK_K, 4 + 12 + QK_K / 8 + QK_K / 2),
            Q6K => ("Q6_K", QK_K, QK_K / 2 + QK_K / 4 + QK_K / 16 + 2),
            Q8K => ("Q8_K", QK_K, 4 + QK_K + 2 * QK_K / 16),
            Iq2Xxs => ("IQ2_XXS", QK_K, 2 + QK_K / 4),
            Iq2Xs => ("IQ2_XS", QK_K, 2 + QK_K / 4 + QK_K / 32),
            Iq3Xxs => ("IQ3_XXS", QK_K, 2 + 3 * QK_K / 8),
            Iq1S => ("IQ1_S", QK_K, 2 + QK_K / 8 + QK_K / 16),
            Iq4Nl => ("IQ4_NL", QK, 2 + QK / 2),
            Iq3S => ("IQ3_S", QK_K, 2 + QK_K / 4 + QK_K / 8 + QK_K / 32 + 4),
            Iq2S => ("IQ2_S", QK_K, 2 + QK_K / 4 + QK_K / 16),
            Iq4Xs => ("IQ4_XS", QK_K, 2 + 2 + QK_K / 64 + QK_K / 2),
            I8 => ("I8", 1, 1),
            I16 => ("I16", 1, 2),
            I32 => ("I32", 1, 4),
            I64 => ("I64", 1, 8),
            F64 => ("F64", 1, 8),
            Iq1M => ("IQ1_M", QK_K, QK_K / 8 + QK_K / 16 + QK_K / 32),
            Bf16 => ("BF16", 1, 2),
            Tq1_0 => ("TQ1_0", QK_K, 2 + (QK_K - 4 * QK_K / 64) / 5 + QK_K / 64),
            Tq2_0 => ("TQ2_0", QK_K, 2 + QK_K / 4),
            Mxfp4 => ("MXFP4", QK, 1 + QK / 2),
            Nvfp4 => ("NVFP4", 64, 4 + 32),
            Q1_0 => ("Q1_0", 128, 2 + 128 / 8),
        }
    }
}

impl fmt::Display for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Which direction of conversion an error is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuantOp {
    Dequantize,
    Quantize,
}

/// Why a (de)quantization request was refused. Nothing here panics on
/// malformed input; every length problem ends up as one of these.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuantError {
    /// This conversion is not implemented for the type.
    Unsupported { ty: GgmlType, op: QuantOp },
    /// The number of values is not a whole number of blocks.
    PartialBlock { ty: GgmlType, values: usize },
    /// The byte buffer does not hold exactly the blocks for the values
    /// (`expected` is `None` when that size does not even fit in `usize`).
    ByteLength {
        ty: GgmlType,
        values: usize,
        expected: Option<usize>,
        actual: usize,
    },
}

impl fmt::Display for QuantError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            QuantError::Unsupported { ty, op } => {
                let what = match op {
                    QuantOp::Dequantize => "dequantizing",
                    QuantOp::Quantize => "quantizing",
                };
                write!(f, "{what} {ty} is not supported")
            }
            QuantError::PartialBlock { ty, values } => write!(
                f,
                "{values} values are not a whole number of {ty} blocks of {}",
                ty.block_size()
            ),
            QuantError::ByteLength {
                ty,
                values,
                expected: Some(e),
                actual,
            } => {
                write!(f, "{values} {ty} values take {e} bytes, got {actual}")
            }
            QuantError::ByteLength {
                ty,
                values,
                expected: None,
                actual,
            } => write!(
                f,
                "{values} {ty} values take more bytes than fit in memory, got {actual}"
            ),
        }
    }
}

impl std::error::Error for QuantError {}

/// A block struct that may be viewed in place over any bytes.
///
/// # Safety
///
/// Implementors must be `#[repr(C)]` structs whose fields are all `u8` or
/// `i8` arrays (or structs of them): alignment 1, no padding, and every bit
/// pattern a valid value. [`as_blocks`] relies on this.
pub unsafe trait Block: Copy + 'static {}

/// Views `bytes` as a slice of blocks, without copying; `None` unless the
/// length is a whole number of blocks. Works at any address (alignment 1).
pub fn as_blocks<B: Block>(bytes: &[u8]) -> Option<&[B]> {
    const { assert!(std::mem::align_of::<B>() == 1 && std::mem::size_of::<B>() > 0) };
    let size = std::mem::size_of::<B>();
    if !bytes.len().is_multiple_of(size) {
        return None;
    }
    // SAFETY: `B: Block` guarantees alignment 1 (also asserted above at
    // compile time), no padding and no invalid bit patterns, so any
    // initialized bytes are valid `B`s at any address; the length is a
    // whole number of blocks, so the slice covers exactly `bytes`, and the
    // returned borrow keeps `bytes` borrowed for as long as it lives.
    Some(unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast::<B>(), bytes.len() / size) })
}

/// Mutable version of [`as_blocks`].
pub fn as_blocks_mut<B: Block>(bytes: &mut [u8]) -> Option<&mut [B]> {
    const { assert!(std::mem::align_of::<B>() == 1 && std::mem::size_of::<B>() > 0) };
    let size = std::mem::size_of::<B>();
    if !bytes.len().is_multiple_of(size) {
        return None;
    }
    // SAFETY: as in `as_blocks`; in addition every bit pattern written
    // through a `B` is a valid `u8`, and the exclusive borrow of `bytes` is
    // moved into the result, so there is no aliasing.
    Some(unsafe {
        std::slice::from_raw_parts_mut(bytes.as_mut_ptr().cast::<B>(), bytes.len() / size)
    })
}

/// The number of bytes `values` values of type `t` take, checking that they
/// are whole blocks.
fn checked_bytes(t: GgmlType, values: usize, actual: usize) -> Result<usize, QuantError> {
    let bs = t.block_size();
    if !values.is_multiple_of(bs) {
        return Err(QuantError::PartialBlock { ty: t, values });
    }
    let expected = (values / bs).checked_mul(t.type_size());
    match expected {
        Some(e) if e == actual => Ok(e),
        _ => Err(QuantError::ByteLength {
            ty: t,
            values,
            expected,
            actual,
        }),
    }
}

/// Dequantizes `dst.len()` values of type `t` from `src`, which must be
/// exactly the bytes of those values (whole blocks). Bit-exact with ggml's
/// `dequantize_row_*` / `ggml_*_to_fp32_row` (Q8_1, for which ggml has no
/// dequantizer, as `q * d` like Q8_0).
pub fn dequantize(t: GgmlType, src: &[u8], dst: &mut [f32]) -> Result<(), QuantError> {
    use GgmlType::*;
    if !t.can_dequantize() {
        return Err(QuantError::Unsupported {
            ty: t,
            op: QuantOp::Dequantize,
        });
    }
    checked_bytes(t, dst.len(), src.len())?;
    match t {
        F32 => float::f32_to_f32(src, dst),
        F16 => float::f16_to_f32(src, dst),
        Bf16 => float::bf16_to_f32(src, dst),
        Q4_0 => blocks_to_f32(src, dst, BlockQ4_0::to_f32),
        Q4_1 => blocks_to_f32(src, dst, BlockQ4_1::to_f32),
        Q5_0 => blocks_to_f32(src, dst, BlockQ5_0::to_f32),
        Q5_1 => blocks_to_f32(src, dst, BlockQ5_1::to_f32),
        Q8_0 => blocks_to_f32(src, dst, BlockQ8_0::to_f32),
        Q8_1 => blocks_to_f32(src, dst, BlockQ8_1::to_f32),
        Q2K => blocks_to_f32(src, dst, BlockQ2K::to_f32),
        Q3K => blocks_to_f32(src, dst, BlockQ3K::to_f32),
        Q4K => blocks_to_f32(src, dst, BlockQ4K::to_f32),
        Q5K => blocks_to_f32(src, dst, BlockQ5K::to_f32),
        Q6K => blocks_to_f32(src, dst, BlockQ6K::to_f32),
        Q8K => blocks_to_f32(src, dst, BlockQ8K::to_f32),
        Mxfp4 => blocks_to_f32(src, dst, BlockMxfp4::to_f32),
        Iq4Nl => blocks_to_f32(src, dst, BlockIq4Nl::to_f32),
        Iq4Xs => blocks_to_f32(src, dst, BlockIq4Xs::to_f32),
        _ => {
            return Err(QuantError::Unsupported {
                ty: t,
                op: QuantOp::Dequantize,
            })
        }
    }
    Ok(())
}

/// Quantizes `src` to type `t` into `dst`, which must be exactly the bytes
/// of `src.len()` values (whole blocks). Byte-exact with ggml's
/// `quantize_row_*_ref` / `ggml_fp32_to_*_row` (for the k-quants, the
/// reference quantizers that `llama-quantize` uses without an importance
/// matrix).
pub fn quantize(t: GgmlType, src: &[f32], dst: &mut [u8]) -> Result<(), QuantError> {
    if !t.can_quantize() {
        return Err(QuantError::Unsupported {
            ty: t,
            op: QuantOp::Quantize,
        });
    }
    checked_bytes(t, src.len(), dst.len())?;
    (crate::table::active().quantize_row.f)(t, src, dst);
    Ok(())
}

/// The scalar reference of the active set's `quantize_row` entry: the body
/// of [`quantize`] once the type and lengths are checked.
pub(crate) fn quantize_row_scalar(t: GgmlType, src: &[f32], dst: &mut [u8]) {
    quantize_row_inline(t, src, dst)
}

/// [`quantize`]'s body, `#[inline(always)]` with every block quantizer it
/// calls, so that a SIMD set gets all of it compiled with its features by
/// wrapping it in a `#[target_feature]` function (`x86::avx2::table`): the
/// same source, exactly rounded IEEE operations in the same order (Rust
/// never fuses them), so the same bits. `t` is one `can_quantize` accepts
/// and `dst` holds exactly `src.len()` values (checked by the caller).
#[inline(always)]
pub(crate) fn quantize_row_inline(t: GgmlType, src: &[f32], dst: &mut [u8]) {
    use GgmlType::*;
    match t {
        F32 => float::f32_from_f32(src, dst),
        F16 => float::f16_from_f32(src, dst),
        Bf16 => float::bf16_from_f32(src, dst),
        Q4_0 => blocks_from_f32(src, dst, BlockQ4_0::from_f32),
        Q4_1 => blocks_from_f32(src, dst, BlockQ4_1::from_f32),
        Q5_0 => blocks_from_f32(src, dst, BlockQ5_0::from_f32),
        Q5_1 => blocks_from_f32(src, dst, BlockQ5_1::from_f32),
        Q8_0 => blocks_from_f32(src, dst, BlockQ8_0::from_f32),
        Q8_1 => blocks_from_f32(src, dst, BlockQ8_1::from_f32),
        Q2K => blocks_from_f32(src, dst, BlockQ2K::from_f32),
        Q3K => blocks_from_f32(src, dst, BlockQ3K::from_f32),
        Q4K => blocks_from_f32(src, dst, BlockQ4K::from_f32),
        Q5K => blocks_from_f32(src, dst, BlockQ5K::from_f32),
        Q6K => blocks_from_f32(src, dst, BlockQ6K::from_f32),
        Q8K => blocks_from_f32(src, dst, BlockQ8K::from_f32),
        Mxfp4 => blocks_from_f32(src, dst, BlockMxfp4::from_f32),
        // `quantize` refused the others.
        _ => {}
    }
}

/// Runs a block's `to_f32` over every block of `src`. The caller has checked
/// that `src` holds exactly `dst.len() / N` blocks.
fn blocks_to_f32<B: Block, const N: usize>(src: &[u8], dst: &mut [f32], f: fn(&B, &mut [f32; N])) {
    let blocks = as_blocks::<B>(src).unwrap_or_default();
    debug_assert_eq!(blocks.len() * N, dst.len());
    for (b, out) in blocks.iter().zip(dst.chunks_exact_mut(N)) {
        // `chunks_exact_mut(N)` only yields chunks of exactly N values.
        let out: &mut [f32; N] = out.try_into().expect("chunk of N values");
        f(b, out);
    }
}

/// Runs a block's `from_f32` over every block of `src`. The caller has
/// checked that `dst` holds exactly `src.len() / N` blocks.
#[inline(always)]
fn blocks_from_f32<B: Block, const N: usize>(src: &[f32], dst: &mut [u8], f: fn(&[f32; N]) -> B) {
    let blocks = as_blocks_mut::<B>(dst).unwrap_or_default();
    debug_assert_eq!(blocks.len() * N, src.len());
    for (b, x) in blocks.iter_mut().zip(src.chunks_exact(N)) {
        // `chunks_exact(N)` only yields chunks of exactly N values.
        let x: &[f32; N] = x.try_into().expect("chunk of N values");
        *b = f(x);
    }
}

/// The largest magnitude of `x` and the first value that has it, as
/// ggml's `if (amax < fabsf(v)) { amax = fabsf(v); max = v; }` loop finds
/// them from zero (NaNs never taken; `(0, 0)` if every value is zero or
/// NaN), but in two passes that vectorize: the maxima of eight lanes
/// (with the same comparison), then the first value of that magnitude.
#[inline(always)]
pub(crate) fn first_largest_magnitude(x: &[f32; QK]) -> (f32, f32) {
    let mut lanes = [0f32; 8];
    for c in x.chunks_exact(8) {
        for (m, &v) in lanes.iter_mut().zip(c) {
            if *m < v.abs() {
                *m = v.abs();
            }
        }
    }
    let mut amax = 0.0f32;
    for m in lanes {
        if amax < m {
            amax = m;
        }
    }
    if amax == 0.0 {
        return (0.0, 0.0);
    }
    let max = x.iter().copied().find(|v| v.abs() == amax).unwrap_or(0.0);
    (amax, max)
}

/// `v.round()` (halves away from zero, C's `roundf`), bit for bit, with no
/// call into libm for `|v| < 2^23`: there `|v| + 0.5` is exact in f64, and
/// truncating it is the floor. (Without SSE4.1 in the baseline target,
/// `f32::round` is a libm call, a measurable cost when quantizing
/// activations.)
#[inline(always)]
pub(crate) fn round_half_away(v: f32) -> f32 {
    if v.abs() < 8_388_608.0 {
        ((f64::from(v.abs()) + 0.5) as i32 as f32).copysign(v)
    } else {
        v.round()
    }
}

/// `v.round_ties_even()` for `|v| < 2^22` by ggml's `nearest_int` trick
/// (adding 1.5 * 2^23 leaves the rounded integer in the low bits; exact,
/// ties to even), `round_ties_even` itself otherwise (and for NaN). The
/// sign of a zero result may differ; callers convert to an integer.
#[inline(always)]
pub(crate) fn round_ties_even(v: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0;
    if v.abs() < 4_194_304.0 {
        (v + MAGIC) - MAGIC
    } else {
        v.round_ties_even()
    }
}

#[cfg(test)]
mod rounding_tests {
    use super::*;

    #[test]
    fn fast_rounding_matches_std() {
        let mut bits = 0u32;
        let mut checked = 0;
        // Every f32 in steps (all exponents), plus every value near the
        // halves up to 300.
        while bits < u32::MAX - 4093 {
            let v = f32::from_bits(bits);
            assert_eq!(round_half_away(v).to_bits(), v.round().to_bits(), "{v:e}");
            let want = v.round_ties_even();
            let got = round_ties_even(v);
            assert!(got == want || (got.is_nan() && want.is_nan()), "{v:e}");
            bits += 4093;
            checked += 1;
        }
        for i in -600..=600 {
            let half = i as f32 * 0.5;
            let b = half.to_bits();
            for v in [b, b.wrapping_add(1), b.wrapping_sub(1)].map(f32::from_bits) {
                assert_eq!(round_half_away(v).to_bits(), v.round().to_bits(), "{v:e}");
                let (got, want) = (round_ties_even(v), v.round_ties_even());
                assert!(got == want || (got.is_nan() && want.is_nan()), "{v:e}");
            }
        }
        assert!(checked > 1_000_000);
    }
}

#[cfg(test)]
mod quantize_row_tests {
    use super::*;
    use crate::dispatch::KernelSet;

    /// ggml's loop, as the quantizers had it.
    fn first_largest_loop(x: &[f32; QK]) -> (f32, f32) {
        let (mut amax, mut max) = (0.0f32, 0.0f32);
        for &v in x {
            if amax < v.abs() {
                amax = v.abs();
                max = v;
            }
        }
        (amax, max)
    }

    /// Rows of `n` values: random magnitudes from subnormal to near
    /// f32::MAX, ties, zeros of both signs, infinities and NaNs.
    fn rows(n: usize, seed: u64) -> Vec<Vec<f32>> {
        let mut next = crate::xorshift(seed);
        let mut out = Vec::new();
        for case in 0..60 {
            let scale = [1e-40f32, 1e-30, 1e-3, 1.0, 7.0, 1e6, 1e30, 3e38][case % 8];
            let mut x: Vec<f32> = (0..n)
                .map(|_| ((next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0) * scale)
                .collect();
            match case % 10 {
                // Ties of the largest magnitude, both signs.
                1 => {
                    for i in (0..n).step_by(7) {
                        x[i] = if i % 2 == 0 { 2.5 } else { -2.5 };
                    }
                }
                2 => x.fill(0.0),
                3 => x.iter_mut().for_each(|v| *v = -0.0),
                4 => x[n / 3] = f32::NAN,
                5 => x[n - 1] = f32::INFINITY,
                6 => x.iter_mut().step_by(5).for_each(|v| *v = -f32::NAN),
                7 => x.iter_mut().for_each(|v| *v = v.abs() + 1.0),
                8 => x
                    .iter_mut()
                    .enumerate()
                    .for_each(|(i, v)| *v = (i % 16) as f32 - 7.5),
                _ => {}
            }
            out.push(x);
        }
        out
    }

    #[test]
    fn first_largest_magnitude_matches_the_loop() {
        for x in rows(QK * 40, 11) {
            for b in x.chunks_exact(QK) {
                let b: &[f32; QK] = b.try_into().unwrap();
                let (a, m) = first_largest_loop(b);
                let (a2, m2) = first_largest_magnitude(b);
                assert_eq!(
                    (a.to_bits(), m.to_bits()),
                    (a2.to_bits(), m2.to_bits()),
                    "{b:?}"
                );
            }
        }
    }

    /// Every kernel set's `quantize_row` writes the scalar reference's
    /// bytes, for every type, on one block, several blocks and an odd
    /// count of blocks, with extreme values.
    #[test]
    fn every_set_quantizes_rows_as_the_scalar_reference() {
        use GgmlType::*;
        let types = [
            F32, F16, Bf16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, Q2K, Q3K, Q4K, Q5K, Q6K, Q8K, Mxfp4,
        ];
        for set in KernelSet::ALL {
            let Some(table) = set.table() else {
                eprintln!("SKIPPED {}: not supported by this CPU", set.name());
                continue;
            };
            for t in types {
                for blocks in [1usize, 3, 7, 9] {
                    let n = t.block_size() * blocks;
                    for (case, x) in rows(n, 5 + blocks as u64).iter().enumerate() {
                        let len = t.bytes_for(n as u64).unwrap() as usize;
                        let (mut want, mut got) = (vec![0u8; len], vec![0u8; len]);
                        quantize_row_scalar(t, x, &mut want);
                        (table.quantize_row.f)(t, x, &mut got);
                        assert!(
                            want == got,
                            "{} {t} {blocks} blocks, case {case}",
                            set.name()
                        );
                    }
                }
            }
        }
    }
}
