//! Model architectures. Each file holds a typed config read from the file's
//! metadata, a loader, and a forward pass built from `crate::layers`; a
//! decoder family's file also holds the rest of what the family is (its
//! `registry::DecoderFamily`), and `decoder_families!` below lists them.

pub mod build;
mod causal_lm;
pub mod decoder;
// Documentation of the public items in these files waits for wave/attn,
// which is rewriting them (attention / KV cache): see issue 28.

pub mod encoder;
pub mod hparams;
pub mod marian;
pub(crate) mod registry;
pub mod seq2seq;
pub mod t5;
// Documentation of the public items in these files waits for wave/attn,
// which is rewriting them (attention / KV cache): see issue 28.

pub mod transformer;

/// Declares each decoder family's module (its file in `models/`) and lists
/// the `DecoderFamily` constants it exports in `DECODERS`, in this order.
macro_rules! decoder_families {
    ($($module:ident: $($family:ident),+;)*) => {
        $(pub mod $module;)*

        /// The decoder families, by `general.architecture`: the one list
        /// every lookup reads (`registry::by_arch`, `registry::by_hf_class`).
        pub(crate) const DECODERS: &[&registry::DecoderFamily] = &[$($(&$module::$family),+),*];
    };
}

// Adding a decoder family is its file and one line here.
decoder_families! {
    llama: FAMILY;
    qwen2: FAMILY;
    qwen3: FAMILY;
    gemma3: FAMILY;
    gpt2: FAMILY;
    qwen_moe: QWEN3MOE_FAMILY, QWEN2MOE_FAMILY;
    gemma2: FAMILY;
    phi3: FAMILY;
    olmo2: FAMILY;
    smollm3: FAMILY;
    gpt_oss: FAMILY;
}

use std::sync::Arc;

use crate::formats::gguf::GgufFile;
use crate::Error;
use encoder::weights::WeightSource;
use encoder::Encoder;
use hparams::HParams;

pub use causal_lm::CausalLm;

/// Names of the decoder architectures [`load_causal_lm`] runs.
pub fn supported_architectures() -> Vec<&'static str> {
    registry::architectures()
}

/// Loads the decoder model in a GGUF file, by its `general.architecture`.
pub fn load_causal_lm(file: Arc<GgufFile>) -> Result<Box<dyn CausalLm>, Error> {
    let source = file.path().display().to_string();
    let Some(arch) = file.header.architecture() else {
        return Err(Error::model(
            source,
            "no general.architecture in the metadata",
        ));
    };
    match registry::by_arch(arch) {
        Some(family) => Ok(Box::new((family.load)(file)?)),
        None => Err(Error::model(
            source,
            format!(
                "architecture '{arch}' is not supported for text generation (supported: {})",
                supported_architectures().join(", ")
            ),
        )),
    }
}

/// Loads an encoder from a GGUF file's weights and hyper-parameters.
type EncoderFromGguf = fn(&WeightSource, &HParams) -> Result<Encoder, Error>;
/// Loads an encoder from a safetensors directory and its `config.json`.
type EncoderFromHf = fn(&WeightSource, &serde_json::Value) -> Result<Encoder, Error>;

/// An embedding (encoder) architecture ferrite runs.
pub struct EncoderArch {
    /// Its `general.architecture` in GGUF files and the loader, if
    /// llama.cpp has a GGUF layout for it.
    pub gguf: Option<(&'static str, EncoderFromGguf)>,
    /// Its `model_type` in a Hugging Face `config.json`.
    pub hf_name: &'static str,
    pub from_hf: EncoderFromHf,
    /// Whether a Matryoshka cut (`--dim`) layer-normalizes the pooled
    /// vector first (nomic's recipe).
    pub matryoshka_layer_norm: bool,
    /// Whether its models were trained with task prefixes
    /// (`embed::Task`; nomic-embed-text).
    pub task_prefixes: bool,
    /// How `ferrite convert` writes it (`None`: not converted).
    pub(crate) convert: Option<EncoderConvert>,
}

/// How `ferrite convert` writes an encoder family.
pub(crate) struct EncoderConvert {
    /// The HF classes (`config.json` `architectures`) converted as it.
    pub(crate) classes: &'static [&'static str],
    /// The keys and the vocabulary.
    pub(crate) spec: crate::convert::families::ConvertSpec,
    /// Its HF tensor names.
    pub(crate) layout: &'static crate::convert::bert::TensorLayout,
}

/// The encoder families (each's entry is in its file in
/// `models/encoder/`): the one list their names are looked up in.
pub const ENCODERS: [&EncoderArch; 3] = [
    &encoder::bert::FAMILY,
    &encoder::nomic_bert::FAMILY,
    &encoder::mpnet::FAMILY,
];

/// The encoder architecture named `name` in a GGUF file (`hf: false`) or
/// a `config.json` (`hf: true`), or an error listing the supported ones.
pub fn encoder_arch(name: &str, hf: bool, source: &str) -> Result<&'static EncoderArch, Error> {
    let key = |a: &EncoderArch| {
        if hf {
            Some(a.hf_name)
        } else {
            a.gguf.map(|g| g.0)
        }
    };
    ENCODERS
        .iter()
        .copied()
        .find(|a| key(a) == Some(name))
        .ok_or_else(|| {
            let known: Vec<&str> = ENCODERS.iter().copied().filter_map(key).collect();
            let what = if hf {
                "config.json model_type"
            } else {
                "architecture"
            };
            Error::model(
                source,
                format!(
                    "{what} '{name}' is not a supported embedding model ({})",
                    known.join(", ")
                ),
            )
        })
}

/// Opens the decoder at `path` by `open`'s rules (a GGUF file, a Hugging
/// Face directory, a llama2.c checkpoint; [`crate::open::find`]) and loads
/// its model: the library's own tests and examples use it.
#[cfg(feature = "internals")]
pub fn open_causal_lm(path: &std::path::Path) -> Result<(Arc<GgufFile>, Box<dyn CausalLm>), Error> {
    use crate::open::{find, wrong_kind, Found, ModelKind, OpenOptions};
    let file = match find(path, &OpenOptions::default())? {
        Found::Generator(file) => file,
        other => return Err(wrong_kind(path, other.kind(), ModelKind::Generator)),
    };
    let model = load_causal_lm(file.clone())?;
    Ok((file, model))
}
