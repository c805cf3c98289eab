//! Model files as files: what the `ferrite` command's `quantize`,
//! `convert`, `inspect` and `tokenize` do, and how a name or path is
//! resolved to a model before it is loaded.
//!
//! - Finding a model: [`resolve`] turns a short name ([`KNOWN_MODELS`],
//!   looked up in the models directory `FERRITE_MODELS`) or a path into a
//!   path; [`find`] says what is there ([`Found`]) without loading the
//!   weights, by the same rules as [`open`](crate::open);
//!   [`open_generator`] loads a decoder.
//! - [`quantize_file`] writes a GGUF file's weights in another
//!   [`FileType`](crate::FileType) ([`FILE_TYPES`] lists them by name).
//! - [`perplexity`] and [`kl_divergence`] score a decoder on a text as
//!   `llama-perplexity` does ([`PerplexityOptions`]; base logits in its
//!   file format through [`BaseWriter`] / [`BaseReader`]).
//! - [`convert_dir`] writes a Hugging Face directory as one GGUF file.
//! - [`inspect`] / [`inspect_gguf`] report a model file's metadata and
//!   tensors ([`Report`], a [`TensorRow`] per tensor); [`tensor_values`]
//!   reads one tensor as f32.
//! - [`Tokenizer`] (a decoder's, from GGUF metadata) and
//!   [`EmbedTokenizer`] (an embedding model's) encode and decode text.
//! - [`GgufFile`] is an opened (memory-mapped) GGUF file; file-level
//!   problems are [`FormatError`]s, which convert into
//!   [`Error`](crate::Error).

pub use crate::convert::{convert_dir, ConvertOptions, Target};
pub use crate::dump::write_npy;
pub use crate::embed::tokenizer::EmbedTokenizer;
pub use crate::evaluate::{
    kld::{kl_divergence, mean_and_uncertainty, median, percentile},
    perplexity, text_tokens, BaseReader, BaseWriter, KldReport, KldStats, NllStats,
    PerplexityOptions,
};
pub use crate::formats::gguf::GgufFile;
pub use crate::formats::FormatError;
pub use crate::inspect::{inspect, inspect_gguf, tensor_values, value_to_json, Report, TensorRow};
pub use crate::model_path::KNOWN_MODELS;
pub use crate::open::{find, open_generator, resolve, wrong_kind, Found};
pub use crate::quantize::{quantize_file, QuantizeOptions, FILE_TYPES};
pub use crate::tokenize::Tokenizer;
