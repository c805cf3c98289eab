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
use crate::convert::families::{required, ConvertSpec, BLOCKS};
use crate::convert::keys::Ctx;
use crate::formats::gguf::Metadata;

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
    convert: Some(ConvertSpec {
        sentencepiece: true,
        drops_output: true,
        ..ConvertSpec::new(convert_keys)
    }),
    ..DecoderFamily::new(GEMMA2.arch, load)
};

/// `Gemma2Model` (instead of the generic keys).
fn convert_keys(x: &Ctx, md: &mut Metadata) -> Result<(), Error> {
    required(
        x,
        md,
        &[
            ("context_length", &["max_position_embeddings"], false),
            ("embedding_length", &["hidden_size"], false),
            ("block_count", &BLOCKS, false),
            ("feed_forward_length", &["intermediate_size"], false),
            ("attention.head_count", &["num_attention_heads"], false),
            (
                "attention.head_count_kv",
                &["num_key_value_heads", "num_attention_heads"],
                false,
            ),
            ("attention.layer_norm_rms_epsilon", &["rms_norm_eps"], true),
            ("attention.key_length", &["head_dim"], false),
            ("attention.value_length", &["head_dim"], false),
        ],
    )?;
    x.file_type(md);
    required(
        x,
        md,
        &[
            ("attn_logit_softcapping", &["attn_logit_softcapping"], true),
            (
                "final_logit_softcapping",
                &["final_logit_softcapping"],
                true,
            ),
            ("attention.sliding_window", &["sliding_window"], false),
        ],
    )
}
