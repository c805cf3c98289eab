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
//! too: the Hugging Face class read as it, with its `config.json` keys
//! and module names (`HF`), and the converter's keys.

use std::sync::Arc;

use crate::formats::gguf::GgufFile;
use crate::layers::rope::RopeStyle;
use crate::models::llama::{load_family, Family};
use crate::models::transformer::Decoder;
use crate::Error;
use crate::formats::hf_decoder::Family as HfMapping;
use crate::models::registry::DecoderFamily;
use crate::formats::hf_decoder::{dense_config, qwen_window, HfFamily, LLAMA_LAYER};
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

/// `Qwen3ForCausalLM` directories: Qwen2's, with the per-head Q/K norms.
const HF: HfFamily = HfFamily {
    arch: "qwen3",
    config: |c, k| dense_config(c, k, qwen_window),
    layer: &LLAMA_LAYER,
    norm_plus_one: false,
    permute_qk: false,
    mxfp4: false,
    modules: None,
    special: None,
};

/// The Qwen3 family: GGUF `qwen3`, read from `Qwen3ForCausalLM`.
pub(crate) const FAMILY: DecoderFamily = DecoderFamily {
    hf: &[("Qwen3ForCausalLM", HfMapping::Table(&HF))],
    convert: Some(ConvertSpec::new(generic_keys)),
    ..DecoderFamily::new("qwen3", load)
};
