//! The Llama architecture (Llama 1-3, SmolLM, Mistral-style dense models) as
//! llama.cpp's GGUF files lay it out (`general.architecture = "llama"`), and
//! the loader Qwen2 shares with it (`qwen2.rs`).
//!
//! Per layer: RMSNorm -> Q/K/V projections (biases where the file has them)
//! -> RoPE -> grouped-query causal attention -> output projection ->
//! residual; RMSNorm -> SwiGLU MLP -> residual. Then a final RMSNorm and the
//! output matrix (tied to the token embedding when the file has no
//! `output.weight`). Llama files rotate adjacent pairs (the GGUF converter
//! permuted Q/K rows for ggml's "normal" rope).
//!
//! Reference: llama.cpp `src/models/llama.cpp`; llama2.c `run.c`.
//!
//! The family's registry entry (`FAMILY`, see `models::registry`) is here
//! too: the Hugging Face classes read as it, with their `config.json` keys
//! and module names (`HF`, `MISTRAL_HF`), and the converter's keys.

use std::sync::Arc;

use crate::formats::gguf::GgufFile;
use crate::formats::names;
use crate::layers::rope::RopeStyle;
use crate::models::build;
use crate::models::hparams::HParams;
use crate::models::transformer::{Attention, Block, Decoder, GatedAct, Mlp, Norm, Shape};
use crate::tensor::Loader;
use crate::Error;
use crate::formats::hf_decoder::Family as HfMapping;
use crate::models::registry::DecoderFamily;
use crate::formats::hf_decoder::{dense_config, window_keys, Config, HfFamily, Keys, LLAMA_LAYER};
use crate::convert::families::ConvertSpec;
use crate::convert::keys::{generic_keys, Ctx};
use crate::formats::gguf::{Metadata, Value};
use serde_json::Value as Json;

/// What distinguishes the members of the Llama family.
pub struct Family {
    /// How RoPE pairs values (Llama: adjacent; Qwen2: halves).
    pub rope_style: RopeStyle,
    /// `attention.layer_norm_rms_epsilon` when the file has none.
    pub default_eps: f32,
    /// `context_length` when the file has none.
    pub default_ctx: usize,
    /// Per-head RMSNorm of queries and keys before RoPE (Qwen3:
    /// `attn_q_norm`, `attn_k_norm`, `head_dim` weights each).
    pub qk_norm: bool,
}

/// Llama itself.
pub const LLAMA: Family = Family {
    rope_style: RopeStyle::Adjacent,
    default_eps: 1e-5,
    default_ctx: 2048,
    qk_norm: false,
};

/// Loads a Llama file.
pub fn load(file: Arc<GgufFile>) -> Result<Decoder, Error> {
    load_family(file, &LLAMA)
}

/// Loads a file of the Llama family member `f`.
pub fn load_family(file: Arc<GgufFile>, f: &Family) -> Result<Decoder, Error> {
    load_family_with(file, f, &|w, l, s| {
        build::gated_mlp(w, l, s, GatedAct::Silu)
    })
}

/// Builds layer `l`'s feed-forward network (`Loader`, layer, shape).
pub type MlpOf<'a> = &'a dyn Fn(&Loader, usize, &Shape) -> Result<Mlp, Error>;

/// [`load_family`] with each layer's feed-forward network made by `mlp`
/// (mixture-of-experts members: `qwen_moe.rs`).
pub fn load_family_with(file: Arc<GgufFile>, f: &Family, mlp: MlpOf) -> Result<Decoder, Error> {
    let source = file.path().display().to_string();
    let hp = HParams::of(&file, &source);
    let c = hp.common(&file, f.default_ctx)?;
    let rope = hp.rope(c.heads.head_dim)?;
    let eps = hp
        .opt_f32("attention.layer_norm_rms_epsilon")?
        .unwrap_or(f.default_eps);
    let arch = hp.arch.to_string();
    let w = Loader::new(file.clone());
    let freq_factors = w.opt_vector(names::ROPE_FREQS, rope.dims / 2)?;
    let rope = rope.build(f.rope_style, freq_factors, &hp)?;
    // Sliding-window layers (default: every layer when there is a window).
    let (window, slides) = hp.sliding_window(c.n_layers, |_| true)?;
    let s = build::shape(&c);
    let scale = 1.0 / (s.head_dim as f32).sqrt();
    let qk_norm = |name: &str| -> Result<Option<Norm>, Error> {
        if f.qk_norm {
            build::rms(&w, name, s.head_dim, eps).map(Some)
        } else {
            Ok(None)
        }
    };
    let blocks = (0..c.n_layers)
        .map(|l| {
            Ok(Block {
                attn_norm: build::rms(&w, &names::attn_norm(l), s.dim, eps)?,
                attn: Attention {
                    qkv: build::qkv(&w, l, &s)?,
                    q_norm: qk_norm(&names::attn_q_norm(l))?,
                    k_norm: qk_norm(&names::attn_k_norm(l))?,
                    out: build::attn_output(&w, l, &s)?,
                    rope: Some(0),
                    window: window.filter(|_| slides[l]),
                    scale,
                    softcap: None,
                    sinks: None,
                },
                post_attn_norm: None,
                ffn_norm: build::rms(&w, &names::ffn_norm(l), s.dim, eps)?,
                mlp: mlp(&w, l, &s)?,
                post_ffn_norm: None,
            })
        })
        .collect::<Result<Vec<_>, Error>>()?;
    let (input, output) = build::token_input(&w, &s)?;
    let norm = build::rms(&w, names::OUTPUT_NORM, s.dim, eps)?;
    Ok(Decoder {
        arch,
        shape: s,
        input,
        ropes: vec![rope],
        blocks,
        head: build::head(norm, output),
    })
}

/// `LlamaForCausalLM` directories: Llama's keys, Q/K rows permuted for
/// adjacent-pair RoPE, no sliding window.
pub(crate) const HF: HfFamily = HfFamily {
    arch: "llama",
    config: |c, k| dense_config(c, k, |_, _, _| Ok(())),
    // Llama's modules (without Qwen3's Q/K norms).
    layer: LLAMA_LAYER.split_at(9).0,
    norm_plus_one: false,
    permute_qk: true,
    mxfp4: false,
    modules: None,
    special: None,
};

/// `MistralForCausalLM` directories: Llama's, with `sliding_window` (null:
/// none) on every layer.
pub(crate) const MISTRAL_HF: HfFamily = HfFamily {
    config: |c, k| dense_config(c, k, mistral_window),
    ..HF
};

/// Mistral's window: `sliding_window` on every one of the `n_layers`
/// layers, when it is set.
fn mistral_window(c: &Config, n_layers: usize, k: &mut Keys) -> Result<(), Error> {
    match c.opt_size("sliding_window")? {
        Some(_) => window_keys(c, k, vec![true; n_layers]),
        None => Ok(()),
    }
}

/// The Llama family: GGUF `llama`, read from `LlamaForCausalLM` and
/// `MistralForCausalLM` directories (Mistral: a sliding window on every
/// layer).
pub(crate) const FAMILY: DecoderFamily = DecoderFamily {
    hf: &[
        ("LlamaForCausalLM", HfMapping::Table(&HF)),
        ("MistralForCausalLM", HfMapping::Table(&MISTRAL_HF)),
    ],
    // llama.cpp calls an 80-layer grouped-query Llama 70B.
    is_70b: Some(|n_layer, n_head, n_head_kv| n_layer == 80 && n_head != n_head_kv),
    convert: Some(ConvertSpec {
        space_prefix: true,
        ..ConvertSpec::new(convert_keys)
    }),
    ..DecoderFamily::new("llama", load)
};

/// `LlamaModel` (and `SmolLM3Model`): the generic keys, then the vocabulary
/// size and the rotated dimensions.
pub(crate) fn convert_keys(x: &Ctx, md: &mut Metadata) -> Result<(), Error> {
    generic_keys(x, md)?;
    x.put(md, "vocab_size", x.need_uint(&["vocab_size"])?);
    let dim = match x.find(&["head_dim"]) {
        Some(d) => x.uint(d, "head_dim")?,
        None => {
            let width = x.c.get("hidden_size").and_then(Json::as_u64);
            let heads = x.c.get("num_attention_heads").and_then(Json::as_u64);
            match (width, heads) {
                (Some(w), Some(h)) if h > 0 => Value::U32((w / h) as u32),
                _ => return Err(x.bad("num_attention_heads", "missing")),
            }
        }
    };
    x.put(md, "rope.dimension_count", dim);
    Ok(())
}
