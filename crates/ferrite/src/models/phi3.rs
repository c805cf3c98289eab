//! Phi-3, Phi-3.5 and Phi-4-mini as llama.cpp's GGUF files lay them out
//! (`general.architecture = "phi3"`): the Llama block with the Q, K and V
//! projections fused in one matrix (`attn_qkv`, rows `q | k | v`) and the
//! MLP's gate and up projections fused in `ffn_up` (rows `gate | up`, as
//! HF's `gate_up_proj`: `down(silu(gate) * up)`), RoPE over halves (ggml
//! "neox") of the first `rope.dimension_count` values of each head
//! (partial rotary: Phi-4-mini rotates 3/4), and LongRoPE: per-pair
//! divisors of the frequencies, `rope_factors_short.weight` for contexts up
//! to `rope.scaling.original_context_length` and `rope_factors_long.weight`
//! past it (chosen by the context size, as llama.cpp does), cos and sin
//! times `rope.scaling.attn_factor`. `attention.sliding_window` (0: none)
//! applies to every layer, or to those `attention.sliding_window_pattern`
//! flags.
//!
//! Reference: llama.cpp `src/models/phi3.cpp`; HF `modeling_phi3.py`,
//! transformers' `_compute_longrope_parameters`.
//!
//! The family's registry entry (`FAMILY`, see `models::registry`) is here
//! too: the Hugging Face class read as it, with its `config.json` keys
//! and module names (`HF`), and the converter's keys (`convert_keys`).

use std::sync::Arc;

use crate::formats::gguf::GgufFile;
use crate::formats::names;
use crate::layers::rope::{longrope_inv_freq, Rope, RopeStyle};
use crate::models::build;
use crate::models::hparams::HParams;
use crate::models::transformer::{Attention, Block, Decoder, GatedAct, Mlp};
use crate::tensor::Loader;
use crate::Error;
use crate::formats::hf_decoder::Family as HfMapping;
use crate::models::registry::DecoderFamily;
use crate::formats::hf_decoder::{heads, llama_keys, Config, HfFamily, Hp, Keys, LayerName};
use crate::layers::rope::longrope_attention_factor;
use crate::convert::families::{required, ConvertSpec, BLOCKS};
use crate::convert::keys::{global_rope, rope_parameters, Ctx};
use crate::formats::gguf::{Metadata, Value};
use serde_json::Value as Json;

/// LongRoPE's per-pair divisors for long and short contexts.
pub const ROPE_FACTORS_LONG: &str = "rope_factors_long.weight";
pub const ROPE_FACTORS_SHORT: &str = "rope_factors_short.weight";

/// Loads a Phi-3 file.
pub fn load(file: Arc<GgufFile>) -> Result<Decoder, Error> {
    let source = file.path().display().to_string();
    let hp = HParams::of(&file, &source);
    let c = hp.common(&file, 4096)?;
    let params = hp.rope(c.heads.head_dim)?;
    if let Some(s) = &params.scaling {
        return Err(hp.error(
            "rope.scaling.type",
            &format!("'{}' is not supported for phi3", s.name()),
        ));
    }
    let eps = hp
        .opt_f32("attention.layer_norm_rms_epsilon")?
        .unwrap_or(1e-5);
    let w = Loader::new(file.clone());
    let pairs = params.dims / 2;
    let factors = |name: &str| -> Result<Option<Vec<f32>>, Error> {
        let f = w.opt_vector(name, pairs)?;
        if let Some(bad) = f.iter().flatten().find(|f| !(f.is_finite() && **f > 0.0)) {
            return Err(Error::model(
                &source,
                format!("tensor '{name}': factor {bad} is not positive"),
            ));
        }
        Ok(f)
    };
    let (dims, base) = (params.dims, params.base);
    let attn = match hp.opt_f32("rope.scaling.attn_factor")? {
        None => 1.0,
        Some(a) if a > 0.0 => a,
        Some(a) => {
            return Err(hp.error("rope.scaling.attn_factor", &format!("{a} is not positive")))
        }
    };
    // Both lists or neither.
    for (name, other) in [
        (ROPE_FACTORS_LONG, ROPE_FACTORS_SHORT),
        (ROPE_FACTORS_SHORT, ROPE_FACTORS_LONG),
    ] {
        if w.has(other) && !w.has(name) {
            return Err(Error::model(&source, format!("missing tensor '{name}'")));
        }
    }
    let rope = match (factors(ROPE_FACTORS_LONG)?, factors(ROPE_FACTORS_SHORT)?) {
        (Some(long), Some(short)) => {
            let original = hp.size("rope.scaling.original_context_length")?;
            let inv = |f: &[f32]| longrope_inv_freq(dims, base, f);
            let mut rope = Rope::with_inv_freq(inv(&short), attn, RopeStyle::Halves);
            let long = Rope::with_inv_freq(inv(&long), attn, RopeStyle::Halves);
            rope.long = Some(Box::new((long, original)));
            rope
        }
        // Neither (both or neither, checked above).
        _ => Rope::new(dims, base, params.freq_scale, RopeStyle::Halves),
    };
    let (window, slides) = hp.sliding_window(c.n_layers, |_| true)?;
    let s = build::shape(&c);
    let scale = 1.0 / (s.head_dim as f32).sqrt();
    let blocks = (0..c.n_layers)
        .map(|l| {
            let mlp = if w.has(&names::ffn_gate(l)) {
                build::gated_mlp(&w, l, &s, GatedAct::Silu)?
            } else {
                let (ffn, up) = (s.ffn_dim, names::ffn_up(l));
                Mlp::Gated {
                    gate: w.linear_rows(&up, 2 * ffn, s.dim, 0..ffn)?,
                    up: w.linear_rows(&up, 2 * ffn, s.dim, ffn..2 * ffn)?,
                    down: build::linear(&w, &names::ffn_down(l), s.dim, ffn)?,
                    act: GatedAct::Silu,
                }
            };
            Ok(Block {
                attn_norm: build::rms(&w, &names::attn_norm(l), s.dim, eps)?,
                attn: Attention {
                    qkv: build::qkv(&w, l, &s)?,
                    q_norm: None,
                    k_norm: None,
                    out: build::attn_output(&w, l, &s)?,
                    rope: Some(0),
                    window: window.filter(|_| slides[l]),
                    scale,
                    softcap: None,
                    sinks: None,
                },
                post_attn_norm: None,
                ffn_norm: build::rms(&w, &names::ffn_norm(l), s.dim, eps)?,
                mlp,
                post_ffn_norm: None,
            })
        })
        .collect::<Result<Vec<_>, Error>>()?;
    let (input, output) = build::token_input(&w, &s)?;
    let norm = build::rms(&w, names::OUTPUT_NORM, s.dim, eps)?;
    Ok(Decoder {
        arch: "phi3".into(),
        shape: s,
        input,
        ropes: vec![rope],
        blocks,
        head: build::head(norm, output),
    })
}

// How a Hugging Face directory of this family becomes its GGUF file
// (`formats::hf_decoder` runs it).

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
    mxfp4: false,
    modules: None,
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

/// The Phi-3 family: GGUF `phi3`, read from `Phi3ForCausalLM`.
pub(crate) const FAMILY: DecoderFamily = DecoderFamily {
    hf: &[("Phi3ForCausalLM", HfMapping::Table(&HF))],
    convert: Some(ConvertSpec {
        early: Some(convert_attn_factor),
        sentencepiece: true,
        gpt2_class_reads_json: true,
        ..ConvertSpec::new(convert_keys)
    }),
    ..DecoderFamily::new("phi3", load)
};

/// Phi-3's RoPE numbers: (context, original context, rotated dimensions,
/// the parameters).
fn convert_rope(x: &Ctx) -> Result<(f64, f64, u64, serde_json::Map<String, Json>), Error> {
    let rp = rope_parameters(x.c);
    let num = |v: Option<&Json>, key: &str| {
        v.and_then(Json::as_f64)
            .ok_or_else(|| x.bad(key, "missing or not a number"))
    };
    let max_pos = num(
        x.find(&["n_positions", "max_position_embeddings"]),
        "max_position_embeddings",
    )?;
    let orig = num(
        rp.get("original_max_position_embeddings"),
        "original_max_position_embeddings",
    )?;
    let n_embd = num(x.find(&["hidden_size", "n_embd"]), "hidden_size")?;
    let n_head = num(
        x.find(&["num_attention_heads", "n_head"]),
        "num_attention_heads",
    )?;
    let pct = match rp.get("partial_rotary_factor") {
        Some(v) => num(Some(v), "partial_rotary_factor")?,
        None => 1.0,
    };
    if n_head < 1.0 {
        return Err(x.bad("num_attention_heads", "not a head count"));
    }
    // Python's int(pct * n_embd) // n_head.
    let rope_dims = (pct * n_embd) as u64 / n_head as u64;
    Ok((max_pos, orig, rope_dims, rp))
}

/// `Phi3MiniModel.generate_extra_tensors`' key, written before the
/// general ones: the LongRoPE attention factor (when there are long
/// factors), from the context sizes whatever `config.json` says.
fn convert_attn_factor(x: &Ctx, md: &mut Metadata) -> Result<(), Error> {
    let (max_pos, orig, _, rp) = convert_rope(x)?;
    let long = rp.get("long_factor");
    if long.is_none_or(|v| v.is_null() || v.as_array().is_some_and(Vec::is_empty)) {
        return Ok(());
    }
    let scale = max_pos / orig;
    let kind = rp
        .get("rope_type")
        .and_then(Json::as_str)
        .unwrap_or("")
        .to_lowercase();
    let factor = match kind.as_str() {
        "su" | "longrope" if scale > 1.0 => (1.0 + scale.ln() / orig.ln()).sqrt(),
        "yarn" if scale > 1.0 => 0.1 * scale.ln() + 1.0,
        "su" | "longrope" | "yarn" => 1.0,
        "" => return Err(x.bad("rope_parameters.rope_type", "missing")),
        other => {
            return Err(x.bad(
                "rope_parameters.rope_type",
                &format!("'{other}' is not supported for Phi-3"),
            ))
        }
    };
    x.put(md, "rope.scaling.attn_factor", Value::F32(factor as f32));
    Ok(())
}

/// `Phi3MiniModel` (instead of the generic keys).
fn convert_keys(x: &Ctx, md: &mut Metadata) -> Result<(), Error> {
    let (_, _, rope_dims, rp) = convert_rope(x)?;
    x.put(
        md,
        "context_length",
        x.need_uint(&["n_positions", "max_position_embeddings"])?,
    );
    let orig = rp
        .get("original_max_position_embeddings")
        .ok_or_else(|| x.bad("original_max_position_embeddings", "missing"))?;
    x.put(
        md,
        "rope.scaling.original_context_length",
        x.uint(orig, "original_max_position_embeddings")?,
    );
    required(
        x,
        md,
        &[
            ("embedding_length", &["hidden_size", "n_embd"], false),
            ("feed_forward_length", &["intermediate_size"], false),
            ("block_count", &BLOCKS, false),
            (
                "attention.head_count",
                &["num_attention_heads", "n_head"],
                false,
            ),
            (
                "attention.head_count_kv",
                &["num_key_value_heads", "n_head_kv"],
                false,
            ),
            ("attention.layer_norm_rms_epsilon", &["rms_norm_eps"], true),
        ],
    )?;
    x.put(md, "rope.dimension_count", Value::U32(rope_dims as u32));
    let theta = global_rope(&rp)
        .get("rope_theta")
        .ok_or_else(|| x.bad("rope_theta", "missing"))?;
    x.put(md, "rope.freq_base", x.float(theta, "rope_theta")?);
    x.file_type(md);
    let window = match x.find(&["sliding_window"]) {
        Some(v) => x.uint(v, "sliding_window")?,
        None => Value::U32(0),
    };
    x.put(md, "attention.sliding_window", window);
    Ok(())
}
