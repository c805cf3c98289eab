//! Model file formats: GGUF (read and write), safetensors directories, and
//! the in-memory GGUF files made from llama2.c checkpoints and Hugging Face
//! decoder directories.

mod error;
pub mod gguf;
pub mod hf_decoder;
pub mod llama2c;
pub mod names;
pub mod safetensors;

pub use error::FormatError;
