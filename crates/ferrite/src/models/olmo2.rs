//! OLMo 2 as llama.cpp's GGUF files lay it out
//! (`general.architecture = "olmo2"`): a post-norm block. Per layer:
//! Q/K/V projections of the residual stream itself (no norm before them)
//! -> RMSNorm of the whole query projection and of the whole key projection
//! (`attn_q_norm`: `heads * head_dim` weights, not one head's) -> RoPE over
//! halves (ggml "neox") -> causal attention -> output projection ->
//! RMSNorm (`post_attention_norm`) -> residual; SwiGLU MLP of the residual
//! stream -> RMSNorm (`post_ffw_norm`) -> residual. Then a final RMSNorm
//! and the output matrix. OLMo 3's sliding-window layers
//! (`attention.sliding_window`, `attention.sliding_window_pattern`) are
//! read as llama.cpp reads them.
//!
//! Reference: llama.cpp `src/models/olmo2.cpp`; HF `modeling_olmo2.py`.
//!
//! The family's registry entry (`FAMILY`, see `models::registry`) is here
//! too: the Hugging Face class read as it, with its `config.json` keys
//! and module names (`HF`), and the converter's keys (`convert_keys`).

use std::sync::Arc;

use crate::formats::gguf::GgufFile;
use crate::formats::names;
use crate::layers::rope::{Rope, RopeStyle};
use crate::models::build;
use crate::models::hparams::HParams;
use crate::models::transformer::{Attention, Block, Decoder, GatedAct, Norm};
use crate::tensor::Loader;
use crate::Error;
use crate::formats::hf_decoder::Family as HfMapping;
use crate::models::registry::DecoderFamily;
use crate::formats::hf_decoder::{llama_keys, Config, HfFamily, Hp, Keys, LayerName};
use crate::convert::families::ConvertSpec;
use crate::convert::keys::{generic_keys, Ctx};
use crate::formats::gguf::{Array, Metadata, Value};
use serde_json::Value as Json;

/// Loads an OLMo 2 file.
pub fn load(file: Arc<GgufFile>) -> Result<Decoder, Error> {
    let source = file.path().display().to_string();
    let hp = HParams::of(&file, &source);
    let c = hp.common(&file, 4096)?;
    let rope = hp.rope(c.heads.head_dim)?;
    let eps = hp
        .opt_f32("attention.layer_norm_rms_epsilon")?
        .unwrap_or(1e-6);
    let w = Loader::new(file.clone());
    // Sliding-window layers (OLMo 3): `attention.sliding_window` on the
    // layers `attention.sliding_window_pattern` flags (by default all but
    // every fourth, llama.cpp's), rotated without the RoPE scaling.
    let (window, slides) = hp.sliding_window(c.n_layers, |l| (l + 1) % 4 != 0)?;
    let local = Rope::new(rope.dims, rope.base, 1.0, RopeStyle::Halves);
    let rope = rope.build(RopeStyle::Halves, None, &hp)?;
    let s = build::shape(&c);
    let scale = 1.0 / (s.head_dim as f32).sqrt();
    let none = || Norm::Identity;
    let blocks = (0..c.n_layers)
        .map(|l| {
            Ok(Block {
                attn_norm: none(),
                attn: Attention {
                    qkv: build::qkv(&w, l, &s)?,
                    q_norm: Some(build::rms(&w, &names::attn_q_norm(l), s.q_dim(), eps)?),
                    k_norm: Some(build::rms(&w, &names::attn_k_norm(l), s.kv_dim(), eps)?),
                    out: build::attn_output(&w, l, &s)?,
                    rope: Some(usize::from(slides[l])),
                    window: window.filter(|_| slides[l]),
                    scale,
                    softcap: None,
                    sinks: None,
                },
                post_attn_norm: Some(build::rms(&w, &names::post_attention_norm(l), s.dim, eps)?),
                ffn_norm: none(),
                mlp: build::gated_mlp(&w, l, &s, GatedAct::Silu)?,
                post_ffn_norm: Some(build::rms(&w, &names::post_ffw_norm(l), s.dim, eps)?),
            })
        })
        .collect::<Result<Vec<_>, Error>>()?;
    let (input, output) = build::token_input(&w, &s)?;
    let norm = build::rms(&w, names::OUTPUT_NORM, s.dim, eps)?;
    Ok(Decoder {
        arch: "olmo2".into(),
        shape: s,
        input,
        ropes: vec![rope, local],
        blocks,
        head: build::head(norm, output),
    })
}

// How a Hugging Face directory of this family becomes its GGUF file
// (`formats::hf_decoder` runs it).

/// Per-layer modules of `Olmo2ForCausalLM` directories.
const HF_LAYER: [(&str, LayerName); 11] = [
    ("self_attn.q_proj", names::attn_q),
    ("self_attn.k_proj", names::attn_k),
    ("self_attn.v_proj", names::attn_v),
    ("self_attn.o_proj", names::attn_output),
    ("self_attn.q_norm", names::attn_q_norm),
    ("self_attn.k_norm", names::attn_k_norm),
    ("post_attention_layernorm", names::post_attention_norm),
    ("post_feedforward_layernorm", names::post_ffw_norm),
    ("mlp.gate_proj", names::ffn_gate),
    ("mlp.up_proj", names::ffn_up),
    ("mlp.down_proj", names::ffn_down),
];

/// `Olmo2ForCausalLM` directories.
pub(crate) const HF: HfFamily = HfFamily {
    arch: "olmo2",
    config: hf_config,
    layer: &HF_LAYER,
    norm_plus_one: false,
    permute_qk: false,
    mxfp4: false,
    modules: None,
    special: None,
};

/// OLMo 2's `config.json`: Llama's keys (untied unless it says so).
fn hf_config(c: &Config, k: &mut Keys) -> Result<Hp, Error> {
    if c.get("sliding_window").is_some() {
        return Err(c.bad(
            "sliding_window",
            "sliding windows (OLMo 3) are not supported",
        ));
    }
    let mut hp = llama_keys(c, k, "hidden_act", &["silu"])?;
    hp.tied = c.opt_bool("tie_word_embeddings")?.unwrap_or(false);
    Ok(hp)
}

/// The OLMo 2 family: GGUF `olmo2`, read from `Olmo2ForCausalLM`.
pub(crate) const FAMILY: DecoderFamily = DecoderFamily {
    hf: &[("Olmo2ForCausalLM", HfMapping::Table(&HF))],
    convert: Some(ConvertSpec::new(convert_keys)),
    ..DecoderFamily::new("olmo2", load)
};

/// `Olmo2Model`: the generic keys, then the window (when `config.json`
/// has one: OLMo 3).
fn convert_keys(x: &Ctx, md: &mut Metadata) -> Result<(), Error> {
    generic_keys(x, md)?;
    let Some(w) = x.find(&["sliding_window"]) else {
        return Ok(());
    };
    x.put(md, "attention.sliding_window", x.uint(w, "sliding_window")?);
    let pattern: Vec<bool> = match x.c.get("layer_types").and_then(Json::as_array) {
        Some(types) => types
            .iter()
            .map(|t| t.as_str() == Some("sliding_attention"))
            .collect(),
        None => {
            let n =
                x.c.get("num_hidden_layers")
                    .and_then(Json::as_u64)
                    .ok_or_else(|| x.bad("num_hidden_layers", "missing"))?;
            (0..n).map(|i| (i + 1) % 4 != 0).collect()
        }
    };
    x.put(
        md,
        "attention.sliding_window_pattern",
        Value::Array(Array::Bool(pattern)),
    );
    Ok(())
}
