//! gpt-oss (`GptOssForCausalLM`) directories: `config.json` into the keys
//! `convert_hf_to_gguf.py` writes, each layer's HF modules into GGUF tensor
//! names, and the experts' fused tensors split and transposed as the
//! converter does. The model itself is `models/gpt_oss.rs`.

use std::borrow::Cow;

use ferrite_kernels::GgmlType;

use super::{
    layer_types, llama_keys, transpose, window_keys, Config, HfFamily, Hp, Keys, LayerName, Out,
};
use crate::formats::gguf::Value;
use crate::formats::names;
use crate::formats::safetensors::{SafetensorsDir, StTensorInfo};
use crate::models::gpt_oss::{blk, ALPHA, ARCH, LIMIT};
use crate::Error;

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
