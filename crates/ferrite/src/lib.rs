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
//! model file or the system is at fault.
//!
//! Beyond these one-shot calls, [`serving`] has what a program serving
//! many requests at once needs (batched decode steps, the paged KV cache,
//! per-sequence sampling and JSON-schema constraints, chat templates) and
//! [`tools`] works on model files (quantize, convert, inspect, tokenize).
//! ferrite's own CLI, server and Python package use nothing else.
#![warn(missing_docs)]

// Generation with a context size, and chat replies (used by python/).
mod chat_api;
mod dump;
mod error;
mod temp_output;
mod tensor;

/// Declares the modules the library is built from: `pub(crate)`, or `pub`
/// (hidden from the documentation) with the cargo feature `internals`,
/// which the library's own integration tests, examples and the fuzz
/// target turn on to test the parts one by one. The interface is the
/// items re-exported below and the modules [`serving`] and [`tools`];
/// ferrite's CLI, server and Python package use only those (they do not
/// turn the feature on, so their build fails if they reach further).
macro_rules! internal_modules {
    ($($name:ident),* $(,)?) => {
        $(
            #[cfg(feature = "internals")]
            #[doc(hidden)]
            pub mod $name;
            #[cfg(not(feature = "internals"))]
            pub(crate) mod $name;
        )*
    };
}

internal_modules!(
    convert, embed, evaluate, formats, generate, inspect, kv_cache, layers, model_path, models,
    open, parallel, quantize, tokenize, translate,
);

pub mod serving;
pub mod tools;

pub use dump::TensorDump;
pub use embed::{EmbedOptions, Embedder, Embedding, Pooling, Products, Task};
pub use error::{Error, ErrorKind};
pub use generate::chat::Message;
pub use generate::json::Grammar;
pub use generate::sampler::{random_seed, SamplerOptions};
pub use generate::session::{GenerateOptions, StopReason};
pub use generate::speculative::Speculate;
pub use open::{open, open_with, Generator, Model, ModelKind, OpenOptions, WeightFormat};
pub use parallel::{available_cores, Threads};
pub use quantize::FileType;
pub use translate::{TranslateOptions, Translator, MAX_BEAMS};

/// The README's Rust examples, compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct ReadmeExamples;

// Tensor data, caches and kernels read little-endian bytes in place.
#[cfg(target_endian = "big")]
compile_error!("ferrite supports little-endian targets only");
