//! ferrite: run transformer models on the CPU.
pub mod formats;
pub mod model_path;
