//! Safetensors tensors into the GGUF file's tensors: renamed as the
//! converter names them, Llama's Q/K rows permuted, GPT-2's weights
//! transposed.

use super::*;

/// What happens to a tensor's rows on the way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reshape {
    None,
    /// Llama Q/K: rows permuted per head for adjacent-pair RoPE, over this
    /// many heads.
    RopePairs(usize),
    /// GPT-2 `Conv1D`: `(in, out)` to `(out, in)`.
    Transpose,
    /// Gemma's norms: every value plus 1, stored as f32.
    PlusOne,
}

/// An HF tensor's GGUF name and reshaping; `None` for tensors to leave out.
pub(super) type Mapped = Option<(String, Reshape)>;

/// A per-layer GGUF tensor name (`names::attn_q`, ...).
pub type LayerName = fn(usize) -> String;

/// Per-layer modules of Llama, Qwen2 and Qwen3 (the last two: Qwen3's
/// per-head Q/K norms): HF module, GGUF name.
pub const LLAMA_LAYER: [(&str, LayerName); 11] = [
    ("input_layernorm", names::attn_norm),
    ("self_attn.q_proj", names::attn_q),
    ("self_attn.k_proj", names::attn_k),
    ("self_attn.v_proj", names::attn_v),
    ("self_attn.o_proj", names::attn_output),
    ("post_attention_layernorm", names::ffn_norm),
    ("mlp.gate_proj", names::ffn_gate),
    ("mlp.up_proj", names::ffn_up),
    ("mlp.down_proj", names::ffn_down),
    ("self_attn.q_norm", names::attn_q_norm),
    ("self_attn.k_norm", names::attn_k_norm),
];

/// Per-layer modules of GPT-2: HF module, GGUF name, whether a `Conv1D`.
pub(super) const GPT2_LAYER: [(&str, LayerName, bool); 6] = [
    ("ln_1", names::attn_norm, false),
    ("attn.c_attn", names::attn_qkv, true),
    ("attn.c_proj", names::attn_output, true),
    ("ln_2", names::ffn_norm, false),
    ("mlp.c_fc", names::ffn_up, true),
    ("mlp.c_proj", names::ffn_down, true),
];

/// `{prefix}{layer}.{rest}` split into the layer and the rest.
pub(super) fn layer_of<'a>(name: &'a str, prefix: &str) -> Option<(&'a str, &'a str)> {
    let rest = name.strip_prefix(prefix)?;
    rest.split_once('.')
}

/// `module.weight` / `module.bias`: the module and whether a bias.
pub(super) fn module_of(rest: &str) -> Option<(&str, bool)> {
    if let Some(m) = rest.strip_suffix(".weight") {
        Some((m, false))
    } else {
        rest.strip_suffix(".bias").map(|m| (m, true))
    }
}

/// The GGUF name `weight_name`, or its bias.
pub(super) fn weight_or_bias(weight_name: String, bias: bool) -> String {
    if bias {
        names::bias_of(&weight_name)
    } else {
        weight_name
    }
}

pub(crate) fn map_name(f: Family, hp: &Hp, name: &str, source: &str) -> Result<Mapped, Error> {
    let unknown = || {
        Error::model(
            source,
            format!("tensor '{name}' is not part of a {} model", f.gguf_name()),
        )
    };
    let layer = |l: &str| -> Result<usize, Error> {
        match l.parse::<usize>() {
            Ok(l) if l < hp.n_layers => Ok(l),
            _ => Err(Error::model(
                source,
                format!(
                    "tensor '{name}': layer '{l}' is not one of the {} layers in config.json",
                    hp.n_layers
                ),
            )),
        }
    };
    match f {
        Family::Table(t) => {
            let plus_one = |gguf: String| {
                let reshape = if t.norm_plus_one && name.ends_with("norm.weight") {
                    Reshape::PlusOne
                } else {
                    Reshape::None
                };
                Ok(Some((gguf, reshape)))
            };
            match name {
                "model.embed_tokens.weight" => return plus_one(names::TOKEN_EMBD.into()),
                "model.norm.weight" => return plus_one(names::OUTPUT_NORM.into()),
                "lm_head.weight" if hp.tied => return Ok(None),
                "lm_head.weight" => return plus_one(names::OUTPUT.into()),
                _ => {}
            }
            let (l, rest) = layer_of(name, "model.layers.").ok_or_else(unknown)?;
            let l = layer(l)?;
            if rest == "self_attn.rotary_emb.inv_freq" {
                return Ok(None);
            }
            let (module, bias) = module_of(rest).ok_or_else(unknown)?;
            if let Some(modules) = t.modules {
                if let Some(mapped) = modules(t.arch, l, module, bias, source, name)? {
                    return Ok(Some(mapped));
                }
            }
            let (_, gguf) = t
                .layer
                .iter()
                .find(|(m, _)| *m == module)
                .ok_or_else(unknown)?;
            let gguf = weight_or_bias(gguf(l), bias);
            match module {
                "self_attn.q_proj" if t.permute_qk => {
                    Ok(Some((gguf, Reshape::RopePairs(hp.n_heads))))
                }
                "self_attn.k_proj" if t.permute_qk => {
                    Ok(Some((gguf, Reshape::RopePairs(hp.n_kv_heads))))
                }
                _ => plus_one(gguf),
            }
        }
        Family::Gpt2 => {
            let name = name.strip_prefix("transformer.").unwrap_or(name);
            let fixed = match name {
                "wte.weight" => Some(names::TOKEN_EMBD.to_string()),
                "wpe.weight" => Some(names::POSITION_EMBD.to_string()),
                "ln_f.weight" => Some(names::OUTPUT_NORM.to_string()),
                "ln_f.bias" => Some(names::bias_of(names::OUTPUT_NORM)),
                "lm_head.weight" if hp.tied => return Ok(None),
                "lm_head.weight" => Some(names::OUTPUT.to_string()),
                _ => None,
            };
            if let Some(n) = fixed {
                return Ok(Some((n, Reshape::None)));
            }
            let (l, rest) = layer_of(name, "h.").ok_or_else(unknown)?;
            let l = layer(l)?;
            // The causal mask buffers of older checkpoints.
            if rest == "attn.bias" || rest == "attn.masked_bias" {
                return Ok(None);
            }
            let (module, bias) = module_of(rest).ok_or_else(unknown)?;
            let (_, gguf, conv) = GPT2_LAYER
                .iter()
                .find(|(m, _, _)| *m == module)
                .ok_or_else(unknown)?;
            let reshape = if *conv && !bias {
                Reshape::Transpose
            } else {
                Reshape::None
            };
            Ok(Some((weight_or_bias(gguf(l), bias), reshape)))
        }
    }
}

/// A tensor ready to write: GGUF name, ggml dims, type, bytes.
pub(crate) struct Out<'a> {
    pub(crate) name: String,
    pub(crate) dims: Vec<u64>,
    pub(crate) ty: GgmlType,
    pub(crate) data: Cow<'a, [u8]>,
}

/// Llama's Q/K row permutation over `n_head` heads of `rows / n_head` rows
/// of `row_bytes` each: row `h, j, i` (half `j`, `i < half`) moves to
/// `h, i, j`.
pub(super) fn rope_pairs(data: &[u8], rows: usize, row_bytes: usize, n_head: usize) -> Vec<u8> {
    let head_dim = rows / n_head;
    let half = head_dim / 2;
    let mut out = vec![0u8; data.len()];
    for h in 0..n_head {
        for j in 0..2 {
            for i in 0..half {
                let src = (h * head_dim + j * half + i) * row_bytes;
                let dst = (h * head_dim + 2 * i + j) * row_bytes;
                out[dst..dst + row_bytes].copy_from_slice(&data[src..src + row_bytes]);
            }
        }
    }
    out
}

/// A row-major `rows x cols` matrix of `elem`-byte values, transposed.
pub(crate) fn transpose(data: &[u8], rows: usize, cols: usize, elem: usize) -> Vec<u8> {
    let mut out = vec![0u8; data.len()];
    for r in 0..rows {
        for c in 0..cols {
            let src = (r * cols + c) * elem;
            let dst = (c * rows + r) * elem;
            out[dst..dst + elem].copy_from_slice(&data[src..src + elem]);
        }
    }
    out
}

/// A tensor's bytes and type, checked: F32, F16 or BF16, a vector or a
/// matrix with no empty dimension.
pub(crate) fn checked_data<'a>(
    st: &'a SafetensorsDir,
    t: &StTensorInfo,
    source: &str,
) -> Result<(&'a [u8], GgmlType), Error> {
    let bad = |problem: String| Error::model(source, format!("tensor '{}': {problem}", t.name));
    let ty = match t.ty {
        Some(ty @ (GgmlType::F32 | GgmlType::F16 | GgmlType::Bf16)) => ty,
        _ => {
            return Err(bad(format!(
                "dtype {} is not supported (F32, F16, BF16)",
                t.dtype
            )))
        }
    };
    if t.shape.is_empty() || t.shape.len() > 2 || t.shape.contains(&0) {
        return Err(bad(format!(
            "shape {:?} is not a vector or a matrix",
            t.shape
        )));
    }
    Ok((st.tensor_data(t), ty))
}

/// One HF tensor as a GGUF tensor.
pub(crate) fn convert<'a>(
    st: &'a SafetensorsDir,
    t: &StTensorInfo,
    name: String,
    reshape: Reshape,
    hp: &Hp,
    source: &str,
) -> Result<Out<'a>, Error> {
    let bad = |problem: String| Error::model(source, format!("tensor '{}': {problem}", t.name));
    let (data, ty) = checked_data(st, t, source)?;
    let elem = ty.bytes_for(1).unwrap_or(1) as usize;
    let rows = t.shape[0];
    let row_bytes = data.len() / rows;
    let (shape, data) = match reshape {
        Reshape::None => (t.shape.clone(), Cow::Borrowed(data)),
        Reshape::RopePairs(n_head) => {
            let want = n_head * hp.head_dim;
            if rows != want {
                return Err(bad(format!(
                    "{rows} rows, expected {n_head} heads of {} = {want}",
                    hp.head_dim
                )));
            }
            let permuted = rope_pairs(data, rows, row_bytes, n_head);
            (t.shape.clone(), Cow::Owned(permuted))
        }
        Reshape::Transpose => match t.shape[..] {
            [r, c] => (vec![c, r], Cow::Owned(transpose(data, r, c, elem))),
            _ => return Err(bad(format!("shape {:?} is not a matrix", t.shape))),
        },
        Reshape::PlusOne => {
            let mut values = vec![0f32; t.shape.iter().product()];
            ferrite_kernels::quant::dequantize(ty, data, &mut values)
                .map_err(|e| bad(e.to_string()))?;
            values.iter_mut().for_each(|v| *v += 1.0);
            // As the converter (torch): an F16 tensor's sum is an F16 value.
            if ty == GgmlType::F16 {
                let mut half = vec![0u8; data.len()];
                ferrite_kernels::quant::quantize(ty, &values, &mut half)
                    .and_then(|()| ferrite_kernels::quant::dequantize(ty, &half, &mut values))
                    .map_err(|e| bad(e.to_string()))?;
            }
            let bytes = values.iter().flat_map(|v| v.to_le_bytes()).collect();
            let dims = t.shape.iter().rev().map(|&d| d as u64).collect();
            return Ok(Out {
                name,
                dims,
                ty: GgmlType::F32,
                data: Cow::Owned(bytes),
            });
        }
    };
    // ggml order: the contiguous dimension first.
    let dims = shape.iter().rev().map(|&d| d as u64).collect();
    Ok(Out {
        name,
        dims,
        ty,
        data,
    })
}
