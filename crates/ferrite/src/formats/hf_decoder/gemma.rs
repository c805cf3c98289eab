//! Gemma 2 and Gemma 3 (`Gemma2ForCausalLM`, `Gemma3ForCausalLM`) directories: `config.json` into the keys
//! `convert_hf_to_gguf.py` writes, and each layer's HF modules into GGUF
//! tensor names. The model itself is `models/gemma2.rs, models/gemma3.rs`.

use serde_json::Value as Json;

use super::{layer_types, llama_keys, window_keys, Config, HfFamily, Hp, Keys, LayerName};
use crate::formats::gguf::Value;
use crate::formats::names;
use crate::models::gemma2::GEMMA2;
use crate::models::gemma3::{Variant, GEMMA3};
use crate::Error;

/// Per-layer modules of Gemma 2 and Gemma 3 directories: HF module, GGUF
/// name (as convert_hf_to_gguf.py maps them).
const HF_LAYER: [(&str, LayerName); 13] = [
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
    special: None,
};

/// `Gemma3ForCausalLM` directories (the text model).
pub(crate) const HF_GEMMA3: HfFamily = HfFamily {
    arch: "gemma3",
    config: |c, k| gemma_config(c, k, &GEMMA3),
    layer: &HF_LAYER,
    norm_plus_one: true,
    permute_qk: false,
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
fn gemma_config(c: &Config, k: &mut Keys, v: &Variant) -> Result<Hp, Error> {
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
