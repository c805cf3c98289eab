//! ferrite: run transformer models on the CPU.
pub mod embed;
pub mod error;
pub mod formats;
pub mod generate;
pub mod inspect;
pub mod layers;
pub mod model_path;
pub mod models;
pub mod parallel;
pub mod tensor;
pub mod tokenize;
pub mod translate;

pub use error::Error;

// Tensor data, caches and kernels read little-endian bytes in place.
#[cfg(target_endian = "big")]
compile_error!("ferrite supports little-endian targets only");
