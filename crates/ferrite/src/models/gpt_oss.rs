//! gpt-oss as llama.cpp's GGUF files lay it out
//! (`general.architecture = "gpt-oss"`); its HF directories are read into
//! that layout by `formats/hf_decoder/gpt_oss.rs`.
//!
//! Per layer: RMSNorm -> Q/K/V projections with biases -> RoPE over halves
//! (ggml "neox") with YaRN scaling -> grouped-query causal attention whose
//! softmax has a learned sink logit per head in its denominator
//! (`attn_sinks`), over a sliding window on alternate layers (by default
//! the even ones, as transformers' default `layer_types` and llama.cpp's
//! period of 2; `attention.sliding_window_pattern` when the file has it)
//! -> output projection with bias -> residual; RMSNorm
//! (`post_attention_norm`) -> mixture of experts -> residual. The experts:
//! a router with a bias (`ffn_gate_inp`), the `expert_used_count` largest
//! logits, a softmax over those alone; each expert's gate, up and down
//! projections with biases (`ffn_{gate,up,down}_exps` and their `.bias`,
//! stacked per expert), and the clamped SwiGLU (`crate::layers::moe`).
//! Then a final RMSNorm and the output matrix.
//!
//! YaRN: gpt-oss was trained with `truncate: false` (the correction range
//! not rounded out to whole pairs), which its GGUF files do not record and
//! llama.cpp does not implement (ggml always rounds): ferrite follows
//! transformers, unless the file says otherwise (ferrite's key
//! `rope.scaling.yarn_truncate`, written for HF directories).
//!
//! The SwiGLU's `alpha` and `limit` are 1.702 and 7 (llama.cpp's constants)
//! unless the file has ferrite's keys `{arch}.swiglu_alpha` /
//! `{arch}.swiglu_limit` (written for HF directories from
//! `swiglu_alpha` / `swiglu_limit`).
//!
//! Reference: llama.cpp `src/models/openai-moe.cpp`,
//! `conversion/gpt_oss.py`; HF `modeling_gpt_oss.py`.

use std::sync::Arc;

use crate::formats::gguf::GgufFile;
use crate::formats::names;
use crate::layers::moe::{Expert, ExpertAct, Gating, Moe};
use crate::layers::rope::RopeStyle;
use crate::models::build;
use crate::models::hparams::HParams;
use crate::models::qwen_moe::{moe_params, stacked_experts, widen_ffn};
use crate::models::transformer::{Attention, Block, Decoder, Mlp};
use crate::tensor::Loader;
use crate::Error;
use crate::formats::hf_decoder::{gpt_oss as hf_gpt_oss, Family as HfMapping};
use crate::models::registry::DecoderFamily;
use crate::convert::families::{required, ConvertSpec};
use crate::convert::keys::{generic_keys, Ctx};
use crate::formats::gguf::Metadata;

/// The architecture name.
pub const ARCH: &str = "gpt-oss";
/// transformers' and llama.cpp's SwiGLU constants.
pub(crate) const ALPHA: f32 = 1.702;
pub(crate) const LIMIT: f32 = 7.0;

pub(crate) fn blk(l: usize, what: &str) -> String {
    format!("blk.{l}.{what}.weight")
}

/// Layer `l`'s learned sink logits (`n_heads`).
pub fn sinks_name(l: usize) -> String {
    blk(l, "attn_sinks")
}

/// A positive finite SwiGLU constant `{arch}.{what}`, else `default`.
fn swiglu_constant(hp: &HParams, what: &str, default: f32) -> Result<f32, Error> {
    match hp.opt_f32(what)? {
        None => Ok(default),
        Some(v) if v > 0.0 => Ok(v),
        Some(v) => Err(hp.error(what, &format!("{v} is not positive"))),
    }
}

/// Loads a gpt-oss file.
pub fn load(file: Arc<GgufFile>) -> Result<Decoder, Error> {
    let source = file.path().display().to_string();
    let hp = HParams::of(&file, &source);
    let c = hp.common(&file, 131_072)?;
    let p = moe_params(&hp, false)?;
    let rope = hp.rope_truncating(c.heads.head_dim, false)?;
    let eps = hp
        .opt_f32("attention.layer_norm_rms_epsilon")?
        .unwrap_or(1e-5);
    let act = ExpertAct::ClampedSwiglu {
        alpha: swiglu_constant(&hp, "swiglu_alpha", ALPHA)?,
        limit: swiglu_constant(&hp, "swiglu_limit", LIMIT)?,
    };
    let w = Loader::new(file.clone());
    let rope = rope.build(RopeStyle::Halves, None, &hp)?;
    let (window, slides) = hp.sliding_window(c.n_layers, |l| l % 2 == 0)?;
    let s = build::shape(&c);
    let scale = 1.0 / (s.head_dim as f32).sqrt();
    let (dim, ffn, n) = (s.dim, p.expert_ffn, p.n_experts);
    let blocks = (0..c.n_layers)
        .map(|l| {
            let names3 = ["ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"].map(|x| blk(l, x));
            let mut experts =
                stacked_experts(&w, names3.each_ref().map(String::as_str), n, ffn, dim)?;
            let biases = |name: &str, len: usize| {
                let name = names::bias_of(name);
                if w.has(&name) {
                    w.stacked_vectors(&name, n, len).map(Some)
                } else {
                    Ok(None)
                }
            };
            let gate_b = biases(&names3[0], ffn)?;
            let up_b = biases(&names3[1], ffn)?;
            let down_b = biases(&names3[2], dim)?;
            for (e, x) in experts.iter_mut().enumerate() {
                let Expert { gate, up, down } = x;
                gate.bias = gate_b.as_ref().map(|b| b[e].clone());
                up.bias = up_b.as_ref().map(|b| b[e].clone());
                down.bias = down_b.as_ref().map(|b| b[e].clone());
            }
            let moe = Moe {
                router: build::linear(&w, &blk(l, "ffn_gate_inp"), n, dim)?,
                gating: Gating::TopKSoftmax,
                top_k: p.top_k,
                experts,
                act,
                shared: None,
            };
            Ok(Block {
                attn_norm: build::rms(&w, &names::attn_norm(l), dim, eps)?,
                attn: Attention {
                    qkv: build::qkv(&w, l, &s)?,
                    q_norm: None,
                    k_norm: None,
                    out: build::attn_output(&w, l, &s)?,
                    rope: Some(0),
                    window: window.filter(|_| slides[l]),
                    scale,
                    softcap: None,
                    sinks: w.opt_vector(&sinks_name(l), s.n_heads)?,
                },
                post_attn_norm: None,
                ffn_norm: build::rms(&w, &names::post_attention_norm(l), dim, eps)?,
                mlp: Mlp::Moe(Box::new(moe)),
                post_ffn_norm: None,
            })
        })
        .collect::<Result<Vec<_>, Error>>()?;
    let (input, output) = build::token_input(&w, &s)?;
    let norm = build::rms(&w, names::OUTPUT_NORM, dim, eps)?;
    let mut d = Decoder {
        arch: hp.arch.to_string(),
        shape: s,
        input,
        ropes: vec![rope],
        blocks,
        head: build::head(norm, output),
    };
    widen_ffn(&mut d);
    Ok(d)
}

/// The gpt-oss family: GGUF `gpt-oss`, read from `GptOssForCausalLM`.
pub(crate) const FAMILY: DecoderFamily = DecoderFamily {
    hf: &[("GptOssForCausalLM", HfMapping::Table(&hf_gpt_oss::HF))],
    convert: Some(ConvertSpec::new(convert_keys)),
    ..DecoderFamily::new(ARCH, load)
};

/// `GptOssModel`: the generic keys, then the window and the experts'
/// width (`intermediate_size`).
fn convert_keys(x: &Ctx, md: &mut Metadata) -> Result<(), Error> {
    generic_keys(x, md)?;
    required(
        x,
        md,
        &[
            ("attention.sliding_window", &["sliding_window"], false),
            ("expert_feed_forward_length", &["intermediate_size"], false),
        ],
    )
}
