//! ferrite's numeric kernels: tensor block formats and the arithmetic on them.
//!
//! This crate does no I/O and knows nothing about models. Every format has a
//! plain scalar reference implementation that is always compiled; faster
//! (SIMD) versions, when they exist, are tested against it.

pub mod dot;
pub mod quant;

pub use quant::GgmlType;
