//! ferrite: run transformer models on the CPU.
pub mod formats;
pub mod inspect;
pub mod model_path;
