//! Gemma 2 as llama.cpp's GGUF files lay it out
//! (`general.architecture = "gemma2"`): Gemma 3's block (see `gemma3.rs`:
//! embedding times `sqrt(dim)`, RMSNorms before and after attention and the
//! MLP, GeGLU, tied output) without the per-head Q/K norms, with the
//! attention scores soft-capped (`attn_logit_softcapping`: `cap *
//! tanh(score / cap)` after scaling, before the mask and softmax) as well as
//! the output logits (`final_logit_softcapping`), sliding-window layers
//! alternating with global ones (`attention.sliding_window_pattern`, by
//! default a period of 2: even layers slide), and one RoPE base for both
//! kinds of layer. Queries are scaled by `attention.scale` when the file
//! has it (ferrite writes `query_pre_attn_scalar^-0.5` for HF
//! directories), else as llama.cpp: `1/sqrt(head_dim)`, `1/sqrt(dim /
//! heads)` for the 27B model (46 layers).
//!
//! Reference: llama.cpp `src/models/gemma2.cpp`; HF `modeling_gemma2.py`.

use std::sync::Arc;

use crate::formats::gguf::GgufFile;
use crate::models::gemma3::{load_variant, Variant};
use crate::models::transformer::Decoder;
use crate::Error;
use crate::formats::hf_decoder::{gemma as hf_gemma, Family as HfMapping};
use crate::models::registry::{BuiltinChat, DecoderFamily};

/// Gemma 2.
pub const GEMMA2: Variant = Variant {
    arch: "gemma2",
    qk_norm: false,
    swa_period: 2,
    local_rope_base: None,
    big_model_layers: 46,
    attn_softcap: true,
};

/// Loads a Gemma 2 file.
pub fn load(file: Arc<GgufFile>) -> Result<Decoder, Error> {
    load_variant(file, &GEMMA2)
}

/// The Gemma 2 family: GGUF `gemma2`, read from `Gemma2ForCausalLM`,
/// chatted with Gemma's turns.
pub(crate) const FAMILY: DecoderFamily = DecoderFamily {
    hf: &[("Gemma2ForCausalLM", HfMapping::Table(&hf_gemma::HF))],
    chat: BuiltinChat::Gemma,
    ..DecoderFamily::new(GEMMA2.arch, load)
};
