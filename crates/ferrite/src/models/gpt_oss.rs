//! gpt-oss as llama.cpp's GGUF files lay it out
//! (`general.architecture = "gpt-oss"`); its HF directories are read into
//! that layout by this file's `HF` (below, with `formats::hf_decoder`).
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
//!
//! The family's registry entry (`FAMILY`, see `models::registry`) is here
//! too: the Hugging Face class read as it, with its `config.json` keys
//! and module names (`HF`), and the converter's keys (`convert_keys`).

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
use crate::formats::hf_decoder::Family as HfMapping;
use crate::models::registry::DecoderFamily;
use std::borrow::Cow;
use ferrite_kernels::GgmlType;
use crate::formats::hf_decoder::{layer_types, llama_keys, transpose, window_keys, Config, HfFamily, Hp, Keys, LayerName, Out};
use crate::formats::gguf::Value;
use crate::formats::safetensors::{SafetensorsDir, StTensorInfo};
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

// How a Hugging Face directory of this family becomes its GGUF file
// (`formats::hf_decoder` runs it).

/// Per-layer modules of `GptOssForCausalLM` renamed one to one (the
/// experts and sinks are [`hf_tensor`]'s).
const HF_LAYER: [(&str, LayerName); 7] = [
    ("input_layernorm", names::attn_norm),
    ("self_attn.q_proj", names::attn_q),
    ("self_attn.k_proj", names::attn_k),
    ("self_attn.v_proj", names::attn_v),
    ("self_attn.o_proj", names::attn_output),
    ("post_attention_layernorm", names::post_attention_norm),
    ("mlp.router", router_name),
];

fn router_name(l: usize) -> String {
    blk(l, "ffn_gate_inp")
}

/// `GptOssForCausalLM` directories.
pub(crate) const HF: HfFamily = HfFamily {
    arch: ARCH,
    config: hf_config,
    layer: &HF_LAYER,
    norm_plus_one: false,
    permute_qk: false,
    mxfp4: true,
    modules: None,
    special: Some(hf_tensor),
};

/// A positive finite number of `config.json`, if present.
fn positive(c: &Config, key: &str) -> Result<Option<f32>, Error> {
    match c.opt_f32(key)? {
        Some(v) if v <= 0.0 => Err(c.bad(key, format!("{v} is not positive"))),
        v => Ok(v),
    }
}

/// `config.json` into the converter's keys (`GptOssModel`): the Llama keys,
/// the experts (`num_local_experts`, `num_experts_per_tok`,
/// `intermediate_size` as the experts' width), `sliding_window`; plus
/// what the converter leaves to llama.cpp: the sliding layers from
/// `layer_types`, and non-default SwiGLU constants.
fn hf_config(c: &Config, k: &mut Keys) -> Result<Hp, Error> {
    let mut hp = llama_keys(c, k, "hidden_act", &["silu"])?;
    // `hf_decoder::quantization` has refused any other method.
    hp.mxfp4 = c.get("quantization_config").is_some();
    hp.tied = c.opt_bool("tie_word_embeddings")?.unwrap_or(false);
    let n_experts = c.size("num_local_experts")?;
    let top_k = c.size("num_experts_per_tok")?;
    if top_k > n_experts {
        return Err(c.bad(
            "num_experts_per_tok",
            format!("{top_k} experts per token, but num_local_experts is {n_experts}"),
        ));
    }
    k.size("expert_count", n_experts);
    k.size("expert_used_count", top_k);
    k.size("expert_feed_forward_length", c.size("intermediate_size")?);
    for (key, default) in [("swiglu_alpha", ALPHA), ("swiglu_limit", LIMIT)] {
        if let Some(v) = positive(c, key)? {
            if v != default {
                k.set(key, Value::F32(v));
            }
        }
    }
    let n = hp.n_layers;
    let flags = match c.get("layer_types") {
        Some(types) => layer_types(c, types, n)?,
        None => (0..n).map(|l| l % 2 == 0).collect(),
    };
    if flags.iter().any(|&f| f) {
        window_keys(c, k, flags)?;
    }
    Ok(hp)
}

/// The tensors of a `GptOssForCausalLM` directory that are not renamed one
/// to one, as the converter writes them: `self_attn.sinks` ->
/// `attn_sinks.weight`; the experts' fused `gate_up_proj` (`experts x dim x
/// 2 ffn`, gate and up interleaved by column) split and transposed into
/// `ffn_gate_exps` / `ffn_up_exps` (ggml `[dim, ffn, experts]`), its bias
/// split likewise; `down_proj` (`experts x ffn x dim`) transposed into
/// `ffn_down_exps`, its bias renamed. `None`: not one of these.
fn hf_tensor<'a>(
    st: &'a SafetensorsDir,
    t: &StTensorInfo,
    hp: &Hp,
    source: &str,
) -> Result<Option<Vec<Out<'a>>>, Error> {
    let Some(rest) = t.name.strip_prefix("model.layers.") else {
        return Ok(None);
    };
    let Some((l, module)) = rest.split_once('.') else {
        return Ok(None);
    };
    let bad = |problem: String| Error::model(source, format!("tensor '{}': {problem}", t.name));
    let Ok(l) = l.parse::<usize>() else {
        return Ok(None);
    };
    if l >= hp.n_layers {
        return Err(bad(format!(
            "layer {l} is not one of the {} layers in config.json",
            hp.n_layers
        )));
    }
    let kind = match module {
        "self_attn.sinks" => 0,
        "mlp.experts.gate_up_proj" => 1,
        "mlp.experts.gate_up_proj_bias" => 2,
        "mlp.experts.down_proj" => 3,
        "mlp.experts.down_proj_bias" => 4,
        "mlp.experts.gate_up_proj_blocks" | "mlp.experts.down_proj_blocks" => {
            return mxfp4_experts(st, t, hp, l, source).map(Some)
        }
        // Read with their blocks.
        "mlp.experts.gate_up_proj_scales" | "mlp.experts.down_proj_scales" => {
            let blocks = t.name.replace("_scales", "_blocks");
            if !hp.mxfp4 || st.tensor_info(&blocks).is_none() {
                return Err(bad(format!(
                    "MXFP4 scales without {}",
                    if hp.mxfp4 {
                        format!("their blocks '{blocks}'")
                    } else {
                        "quantization_config.quant_method 'mxfp4' in config.json".into()
                    }
                )));
            }
            return Ok(Some(Vec::new()));
        }
        m if m.starts_with("mlp.experts.") => {
            return Err(bad("is not part of a gpt-oss model".into()))
        }
        _ => return Ok(None),
    };
    if hp.mxfp4 && matches!(kind, 1 | 3) {
        return Err(bad(
            "is not MXFP4, but config.json's quantization_config says mxfp4 \
             (expected '_blocks' and '_scales' tensors)"
                .into(),
        ));
    }
    let ty = match t.ty {
        Some(ty @ (GgmlType::F32 | GgmlType::F16 | GgmlType::Bf16)) => ty,
        _ => {
            return Err(bad(format!(
                "dtype {} is not supported (F32, F16, BF16)",
                t.dtype
            )))
        }
    };
    let elem = ty.bytes_for(1).unwrap_or(1) as usize;
    let data = st.tensor_data(t);
    let want_dims = [1, 3, 2, 3, 2][kind];
    if t.shape.len() != want_dims || t.shape.contains(&0) {
        return Err(bad(format!("shape {:?} has not {want_dims} dims", t.shape)));
    }
    let out = |what: &str, bias: bool, dims: Vec<u64>, data: Cow<'a, [u8]>| {
        let name = blk(l, what);
        Out {
            name: if bias { names::bias_of(&name) } else { name },
            dims,
            ty,
            data,
        }
    };
    let sh = &t.shape;
    Ok(Some(match kind {
        0 => vec![out(
            "attn_sinks",
            false,
            vec![sh[0] as u64],
            Cow::Borrowed(data),
        )],
        1 | 2 => {
            // Rows of (expert[, input]) of 2 ffn interleaved values.
            let width = sh[sh.len() - 1];
            if !width.is_multiple_of(2) {
                return Err(bad(format!("{width} gate/up columns is odd")));
            }
            let (n_exp, ffn) = (sh[0], width / 2);
            let rows = data.len() / (width * elem);
            let mut halves = [
                Vec::with_capacity(data.len() / 2),
                Vec::with_capacity(data.len() / 2),
            ];
            if kind == 2 {
                for row in data.chunks_exact(width * elem) {
                    for (j, v) in row.chunks_exact(elem).enumerate() {
                        halves[j % 2].extend_from_slice(v);
                    }
                }
                let dims = vec![ffn as u64, n_exp as u64];
                let [g, u] = halves;
                vec![
                    out("ffn_gate_exps", true, dims.clone(), Cow::Owned(g)),
                    out("ffn_up_exps", true, dims, Cow::Owned(u)),
                ]
            } else {
                // [e][i][2f + j] -> half j: [e][f][i].
                let dim = sh[1];
                debug_assert_eq!(rows, n_exp * dim);
                for (j, half) in halves.iter_mut().enumerate() {
                    half.resize(n_exp * ffn * dim * elem, 0);
                    for e in 0..n_exp {
                        for i in 0..dim {
                            for f in 0..ffn {
                                let src = ((e * dim + i) * width + 2 * f + j) * elem;
                                let dst = ((e * ffn + f) * dim + i) * elem;
                                half[dst..dst + elem].copy_from_slice(&data[src..src + elem]);
                            }
                        }
                    }
                }
                let dims = vec![dim as u64, ffn as u64, n_exp as u64];
                let [g, u] = halves;
                vec![
                    out("ffn_gate_exps", false, dims.clone(), Cow::Owned(g)),
                    out("ffn_up_exps", false, dims, Cow::Owned(u)),
                ]
            }
        }
        3 => {
            // Each expert's (ffn x dim) matrix transposed.
            let (n_exp, ffn, dim) = (sh[0], sh[1], sh[2]);
            let v: Vec<u8> = data
                .chunks_exact(ffn * dim * elem)
                .flat_map(|m| transpose(m, ffn, dim, elem))
                .collect();
            let dims = vec![ffn as u64, dim as u64, n_exp as u64];
            vec![out("ffn_down_exps", false, dims, Cow::Owned(v))]
        }
        _ => {
            let dims = vec![sh[1] as u64, sh[0] as u64];
            vec![out("ffn_down_exps", true, dims, Cow::Borrowed(data))]
        }
    }))
}

/// One MXFP4 block of an HF checkpoint (`_blocks`: code `2k` in byte `k`'s
/// low nibble, `2k + 1` in its high one; `_scales`: the E8M0 byte) as
/// ggml's `block_mxfp4` (the scale byte, then code `j` in byte `j`'s low
/// nibble and code `j + 16` in its high one). The codes and the scale
/// mean the same in both (E2M1 codes, 2^(e - 127)): bits are only moved.
fn hf_block_to_ggml(scale: u8, hf: &[u8], out: &mut Vec<u8>) {
    let code = |i: usize| (hf[i / 2] >> (4 * (i % 2))) & 0x0f;
    out.push(scale);
    out.extend((0..16).map(|j| code(j) | (code(j + 16) << 4)));
}

/// The MXFP4 experts of a checkpoint as OpenAI publishes gpt-oss:
/// `gate_up_proj_blocks` (`experts x 2 ffn x dim/32 x 16`, rows gate and
/// up interleaved) with `_scales` (`experts x 2 ffn x dim/32`) into
/// `ffn_gate_exps` / `ffn_up_exps` (the even and odd rows), and
/// `down_proj_blocks` (`experts x dim x ffn/32 x 16`) into
/// `ffn_down_exps`, kept MXFP4 (ggml `[cols, rows, experts]`), as the
/// converter repacks them (`GptOssModel.repack_mxfp4`).
fn mxfp4_experts<'a>(
    st: &'a SafetensorsDir,
    t: &StTensorInfo,
    hp: &Hp,
    l: usize,
    source: &str,
) -> Result<Vec<Out<'a>>, Error> {
    let bad = |name: &str, problem: String| Error::model(source, format!("tensor '{name}': {problem}"));
    if !hp.mxfp4 {
        return Err(bad(
            &t.name,
            "MXFP4 blocks, but config.json has no quantization_config with quant_method 'mxfp4'"
                .into(),
        ));
    }
    let scales_name = t.name.replace("_blocks", "_scales");
    let Some(s) = st.tensor_info(&scales_name) else {
        return Err(bad(&scales_name, "missing (the scales of MXFP4 blocks)".into()));
    };
    for x in [t, s] {
        if x.dtype != "U8" {
            return Err(bad(&x.name, format!("dtype {} is not U8", x.dtype)));
        }
    }
    let sh = &t.shape;
    if sh.len() != 4 || sh[3] != 16 || sh[..3].contains(&0) {
        return Err(bad(
            &t.name,
            format!("shape {sh:?} is not [experts, rows, blocks, 16]"),
        ));
    }
    if s.shape[..] != sh[..3] {
        return Err(bad(
            &scales_name,
            format!("shape {:?} is not its blocks' {:?}", s.shape, &sh[..3]),
        ));
    }
    let (n_exp, rows, n_blocks) = (sh[0], sh[1], sh[2]);
    let (blocks, scales) = (st.tensor_data(t), st.tensor_data(s));
    let n = n_exp * rows * n_blocks;
    if blocks.len() != 16 * n || scales.len() != n {
        return Err(bad(&t.name, "data size differs from its shape".into()));
    }
    let block = |e: usize, r: usize, b: usize| {
        let i = (e * rows + r) * n_blocks + b;
        (scales[i], &blocks[16 * i..16 * (i + 1)])
    };
    let cols = (32 * n_blocks) as u64;
    // Rows `first, first + step, ...` of every expert, repacked.
    let repack = |first: usize, step: usize| {
        let mut v = Vec::with_capacity(n_exp * rows.div_ceil(step) * n_blocks * 17);
        for e in 0..n_exp {
            for r in (first..rows).step_by(step) {
                for b in 0..n_blocks {
                    let (scale, hf) = block(e, r, b);
                    hf_block_to_ggml(scale, hf, &mut v);
                }
            }
        }
        v
    };
    let out = |what: &str, n_rows: usize, data: Vec<u8>| Out {
        name: blk(l, what),
        dims: vec![cols, n_rows as u64, n_exp as u64],
        ty: GgmlType::Mxfp4,
        data: Cow::Owned(data),
    };
    if t.name.ends_with("down_proj_blocks") {
        return Ok(vec![out("ffn_down_exps", rows, repack(0, 1))]);
    }
    if !rows.is_multiple_of(2) {
        return Err(bad(&t.name, format!("{rows} gate/up rows is odd")));
    }
    Ok(vec![
        out("ffn_gate_exps", rows / 2, repack(0, 2)),
        out("ffn_up_exps", rows / 2, repack(1, 2)),
    ])
}

/// The gpt-oss family: GGUF `gpt-oss`, read from `GptOssForCausalLM`.
pub(crate) const FAMILY: DecoderFamily = DecoderFamily {
    hf: &[("GptOssForCausalLM", HfMapping::Table(&HF))],
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
