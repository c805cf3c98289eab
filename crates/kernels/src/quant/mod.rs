//! Block formats of ggml tensors: the type table and one module per format.
//!
//! A ggml tensor row is a sequence of fixed-size *blocks*; each block packs
//! `block_size()` values into `type_size()` bytes (scales plus quantized
//! integers). The layouts mirror ggml's `ggml-common.h` and the reference
//! (de)quantizers in ggml's `ggml-quants.c`; every module here is plain scalar
//! code that is always compiled and serves as the reference for SIMD kernels.

use std::fmt;

mod float;
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
pub use q2_k::BlockQ2K;
pub use q3_k::BlockQ3K;
pub use q4_0::BlockQ4_0;
pub use q4_1::BlockQ4_1;
pub use q4_k::BlockQ4K;
pub use q5_0::BlockQ5_0;
pub use q5_1::BlockQ5_1;
pub use q5_k::BlockQ5K;
pub use q6_k::BlockQ6K;
pub use q8_0::BlockQ8_0;
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
        if n % bs != 0 {
            return None;
        }
        (n / bs).checked_mul(self.type_size() as u64)
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
