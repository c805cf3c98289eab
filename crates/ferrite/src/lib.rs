//! ferrite: run transformer models on the CPU.
pub mod formats;
