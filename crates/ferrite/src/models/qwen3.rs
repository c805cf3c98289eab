//! Qwen3 (dense) as llama.cpp's GGUF files lay it out
//! (`general.architecture = "qwen3"`): the Qwen2 block without Q/K/V biases
//! (loaded wherever a file has them) and with an RMSNorm over each head of
//! the queries and keys before RoPE (`attn_q_norm`, `attn_k_norm`), RoPE over
//! halves of each head (ggml "neox"); the head size may differ from
//! `dim / heads` (`attention.key_length`).
//!
//! Reference: llama.cpp `src/models/qwen3.cpp`; HF `modeling_qwen3.py`.
//!
//! The family's registry entry (`FAMILY`, see `models::registry`) is here
//! too (its Hugging Face mapping is `formats::hf_decoder`'s built-in
//! Llama-style or GPT-2 one).

use std::sync::Arc;

use crate::formats::gguf::GgufFile;
use crate::layers::rope::RopeStyle;
use crate::models::llama::{load_family, Family};
use crate::models::transformer::Decoder;
use crate::Error;
use crate::formats::hf_decoder::Family as HfMapping;
use crate::models::registry::DecoderFamily;
use crate::convert::families::ConvertSpec;
use crate::convert::keys::generic_keys;

const QWEN3: Family = Family {
    rope_style: RopeStyle::Halves,
    default_eps: 1e-6,
    default_ctx: 40_960,
    qk_norm: true,
};

/// Loads a Qwen3 file.
pub fn load(file: Arc<GgufFile>) -> Result<Decoder, Error> {
    load_family(file, &QWEN3)
}

/// The Qwen3 family: GGUF `qwen3`, read from `Qwen3ForCausalLM`.
pub(crate) const FAMILY: DecoderFamily = DecoderFamily {
    hf: &[("Qwen3ForCausalLM", HfMapping::Qwen3)],
    convert: Some(ConvertSpec::new(generic_keys)),
    ..DecoderFamily::new("qwen3", load)
};
