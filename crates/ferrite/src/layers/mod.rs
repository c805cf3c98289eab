//! Building blocks shared by every architecture: normalisation, rotary
//! positions, relative-position buckets, attention over a KV cache,
//! activations.

pub mod activation;
pub mod attention;
pub mod moe;
pub mod norm;
pub mod position;
pub mod rope;
