//! Model file formats: GGUF (read and write) and safetensors directories.

mod error;
pub mod gguf;
pub mod llama2c;
pub mod names;
pub mod safetensors;

pub use error::FormatError;
