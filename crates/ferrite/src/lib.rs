//! ferrite: run transformer models on the CPU: text generation from GGUF
//! files, Hugging Face directories and llama2.c checkpoints, sentence
//! embeddings, and translation, bit-for-bit deterministic.
//!
//! Start with [`open()`]: it takes a path or a short name (`smollm2`,
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
//! model file or the system is at fault. The items on this page are the
//! library's interface; the modules they come from are not (ferrite's own
//! CLI and server use them, and they change without notice).
// Generation with a context size, and chat replies (used by python/).
mod chat_api;
// The parts the library is built from. They are `pub` because ferrite's
// own CLI, server, Python binding and integration tests are separate
// crates that reach into them, and hidden from the documentation because
// they are not the library's interface: the re-exports below are.
#[doc(hidden)]
pub mod convert;
#[doc(hidden)]
pub mod embed;
mod error;
#[doc(hidden)]
pub mod formats;
#[doc(hidden)]
pub mod generate;
#[doc(hidden)]
pub mod inspect;
#[doc(hidden)]
pub mod layers;
#[doc(hidden)]
pub mod model_path;
#[doc(hidden)]
pub mod models;
#[doc(hidden)]
pub mod open;
#[doc(hidden)]
pub mod parallel;
#[doc(hidden)]
pub mod quantize;
mod temp_output;
mod tensor;
#[doc(hidden)]
pub mod tokenize;
#[doc(hidden)]
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
