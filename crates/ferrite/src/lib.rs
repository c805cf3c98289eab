//! ferrite: run transformer models on the CPU: text generation from GGUF
//! files, Hugging Face directories and llama2.c checkpoints, sentence
//! embeddings, and translation, bit-for-bit deterministic.
//!
//! Start with [`open`]: it takes a path or a short name (`smollm2`,
//! `minilm`, ... in the models directory, `FERRITE_MODELS`) and returns a
//! [`Model`] of the right kind.
//!
//! ```no_run
//! use ferrite::{GenerateOptions, SamplerOptions, Threads};
//!
//! let generator = ferrite::open("smollm2")?.into_generator()?;
//! let opts = GenerateOptions {
//!     max_tokens: Some(32),
//!     ..Default::default()
//! };
//! let text = generator.complete(
//!     "The capital of France is",
//!     &SamplerOptions::greedy(),
//!     &opts,
//!     Threads::all_cores(),
//! )?;
//! println!("{text}");
//! # Ok::<(), ferrite::Error>(())
//! ```
//!
//! Embeddings and translations:
//!
//! ```no_run
//! use ferrite::{EmbedOptions, Threads, TranslateOptions};
//!
//! let embedder = ferrite::open("minilm")?.into_embedder()?;
//! let vectors = embedder.embed(
//!     &["A man is playing a guitar.", "Someone plays music."],
//!     &EmbedOptions::default(),
//!     &Threads::all_cores(),
//! )?;
//! assert_eq!(vectors[0].vector.len(), embedder.dim());
//!
//! let translator = ferrite::open("path/to/opus-mt-en-de")?.into_translator()?;
//! let out = translator.translate(&["Hello, world."], &TranslateOptions::default())?;
//! println!("{}", out[0]);
//! # Ok::<(), ferrite::Error>(())
//! ```
//!
//! Errors are [`Error`]s; [`Error::kind`] says whether the input, the
//! model file or the system is at fault. Everything else public in this
//! crate serves the `ferrite` CLI and server; the items re-exported here
//! are the library's interface.
// Generation with a context size, and chat replies (used by python/).
mod chat_api;
pub mod convert;
pub mod embed;
pub mod error;
pub mod formats;
pub mod generate;
pub mod inspect;
pub mod layers;
pub mod model_path;
pub mod models;
pub mod open;
pub mod parallel;
pub mod quantize;
mod temp_output;
pub mod tensor;
pub mod tokenize;
pub mod translate;

pub use embed::{EmbedOptions, Embedder, Embedding, Pooling, Task};
pub use error::{Error, ErrorKind};
pub use generate::chat::Message;
pub use generate::sampler::SamplerOptions;
pub use generate::session::{GenerateOptions, StopReason};
pub use open::{open, open_with, Generator, Model, ModelKind, OpenOptions};
pub use parallel::Threads;
pub use translate::{TranslateOptions, Translator};

/// The README's Rust examples, compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct ReadmeExamples;

// Tensor data, caches and kernels read little-endian bytes in place.
#[cfg(target_endian = "big")]
compile_error!("ferrite supports little-endian targets only");
