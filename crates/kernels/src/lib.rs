//! ferrite's numeric kernels: tensor block formats and the arithmetic on them.
//!
//! This crate does no I/O and knows nothing about models. Every format has a
//! plain scalar reference implementation that is always compiled; faster
//! (SIMD) versions, picked at run time by [`dispatch`], give the same bits
//! and are tested against it.

#[cfg(target_arch = "aarch64")]
mod aarch64;
pub mod attend;
pub mod attend_f32;
pub mod attend_tile;
pub mod columns;
pub mod disjoint;
pub mod dispatch;
pub mod dot;
pub mod gemm;
pub mod gemm_bf16;
pub mod gemm_f16;
pub mod gemm_w8a16;
pub mod math;
pub mod matmul;
pub mod quant;
pub mod table;
#[cfg(target_arch = "x86_64")]
mod x86;

pub use quant::GgmlType;

/// A xorshift64 generator for the unit tests' random inputs: the same
/// numbers on every run and machine.
#[cfg(test)]
pub(crate) fn xorshift(mut seed: u64) -> impl FnMut() -> u64 {
    move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    }
}
