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
//!
//! The family's registry entry (`FAMILY`, see `models::registry`) is here
//! too: the Hugging Face class read as it, with its `config.json` keys
//! and module names (`HF`), and the converter's keys (`convert_keys`).

use std::sync::Arc;

use crate::formats::gguf::GgufFile;
use crate::models::gemma3::{load_variant, Variant};
use crate::models::transformer::Decoder;
use crate::Error;
use crate::formats::hf_decoder::Family as HfMapping;
use crate::models::registry::{BuiltinChat, DecoderFamily};
use crate::formats::hf_decoder::{layer_types, llama_keys, window_keys, Config, HfFamily, Hp, Keys, LayerName};
use crate::formats::gguf::Value;
use crate::formats::names;
use serde_json::Value as Json;
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

// How a Hugging Face directory of this family becomes its GGUF file
// (`formats::hf_decoder` runs it).

/// Per-layer modules of Gemma 2 and Gemma 3 directories: HF module, GGUF
/// name (as convert_hf_to_gguf.py maps them).
pub(crate) const HF_LAYER: [(&str, LayerName); 13] = [
    ("input_layernorm", names::attn_norm),
    ("self_attn.q_proj", names::attn_q),
    ("self_attn.k_proj", names::attn_k),
    ("self_attn.v_proj", names::attn_v),
    ("self_attn.o_proj", names::attn_output),
    ("post_attention_layernorm", names::post_attention_norm),
    ("pre_feedforward_layernorm", names::ffn_norm),
    ("post_feedforward_layernorm", names::post_ffw_norm),
    ("mlp.gate_proj", names::ffn_gate),
    ("mlp.up_proj", names::ffn_up),
    ("mlp.down_proj", names::ffn_down),
    ("self_attn.q_norm", names::attn_q_norm),
    ("self_attn.k_norm", names::attn_k_norm),
];

/// `Gemma2ForCausalLM` directories.
pub(crate) const HF: HfFamily = HfFamily {
    arch: "gemma2",
    config: |c, k| gemma_config(c, k, &GEMMA2),
    layer: &HF_LAYER,
    norm_plus_one: true,
    permute_qk: false,
    mxfp4: false,
    modules: None,
    special: None,
};


/// A soft-cap of `config.json` (null or absent: none); 0, negative or not
/// finite is an error naming the field.
fn softcap(c: &Config, key: &str) -> Result<Option<f32>, Error> {
    match c.get(key) {
        None => Ok(None),
        Some(v) => match v.as_f64() {
            Some(x) if x > 0.0 && (x as f32).is_finite() => Ok(Some(x as f32)),
            _ => Err(c.bad(key, format!("{v} is not a positive number"))),
        },
    }
}

/// Gemma 2 / Gemma 3 `config.json` into the keys the converter writes,
/// plus what it leaves to llama.cpp's defaults: `attention.scale` from
/// `query_pre_attn_scalar`, and the sliding layers as per-layer flags
/// (from `layer_types`, else the period: 2 for Gemma 2,
/// `sliding_window_pattern` (default 6) for Gemma 3).
pub(crate) fn gemma_config(c: &Config, k: &mut Keys, v: &Variant) -> Result<Hp, Error> {
    const ACTS: [&str; 1] = ["gelu_pytorch_tanh"];
    let gemma3 = v.qk_norm;
    if gemma3 && c.opt_bool("use_bidirectional_attention")? == Some(true) {
        return Err(c.bad(
            "use_bidirectional_attention",
            "bidirectional attention is not supported",
        ));
    }
    // Gemma 3 (transformers 5) nests its RoPE settings per layer type:
    // global layers' are read as the model's, local layers' base apart.
    let params = c.get("rope_parameters");
    let nested = params.and_then(|p| p.get("full_attention"));
    let mut hp = match nested {
        Some(full) => {
            let mut json = c.json.clone();
            json["rope_parameters"] = full.clone();
            let inner = Config {
                json: &json,
                source: c.source.clone(),
            };
            llama_keys(&inner, k, "hidden_activation", &ACTS)?
        }
        None => llama_keys(c, k, "hidden_activation", &ACTS)?,
    };
    hp.tied = c.opt_bool("tie_word_embeddings")?.unwrap_or(true);
    let local_base = match params.and_then(|p| p.get("sliding_attention")) {
        Some(local) => Some(
            local
                .get("rope_theta")
                .and_then(Json::as_f64)
                .ok_or_else(|| {
                    c.bad(
                        "rope_parameters.sliding_attention.rope_theta",
                        "missing or not a number",
                    )
                })? as f32,
        ),
        None => c.opt_f32("rope_local_base_freq")?,
    };
    if let Some(base) = local_base {
        if !(base > 1.0 && base.is_finite()) {
            return Err(c.bad("rope_local_base_freq", format!("{base} is not above 1")));
        }
        k.set("rope.freq_base_swa", Value::F32(base));
    }
    if let Some(s) = c.opt_f32("query_pre_attn_scalar")? {
        if s <= 0.0 {
            return Err(c.bad("query_pre_attn_scalar", format!("{s} is not positive")));
        }
        k.set("attention.scale", Value::F32(1.0 / s.sqrt()));
    }
    if let Some(cap) = softcap(c, "final_logit_softcapping")? {
        k.set("final_logit_softcapping", Value::F32(cap));
    }
    match softcap(c, "attn_logit_softcapping")? {
        Some(_) if gemma3 => {
            return Err(c.bad(
                "attn_logit_softcapping",
                "attention soft-capping is not supported for Gemma 3",
            ))
        }
        Some(cap) => k.set("attn_logit_softcapping", Value::F32(cap)),
        None => {}
    }
    let n = hp.n_layers;
    let flags = match c.get("layer_types") {
        Some(types) => layer_types(c, types, n)?,
        None => {
            let period = match gemma3 {
                true => c
                    .opt_size("sliding_window_pattern")?
                    .unwrap_or(v.swa_period),
                false => v.swa_period,
            };
            (0..n).map(|l| (l + 1) % period != 0).collect()
        }
    };
    if flags.iter().any(|&f| f) {
        window_keys(c, k, flags)?;
    }
    Ok(hp)
}

/// The Gemma 2 family: GGUF `gemma2`, read from `Gemma2ForCausalLM`,
/// chatted with Gemma's turns.
pub(crate) const FAMILY: DecoderFamily = DecoderFamily {
    hf: &[("Gemma2ForCausalLM", HfMapping::Table(&HF))],
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
