//! What `ferrite convert` writes per GGUF architecture ([`ConvertSpec`]):
//! each family's is in its file in `models/` (its `set_gguf_parameters` in
//! the converter, `conversion/*.py` of llama.cpp: the keys, their order,
//! and the defaults it assumes); and the helpers those key writers share.

use serde_json::Value as Json;

use super::keys::Ctx;
use super::vocab::VocabKind;
use crate::formats::gguf::Metadata;
use crate::Error;

/// Writes keys into the metadata.
pub(crate) type Keys = fn(&Ctx, &mut Metadata) -> Result<(), Error>;

/// Checks `config.json` (its path the second argument).
pub(crate) type Check = fn(&Json, &str) -> Result<(), Error>;

/// What `ferrite convert` writes for one GGUF architecture, as the
/// converter's class for it does: a family's registry entry holds it
/// (`models::registry::DecoderFamily::convert`,
/// `models::EncoderConvert::spec`).
pub(crate) struct ConvertSpec {
    /// Keys the converter writes before `general.type` (while it makes up
    /// tensors: Phi-3's LongRoPE attention factor).
    pub(crate) early: Option<Keys>,
    /// The hyper-parameters, `general.file_type` among them.
    pub(crate) keys: Keys,
    pub(crate) vocab: VocabKind,
    /// `add_prefix_space` of `tokenizer_config.json` as
    /// `tokenizer.ggml.add_space_prefix` (Llama's `set_vocab`).
    pub(crate) space_prefix: bool,
    /// The converter reads a SentencePiece `tokenizer.model` when there is
    /// one (Gemma, Phi-3): ferrite does not convert those vocabularies and
    /// refuses such a directory rather than write another vocabulary.
    pub(crate) sentencepiece: bool,
    /// With [`sentencepiece`](Self::sentencepiece): the converter reads
    /// `tokenizer.json` instead when `tokenizer_config.json`'s
    /// `tokenizer_class` is `GPT2Tokenizer` (Phi-3).
    pub(crate) gpt2_class_reads_json: bool,
    /// The converter drops `lm_head` whether tied or not (Gemma 2).
    pub(crate) drops_output: bool,
    /// The converter keeps the token embedding's rows of real tokens only
    /// (Gemma 3).
    pub(crate) trims_token_embd: bool,
    /// A check of `config.json` (its path the second argument) made after
    /// the tensors are planned, before any key (GPT-2's `n_ctx`).
    pub(crate) check: Option<Check>,
}

impl ConvertSpec {
    /// The converter's defaults (byte-level BPE vocabulary, nothing
    /// particular) with the hyper-parameters `keys` (fill the rest with
    /// `..`).
    pub(crate) const fn new(keys: Keys) -> ConvertSpec {
        ConvertSpec {
            early: None,
            keys,
            vocab: VocabKind::Gpt2,
            space_prefix: false,
            sentencepiece: false,
            gpt2_class_reads_json: false,
            drops_output: false,
            trims_token_embd: false,
            check: None,
        }
    }
}

/// The layer count's spellings (`TextModel.block_count`).
pub(crate) const BLOCKS: [&str; 4] = ["n_layers", "num_hidden_layers", "n_layer", "num_layers"];

/// Required keys in order: GGUF key, `config.json` spellings, whether it
/// is a number (else a size).
pub(crate) fn required(x: &Ctx, md: &mut Metadata, keys: &[(&str, &[&str], bool)]) -> Result<(), Error> {
    for (key, names, float) in keys {
        let v = if *float {
            x.need_float(names)?
        } else {
            x.need_uint(names)?
        };
        x.put(md, key, v);
    }
    Ok(())
}

