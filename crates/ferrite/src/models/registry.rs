//! The decoder families ferrite knows and the lookups over their one list
//! (`models::DECODERS`, made by `decoder_families!` in `models/mod.rs`).
//!
//! Each family's file in `models/` (`llama.rs`, `olmo2.rs`, ...) exports
//! one [`DecoderFamily`]: everything that is particular to the family
//! (its GGUF architecture name, its loader, the Hugging Face classes read
//! as it and how, what `ferrite convert` writes for it, its built-in chat
//! template, its quantize-mix facts). Everything else looks the family up
//! here: `models::load_causal_lm` (by `general.architecture`),
//! `formats::hf_decoder` and `convert` (by `config.json` `architectures`),
//! `generate::chat` (the built-in template), `quantize::mix` (llama.cpp's
//! model-size rules). Adding a family is its file plus one line in
//! `decoder_families!`; `tests::registry_is_consistent` checks that every
//! name is listed once and found by every lookup.

use std::sync::Arc;

use crate::convert::families::ConvertSpec;
use crate::formats::gguf::GgufFile;
use crate::formats::hf_decoder::Family as HfMapping;
use crate::Error;

use super::transformer::Decoder;
use super::DECODERS;

/// A loader of one decoder architecture from a GGUF file.
pub(crate) type LoadDecoder = fn(Arc<GgufFile>) -> Result<Decoder, Error>;

/// The template a model file that carries none is chatted with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BuiltinChat {
    /// ChatML (`<|im_start|>role ...`): the default.
    ChatMl,
    /// Gemma's turns (`<start_of_turn>user ...`).
    Gemma,
}

/// llama.cpp's `LLM_TYPE_70B` rule of an architecture, from the layer
/// count and the head counts (layer 0's): `quantize::mix` gives such a
/// model's attention values more bits in some mixes.
pub(crate) type Is70b = fn(n_layer: u64, n_head: u64, n_head_kv: u64) -> bool;

/// Everything particular to one decoder family (one GGUF architecture).
pub(crate) struct DecoderFamily {
    /// `general.architecture` of its GGUF files.
    pub arch: &'static str,
    /// Builds the model from a GGUF file of [`arch`](Self::arch).
    pub load: LoadDecoder,
    /// The Hugging Face classes (`config.json` `architectures`) read as
    /// this family, each with how its `config.json` and tensors become
    /// the GGUF file's (`formats::hf_decoder`).
    pub hf: &'static [(&'static str, HfMapping)],
    /// What `ferrite convert` writes for it, as `convert_hf_to_gguf.py`
    /// does (`None`: not converted).
    pub convert: Option<ConvertSpec>,
    /// The chat template of a file that carries none.
    pub chat: BuiltinChat,
    /// llama.cpp's `LLM_TYPE_70B` rule, if its loader has one for this
    /// architecture.
    pub is_70b: Option<Is70b>,
}

impl DecoderFamily {
    /// A family with only a GGUF loader: no HF classes, not converted,
    /// ChatML, no quantize rule (fill the rest with `..`).
    pub(crate) const fn new(arch: &'static str, load: LoadDecoder) -> DecoderFamily {
        DecoderFamily {
            arch,
            load,
            hf: &[],
            convert: None,
            chat: BuiltinChat::ChatMl,
            is_70b: None,
        }
    }
}

/// The family whose GGUF architecture is `arch`.
pub(crate) fn by_arch(arch: &str) -> Option<&'static DecoderFamily> {
    DECODERS.iter().copied().find(|f| f.arch == arch)
}

/// The family reading the Hugging Face class `class`, with the class's
/// name as listed and its mapping.
pub(crate) fn by_hf_class(
    class: &str,
) -> Option<(&'static str, &'static DecoderFamily, HfMapping)> {
    DECODERS.iter().copied().find_map(|f| {
        f.hf.iter()
            .find(|(name, _)| *name == class)
            .map(|&(name, mapping)| (name, f, mapping))
    })
}

/// Names of the GGUF architectures ferrite runs.
pub(crate) fn architectures() -> Vec<&'static str> {
    DECODERS.iter().map(|f| f.arch).collect()
}

/// Names of the Hugging Face decoder classes ferrite reads.
pub(crate) fn hf_classes() -> Vec<&'static str> {
    DECODERS
        .iter()
        .flat_map(|f| f.hf.iter().map(|(name, _)| *name))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_is_consistent() {
        let archs = architectures();
        let classes = hf_classes();
        for f in DECODERS {
            assert_eq!(
                archs.iter().filter(|a| **a == f.arch).count(),
                1,
                "{} listed once",
                f.arch
            );
            // (Entries are constants: compared by name, unique above.)
            assert_eq!(by_arch(f.arch).map(|x| x.arch), Some(f.arch));
            assert!(!f.hf.is_empty(), "{}: no Hugging Face class", f.arch);
            // Every class ferrite reads is one `ferrite convert` writes.
            assert!(f.convert.is_some(), "{}: no converter entry", f.arch);
            for &(class, mapping) in f.hf {
                assert_eq!(
                    classes.iter().filter(|c| **c == class).count(),
                    1,
                    "{class} listed once"
                );
                let (name, found, _) = by_hf_class(class).unwrap();
                assert_eq!(name, class);
                assert_eq!(found.arch, f.arch, "{class}");
                // The HF mapping writes the family's own architecture.
                assert_eq!(mapping.gguf_name(), f.arch, "{class}");
            }
        }
    }

    #[test]
    fn encoder_registry_is_consistent() {
        use crate::models::{encoder_arch, ENCODERS};
        let gguf: Vec<&str> = ENCODERS.iter().filter_map(|e| e.gguf.map(|g| g.0)).collect();
        let hf: Vec<&str> = ENCODERS.iter().map(|e| e.hf_name).collect();
        let converted: Vec<&str> = ENCODERS
            .iter()
            .filter_map(|e| e.convert.as_ref())
            .flat_map(|c| c.classes.iter().copied())
            .collect();
        let decoder_classes = hf_classes();
        for e in ENCODERS {
            assert_eq!(hf.iter().filter(|n| **n == e.hf_name).count(), 1);
            assert_eq!(encoder_arch(e.hf_name, true, "").unwrap().hf_name, e.hf_name);
            if let Some((name, _)) = e.gguf {
                assert_eq!(gguf.iter().filter(|n| **n == name).count(), 1, "{name}");
                assert!(by_arch(name).is_none(), "{name} is also a decoder");
                assert_eq!(encoder_arch(name, false, "").unwrap().hf_name, e.hf_name);
            }
            // Converted to a GGUF file only if there is a GGUF layout.
            assert_eq!(e.convert.is_some(), e.gguf.is_some(), "{}", e.hf_name);
            for class in e.convert.iter().flat_map(|c| c.classes.iter()) {
                assert_eq!(converted.iter().filter(|c| *c == class).count(), 1);
                assert!(!decoder_classes.contains(class), "{class}");
            }
        }
    }
}
