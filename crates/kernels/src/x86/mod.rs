//! x86_64 kernels: `#[target_feature]` functions only, handed out by
//! `crate::dispatch` after it has checked the CPU's features. Each set
//! mirrors the scalar reference in `crate::dot` bit for bit.

pub(crate) mod avx2;
pub(crate) mod avx512;
