//! Qwen2 / Qwen2.5 as llama.cpp's GGUF files lay it out
//! (`general.architecture = "qwen2"`): the Llama block with biases on the
//! Q, K and V projections (loaded wherever the file has them), RoPE over
//! halves of each head (ggml "neox"), grouped-query attention, RMSNorm
//! (eps 1e-6 by default), SwiGLU, untied or tied output.
//!
//! Reference: llama.cpp `src/models/qwen2.cpp`; HF `modeling_qwen2.py`.
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

const QWEN2: Family = Family {
    rope_style: RopeStyle::Halves,
    default_eps: 1e-6,
    default_ctx: 32_768,
    qk_norm: false,
};

/// Loads a Qwen2 file.
pub fn load(file: Arc<GgufFile>) -> Result<Decoder, Error> {
    load_family(file, &QWEN2)
}

/// `Qwen2ForCausalLM` directories: Llama's keys and modules (halves: no
/// Q/K permutation), Qwen's optional sliding window.
const HF: HfFamily = HfFamily {
    arch: "qwen2",
    config: |c, k| dense_config(c, k, qwen_window),
    layer: LLAMA_LAYER.split_at(9).0,
    norm_plus_one: false,
    permute_qk: false,
    mxfp4: false,
    modules: None,
    special: None,
};

/// The Qwen2 family: GGUF `qwen2`, read from `Qwen2ForCausalLM`.
pub(crate) const FAMILY: DecoderFamily = DecoderFamily {
    hf: &[("Qwen2ForCausalLM", HfMapping::Table(&HF))],
    // llama.cpp calls an 80-layer Qwen2 70B.
    is_70b: Some(|n_layer, _, _| n_layer == 80),
    convert: Some(ConvertSpec::new(generic_keys)),
    ..DecoderFamily::new("qwen2", load)
};
