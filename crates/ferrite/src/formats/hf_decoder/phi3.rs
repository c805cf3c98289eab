//! Phi-3 (`Phi3ForCausalLM`) directories: `config.json` into the keys
//! `convert_hf_to_gguf.py` writes, and each layer's HF modules into GGUF
//! tensor names. The model itself is `models/phi3.rs`.

use serde_json::Value as Json;

use super::{heads, llama_keys, Config, HfFamily, Hp, Keys, LayerName};
use crate::formats::gguf::Value;
use crate::formats::names;
use crate::layers::rope::longrope_attention_factor;
use crate::models::phi3::{ROPE_FACTORS_LONG, ROPE_FACTORS_SHORT};
use crate::Error;

/// Per-layer modules of `Phi3ForCausalLM` directories (the fused matrices
/// keep their layout, as the converter stores them).
const HF_LAYER: [(&str, LayerName); 6] = [
    ("input_layernorm", names::attn_norm),
    ("self_attn.qkv_proj", names::attn_qkv),
    ("self_attn.o_proj", names::attn_output),
    ("post_attention_layernorm", names::ffn_norm),
    ("mlp.gate_up_proj", names::ffn_up),
    ("mlp.down_proj", names::ffn_down),
];

/// `Phi3ForCausalLM` directories.
pub(crate) const HF: HfFamily = HfFamily {
    arch: "phi3",
    config: hf_config,
    layer: &HF_LAYER,
    norm_plus_one: false,
    permute_qk: false,
    special: None,
};

/// A number of the RoPE parameters (`rope_parameters`, else
/// `rope_scaling`, else the config's top level).
fn rope_num(c: &Config, params: Option<&Json>, key: &str) -> Result<Option<f64>, Error> {
    let v = params
        .and_then(|p| p.get(key))
        .or_else(|| c.get(key))
        .filter(|v| !v.is_null());
    match v {
        None => Ok(None),
        Some(v) => match v.as_f64() {
            Some(x) => match crate::models::hparams::float_problem(key, x) {
                None => Ok(Some(x)),
                Some(problem) => Err(c.bad(key, problem)),
            },
            None => Err(c.bad(key, format!("{v} is not a number"))),
        },
    }
}

/// Phi-3's `config.json` into the keys and LongRoPE factor tensors the
/// converter writes.
fn hf_config(c: &Config, k: &mut Keys) -> Result<Hp, Error> {
    let params = c.get("rope_parameters").or_else(|| c.get("rope_scaling"));
    let kind = params
        .and_then(|p| p.get("rope_type").or_else(|| p.get("type")))
        .and_then(Json::as_str)
        .unwrap_or("default");
    let theta = rope_num(c, params, "rope_theta")?.unwrap_or(10_000.0);
    let partial = rope_num(c, params, "partial_rotary_factor")?.unwrap_or(1.0);
    if !(partial > 0.0 && partial <= 1.0) {
        return Err(c.bad(
            "partial_rotary_factor",
            format!("{partial} is not in (0, 1]"),
        ));
    }
    // The sizes, heads and base as for Llama, with the rotation left plain
    // (LongRoPE and the partial rotary are written below).
    let mut json = c.json.clone();
    if let Some(obj) = json.as_object_mut() {
        obj.remove("rope_scaling");
        obj.remove("partial_rotary_factor");
        obj.insert(
            "rope_parameters".into(),
            serde_json::json!({ "rope_type": "default", "rope_theta": theta }),
        );
    }
    let plain = Config {
        json: &json,
        source: c.source.clone(),
    };
    // The rotated count first: the keys written first stay.
    let (_, _, head_dim) = heads(c, c.size("hidden_size")?)?;
    let rot = (head_dim as f64 * partial) as usize;
    if rot == 0 || !rot.is_multiple_of(2) {
        return Err(c.bad(
            "partial_rotary_factor",
            format!("{partial} of head size {head_dim} is {rot} values, not a positive even count"),
        ));
    }
    k.size("rope.dimension_count", rot);
    let mut hp = llama_keys(&plain, k, "hidden_act", &["silu"])?;
    hp.tied = c.opt_bool("tie_word_embeddings")?.unwrap_or(false);
    k.size(
        "attention.sliding_window",
        c.opt_size("sliding_window")?.unwrap_or(0),
    );
    let original = match rope_num(c, params, "original_max_position_embeddings")? {
        None => None,
        Some(n) if n >= 1.0 && n <= f64::from(u32::MAX) && n.fract() == 0.0 => Some(n as usize),
        Some(n) => {
            return Err(c.bad(
                "original_max_position_embeddings",
                format!("{n} is not a size"),
            ))
        }
    };
    if let Some(n) = original {
        k.size("rope.scaling.original_context_length", n);
    }
    match kind {
        "default" => return Ok(hp),
        "longrope" | "su" => {}
        other => {
            return Err(c.bad(
                "rope_parameters.rope_type",
                format!("RoPE scaling '{other}' is not supported for Phi-3"),
            ))
        }
    }
    let original = original.ok_or_else(|| {
        c.bad(
            "rope_parameters.original_max_position_embeddings",
            "missing",
        )
    })?;
    let list = |key: &str| -> Result<Vec<f32>, Error> {
        let field = format!("rope_parameters.{key}");
        let bad = || {
            c.bad(
                &field,
                format!(
                    "expected {} positive numbers (one per rotated pair)",
                    rot / 2
                ),
            )
        };
        let arr = params
            .and_then(|p| p.get(key))
            .and_then(Json::as_array)
            .filter(|a| a.len() == rot / 2)
            .ok_or_else(bad)?;
        arr.iter()
            .map(|v| {
                v.as_f64()
                    .map(|x| x as f32)
                    .filter(|x| x.is_finite() && *x > 0.0)
                    .ok_or_else(bad)
            })
            .collect()
    };
    let (long, short) = (list("long_factor")?, list("short_factor")?);
    let factor = match rope_num(c, params, "factor")? {
        Some(f) if f > 0.0 => f,
        Some(f) => return Err(c.bad("rope_parameters.factor", format!("{f} is not positive"))),
        None => c.size("max_position_embeddings")? as f64 / original as f64,
    };
    let attn = match rope_num(c, params, "attention_factor")? {
        Some(a) if a > 0.0 => a as f32,
        Some(a) => {
            return Err(c.bad(
                "rope_parameters.attention_factor",
                format!("{a} is not positive"),
            ))
        }
        None => longrope_attention_factor(factor, original),
    };
    k.set("rope.scaling.attn_factor", Value::F32(attn));
    hp.extra.push((ROPE_FACTORS_LONG, long));
    hp.extra.push((ROPE_FACTORS_SHORT, short));
    Ok(hp)
}
