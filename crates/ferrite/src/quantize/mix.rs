//! Which type each tensor gets: llama.cpp's file types ("mixes") and the
//! per-tensor rules of `llama-quantize` (`llama_tensor_get_type` and its
//! helpers in llama.cpp's `src/llama-quant.cpp`), for the file types
//! ferrite can write. Same inputs, same choices: which tensors are left
//! alone, which get more bits in the `_M` mixes, the output and token
//! embedding rules, and the fallbacks for rows that are not whole blocks.

use ferrite_kernels::GgmlType;

use super::file_type::*;
use crate::formats::gguf::{GgufHeader, TensorInfo};
use crate::models::registry;

/// Whether ggml counts `t` as quantized (`ggml_is_quantized`).
pub fn is_quantized(t: GgmlType) -> bool {
    use GgmlType::*;
    !matches!(t, F32 | F16 | Bf16 | I8 | I16 | I32 | I64 | F64)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Category {
    TokenEmbd,
    AttnQ,
    AttnV,
    AttnK,
    AttnQkv,
    AttnKvB,
    AttnOutput,
    FfnUp,
    FfnGate,
    FfnDown,
    Output,
    Other,
}

fn category(name: &str) -> Category {
    use Category::*;
    if name == "output.weight" {
        return Output;
    }
    if name == "token_embd.weight" || name == "per_layer_token_embd.weight" {
        return TokenEmbd;
    }
    let table = [
        ("attn_qkv.weight", AttnQkv),
        ("attn_kv_b.weight", AttnKvB),
        ("attn_v.weight", AttnV),
        ("attn_k.weight", AttnK),
        ("attn_q.weight", AttnQ),
        ("attn_output.weight", AttnOutput),
        ("ffn_up", FfnUp),
        ("ffn_gate", FfnGate),
        ("ffn_down", FfnDown),
    ];
    table
        .iter()
        .find(|(s, _)| name.contains(s))
        .map_or(Other, |&(_, c)| c)
}

fn is_attn_v(c: Category) -> bool {
    matches!(c, Category::AttnV | Category::AttnQkv | Category::AttnKvB)
}

/// `ggml_n_dims`: the number of dims up to the last one above 1 (at least 1).
pub fn n_dims(dims: &[u64]) -> usize {
    dims.iter().rposition(|&d| d > 1).map_or(1, |i| i + 1)
}

/// Whether `llama-quantize` may change this tensor's type at all
/// (`tensor_allows_quantization`): 2-D and 3-D weights, but no norms,
/// expert routers, positional embeddings and the other small tensors it
/// lists.
fn allows_quantization(arch: &str, t: &TensorInfo) -> bool {
    let name = t.name.as_str();
    if n_dims(&t.dims) < 2 || !name.ends_with("weight") {
        return false;
    }
    const NEVER: &[&str] = &[
        "_norm.weight",
        "ffn_gate_inp.weight",
        "ffn_gate_tid2eid.weight",
        "altup",
        "laurel",
        "per_layer_model_proj",
        "ssm_conv1d",
        "shortconv.conv.weight",
        "indexer.k_proj.weight",
        "indexer.q_proj.weight",
        "time_mix_first.weight",
        "time_mix_w0.weight",
        "time_mix_w1.weight",
        "time_mix_w2.weight",
        "time_mix_v0.weight",
        "time_mix_v1.weight",
        "time_mix_v2.weight",
        "time_mix_a0.weight",
        "time_mix_a1.weight",
        "time_mix_a2.weight",
        "time_mix_g1.weight",
        "time_mix_g2.weight",
        "time_mix_decay_w1.weight",
        "time_mix_decay_w2.weight",
        "time_mix_lerp_fused.weight",
        "attn_rel_b.weight",
        ".position_embd",
        "sam.pos_embd",
        "sam.neck.",
        "sam.net_",
        ".rel_pos",
        ".patch_embd",
        ".patch_merger",
        "a.rvq.codebook",
        "mm.a.code_embd",
    ];
    const GLM5_NEXT: &[&str] = &[
        "hc_",
        "indexer.attn_q_b",
        "indexer.attn_k",
        "indexer.proj",
        "indexer_compressor_gate",
        "indexer_compressor_ape",
        "ssm_f_a.weight",
        "ssm_f_b.weight",
        "ssm_g_a.weight",
        "ssm_g_b.weight",
        "ssm_beta.weight",
        "attn_kv_a_mqa.weight",
        "attn_k_b.weight",
        "attn_v_b.weight",
    ];
    if NEVER.iter().any(|s| name.contains(s)) {
        return false;
    }
    if arch == "glm5-next" && GLM5_NEXT.iter().any(|s| name.contains(s)) {
        return false;
    }
    name != "position_embd.weight" && name != "token_types.weight"
}

/// Why the tensor types of a file cannot be chosen.
#[derive(Debug, thiserror::Error)]
pub enum MixError {
    #[error("no {0} in the metadata")]
    MissingKey(String),
    #[error("no fallback type for {ty} (tensor {tensor})")]
    NoFallback { ty: GgmlType, tensor: String },
    #[error("failed to determine the layer of tensor {0}")]
    UnknownLayer(String),
    #[error("bad layer {layer} for tensor {tensor}: must be in [0, {n_layer})")]
    BadLayer {
        layer: i64,
        tensor: String,
        n_layer: i64,
    },
}

/// What the rules need to know about the model (llama.cpp reads it from
/// the hyper-parameters as it loads the model).
struct ModelFacts {
    arch: String,
    falcon: bool,
    n_gqa: u64,
    n_expert: u64,
    n_layer: i64,
    is_70b: bool,
    tied_embeddings: bool,
}

impl ModelFacts {
    fn new(h: &GgufHeader) -> Result<ModelFacts, MixError> {
        let arch = h
            .architecture()
            .ok_or_else(|| MixError::MissingKey("general.architecture".into()))?
            .to_string();
        let md = &h.metadata;
        let key = |k: &str| md.get_u64(&format!("{arch}.{k}"));
        // Per-layer head counts are arrays in some models; llama.cpp uses
        // layer 0's.
        let first = |k: &str| -> Option<u64> {
            let v = md.get(&format!("{arch}.{k}"))?;
            v.as_u64()
                .or_else(|| v.as_array().and_then(|a| a.get(0)).and_then(|x| x.as_u64()))
        };
        let n_layer = key("block_count")
            .ok_or_else(|| MixError::MissingKey(format!("{arch}.block_count")))?;
        let n_head = first("attention.head_count").unwrap_or(0);
        let n_head_kv = first("attention.head_count_kv").unwrap_or(n_head);
        let n_gqa = n_head.checked_div(n_head_kv).unwrap_or(0);
        // Only LLM_TYPE_70B changes a choice: the rule of a family ferrite
        // runs is its registry entry's; these are the other architectures
        // whose llama.cpp loaders call an 80-layer (Jais2: 68-layer) model
        // that (a file ferrite cannot run can still be quantized).
        let is_70b = match registry::by_arch(&arch) {
            Some(family) => family
                .is_70b
                .is_some_and(|rule| rule(n_layer, n_head, n_head_kv)),
            None => match arch.as_str() {
                "deci" | "olmo" => n_layer == 80,
                "jais2" => n_layer == 68,
                _ => false,
            },
        };
        Ok(ModelFacts {
            falcon: arch == "falcon",
            n_gqa,
            n_expert: key("expert_count").unwrap_or(0),
            n_layer: n_layer as i64,
            is_70b,
            tied_embeddings: !h.tensors.iter().any(|t| t.name == "output.weight"),
            arch,
        })
    }
}

/// The counters `llama-quantize` keeps while it walks the tensors.
#[derive(Default)]
struct Counters {
    n_attention_wv: i64,
    i_attention_wv: i64,
    i_ffn_down: i64,
    i_ffn_gate: i64,
    i_ffn_up: i64,
}

fn use_more_bits(i: i64, n: i64) -> bool {
    i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2
}

/// The tensor order of `llama-quantize`'s output: tensors outside the
/// blocks first, then block by block (`blk.N.`), by name within each.
pub fn llama_order(tensors: &[TensorInfo]) -> Vec<usize> {
    fn layer(name: &str) -> i64 {
        // sscanf("blk.%d."): an optionally signed decimal after "blk.".
        let Some(rest) = name.strip_prefix("blk.") else {
            return -1;
        };
        let digits = rest
            .char_indices()
            .take_while(|&(i, c)| c.is_ascii_digit() || (i == 0 && (c == '-' || c == '+')))
            .count();
        rest[..digits].parse::<i64>().unwrap_or(-1)
    }
    let mut order: Vec<usize> = (0..tensors.len()).collect();
    order.sort_by(|&a, &b| {
        let (na, nb) = (&tensors[a].name, &tensors[b].name);
        (layer(na), na.as_bytes()).cmp(&(layer(nb), nb.as_bytes()))
    });
    order
}

/// The type each tensor of `h` gets (indexed like `h.tensors`), as
/// `llama-quantize` chooses it for `ftype` (`pure`: its `--pure`, every
/// quantizable tensor to the default type, bar the fallbacks). Tensors are
/// visited in [`llama_order`], which the layer counters depend on.
pub fn choose_types(
    h: &GgufHeader,
    ftype: FileType,
    pure: bool,
) -> Result<Vec<GgmlType>, MixError> {
    let facts = ModelFacts::new(h)?;
    let mut c = Counters {
        n_attention_wv: h
            .tensors
            .iter()
            .filter(|t| is_attn_v(category(&t.name)))
            .count() as i64,
        ..Counters::default()
    };
    let mut types: Vec<GgmlType> = h.tensors.iter().map(|t| t.ty).collect();
    for i in llama_order(&h.tensors) {
        let t = &h.tensors[i];
        if !allows_quantization(&facts.arch, t) {
            continue;
        }
        let mut ty = ftype.default;
        if is_quantized(ty) {
            if !pure {
                ty = mix_type(&facts, &mut c, ty, t, ftype.id)?;
            }
            ty = fallback(t, ty)?;
        }
        types[i] = ty;
    }
    Ok(types)
}

/// The row length's fallback (`tensor_type_fallback`): a type whose
/// blocks do not divide the rows becomes a smaller-block one, or F16.
fn fallback(t: &TensorInfo, ty: GgmlType) -> Result<GgmlType, MixError> {
    use GgmlType::*;
    let ncols = t.dims[0];
    let fits = |ty: GgmlType| ncols.is_multiple_of(ty.block_size() as u64);
    if fits(ty) {
        return Ok(ty);
    }
    let to = match ty {
        Q2K | Q3K => Q4_0,
        Q4K => Q5_0,
        Q5K => Q5_1,
        Q6K => Q8_0,
        _ if ty.block_size() <= 32 => ty,
        _ => {
            return Err(MixError::NoFallback {
                ty,
                tensor: t.name.clone(),
            })
        }
    };
    Ok(if fits(to) { to } else { F16 })
}

/// `llama_tensor_get_type_impl` for the file types in [`FILE_TYPES`].
fn mix_type(
    m: &ModelFacts,
    c: &mut Counters,
    mut ty: GgmlType,
    t: &TensorInfo,
    ftype: u32,
) -> Result<GgmlType, MixError> {
    use GgmlType::*;
    let name = t.name.as_str();
    let cat = category(name);
    // With experts, llama.cpp reads the layer from the name.
    let layer = |i: i64| -> Result<(i64, i64), MixError> {
        if m.n_expert <= 1 {
            return Ok((i, m.n_layer));
        }
        let l = name
            .strip_prefix("blk.")
            .and_then(|r| r.split('.').next())
            .and_then(|d| d.parse::<i64>().ok())
            .ok_or_else(|| MixError::UnknownLayer(name.into()))?;
        if l < 0 || l >= m.n_layer {
            return Err(MixError::BadLayer {
                layer: l,
                tensor: name.into(),
                n_layer: m.n_layer,
            });
        }
        Ok((l, m.n_layer))
    };
    if m.arch == "glm5-next"
        && (name.contains("attn_q_a")
            || name.contains("attn_q_b")
            || name.contains("nextn.eh_proj"))
    {
        return Ok(Q8_0);
    }
    if cat == Category::Output || (m.tied_embeddings && cat == Category::TokenEmbd) {
        let nx = t.dims[0];
        if ftype == F_MXFP4_MOE || m.falcon || !nx.is_multiple_of(ty.block_size() as u64) {
            ty = Q8_0;
        } else if ty != Q8_0 {
            ty = Q6K;
        }
    } else if ftype == F_MXFP4_MOE {
        // Expert stacks (3-D: a third dim above 1) to MXFP4, everything
        // else to Q8_0; no layer counter moves. BailingMoE3's 3-D MLA
        // projections are not experts.
        let experts = t.dims.get(2).is_some_and(|&n| n > 1)
            && (m.arch != "bailingmoe3"
                || matches!(cat, Category::FfnUp | Category::FfnGate | Category::FfnDown));
        ty = if experts { Mxfp4 } else { Q8_0 };
    } else if cat == Category::TokenEmbd {
        // Only the IQ / TQ file types change it.
    } else if is_attn_v(cat) {
        if ftype == F_Q2_K {
            ty = if m.n_gqa >= 4 { Q4K } else { Q3K };
        } else if ftype == F_Q3_K_M {
            ty = if c.i_attention_wv < 2 { Q5K } else { Q4K };
        } else if ftype == F_Q3_K_L {
            ty = Q5K;
        } else if (ftype == F_Q4_K_M || ftype == F_Q5_K_M)
            && use_more_bits(c.i_attention_wv, c.n_attention_wv)
        {
            ty = Q6K;
        } else if ftype == F_Q4_K_S && c.i_attention_wv < 4 {
            ty = Q5K;
        }
        if m.is_70b && (ty == Q3K || ty == Q4K) {
            ty = Q5K;
        }
        if m.n_expert == 8 {
            ty = Q8_0;
        }
        c.i_attention_wv += 1;
    } else if cat == Category::AttnK {
        if m.n_expert == 8 {
            ty = Q8_0;
        }
    } else if cat == Category::FfnDown {
        let (i, n) = layer(c.i_ffn_down)?;
        if ftype == F_Q2_K {
            ty = Q3K;
        } else if ftype == F_Q3_K_M {
            ty = if i < n / 16 {
                Q5K
            } else if !m.falcon || use_more_bits(i, n) {
                Q4K
            } else {
                Q3K
            };
        } else if ftype == F_Q3_K_L {
            ty = if m.falcon { Q4K } else { Q5K };
        } else if ftype == F_Q4_K_M {
            if m.falcon {
                ty = if i < n / 16 {
                    Q6K
                } else if use_more_bits(i, n) {
                    Q5K
                } else {
                    Q4K
                };
            } else if use_more_bits(i, n) {
                ty = Q6K;
            }
        } else if ftype == F_Q5_K_M && use_more_bits(i, n) {
            ty = Q6K;
        } else if ftype == F_Q4_K_S && !m.falcon && i < n / 8 {
            ty = Q5K;
        }
        c.i_ffn_down += 1;
    } else if cat == Category::AttnOutput {
        if !m.falcon {
            if m.n_expert == 8 {
                if [F_Q2_K, F_Q3_K_S, F_Q3_K_M, F_Q4_K_S, F_Q4_K_M].contains(&ftype) {
                    ty = Q5K;
                }
            } else if ftype == F_Q2_K {
                ty = Q3K;
            } else if ftype == F_Q3_K_M {
                ty = Q4K;
            } else if ftype == F_Q3_K_L {
                ty = Q5K;
            }
        } else if ftype == F_Q3_K_L {
            ty = Q4K;
        }
    } else if cat == Category::AttnQkv {
        if ftype == F_Q3_K_M || ftype == F_Q3_K_L {
            ty = Q4K;
        } else if ftype == F_Q4_K_M {
            ty = Q5K;
        } else if ftype == F_Q5_K_M {
            ty = Q6K;
        }
    } else if cat == Category::FfnGate {
        layer(c.i_ffn_gate)?;
        c.i_ffn_gate += 1;
    } else if cat == Category::FfnUp {
        layer(c.i_ffn_up)?;
        c.i_ffn_up += 1;
    }
    Ok(ty)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn more_bits_layers() {
        let picked: Vec<i64> = (0..24).filter(|&i| use_more_bits(i, 24)).collect();
        assert_eq!(picked, [0, 1, 2, 5, 8, 11, 14, 17, 20, 21, 22, 23]);
    }

    /// MXFP4_MOE on a model whose rows are whole 256-blocks (so the rules,
    /// not the fallbacks, decide): expert stacks MXFP4, the output and every
    /// other matrix Q8_0 (the output rule, not Q6_K), a tied token
    /// embedding Q8_0 too, rows not whole 32-blocks F16, BailingMoE3's
    /// non-expert 3-D tensors Q8_0, and under `--pure` everything MXFP4.
    #[test]
    fn mxfp4_moe_rules() {
        use crate::formats::gguf::{Metadata, Value};
        use GgmlType::*;
        let header = |arch: &str, names: &[(&str, &[u64])]| {
            let mut metadata = Metadata::default();
            metadata.insert("general.architecture".into(), Value::String(arch.into()));
            metadata.insert(format!("{arch}.block_count"), Value::U32(1));
            metadata.insert(format!("{arch}.expert_count"), Value::U32(4));
            GgufHeader {
                version: 3,
                metadata,
                tensors: names
                    .iter()
                    .map(|&(n, d)| TensorInfo {
                        name: n.into(),
                        dims: d.to_vec(),
                        ty: F32,
                        offset: 0,
                        size: 0,
                    })
                    .collect(),
                alignment: 32,
                data_offset: 0,
            }
        };
        let ft = FileType::from_name("MXFP4_MOE").unwrap();
        assert_eq!((ft.id, ft.default), (38, Mxfp4));
        let h = header(
            "gpt-oss",
            &[
                ("output.weight", &[256, 512]),
                ("token_embd.weight", &[256, 512]),
                ("blk.0.attn_v.weight", &[256, 256, 1]),
                ("blk.0.ffn_down_exps.weight", &[256, 256, 4]),
                ("blk.0.ffn_up_exps.weight", &[48, 256, 4]),
                ("blk.0.ffn_gate_inp.weight", &[256, 4]),
                ("blk.0.attn_norm.weight", &[256]),
            ],
        );
        let types = choose_types(&h, ft, false).unwrap();
        assert_eq!(types, [Q8_0, Q8_0, Q8_0, Mxfp4, F16, F32, F32]);
        let pure = choose_types(&h, ft, true).unwrap();
        assert_eq!(pure, [Mxfp4, Mxfp4, Mxfp4, Mxfp4, F16, F32, F32]);
        // Tied embeddings take the output's rule.
        let h = header("gpt-oss", &[("token_embd.weight", &[256, 512])]);
        assert_eq!(choose_types(&h, ft, false).unwrap(), [Q8_0]);
        let h = header(
            "bailingmoe3",
            &[
                ("blk.0.attn_k_b.weight", &[256, 256, 4]),
                ("blk.0.ffn_gate_exps.weight", &[256, 256, 4]),
            ],
        );
        assert_eq!(choose_types(&h, ft, false).unwrap(), [Q8_0, Mxfp4]);
    }

    #[test]
    fn order_is_blocks_then_names() {
        let t = |n: &str| TensorInfo {
            name: n.into(),
            dims: vec![32],
            ty: GgmlType::F32,
            offset: 0,
            size: 128,
        };
        let ts = [
            t("blk.10.a"),
            t("output.weight"),
            t("blk.2.b"),
            t("blk.2.a"),
            t("token_embd.weight"),
        ];
        let names: Vec<&str> = llama_order(&ts)
            .iter()
            .map(|&i| ts[i].name.as_str())
            .collect();
        assert_eq!(
            names,
            [
                "output.weight",
                "token_embd.weight",
                "blk.2.a",
                "blk.2.b",
                "blk.10.a"
            ]
        );
    }

    /// llama.cpp's `LLM_TYPE_70B` per architecture: the registry's rule for
    /// the families ferrite runs (Llama: 80 layers with grouped-query
    /// attention; Qwen2: 80 layers), mix.rs's own for the others.
    #[test]
    fn seventy_b_by_architecture() {
        use crate::formats::gguf::{Metadata, Value};
        let facts = |arch: &str, layers: u32, heads: u32, kv_heads: u32| {
            let mut metadata = Metadata::default();
            metadata.insert("general.architecture".into(), Value::String(arch.into()));
            metadata.insert(format!("{arch}.block_count"), Value::U32(layers));
            metadata.insert(format!("{arch}.attention.head_count"), Value::U32(heads));
            metadata.insert(
                format!("{arch}.attention.head_count_kv"),
                Value::U32(kv_heads),
            );
            let h = GgufHeader {
                version: 3,
                metadata,
                tensors: Vec::new(),
                alignment: 32,
                data_offset: 0,
            };
            ModelFacts::new(&h).unwrap().is_70b
        };
        assert!(facts("llama", 80, 64, 8));
        assert!(!facts("llama", 80, 64, 64));
        assert!(!facts("llama", 40, 64, 8));
        assert!(facts("qwen2", 80, 64, 64));
        assert!(!facts("qwen2", 64, 64, 8));
        assert!(!facts("qwen3", 80, 64, 8));
        assert!(!facts("olmo2", 80, 64, 8));
        assert!(facts("olmo", 80, 64, 8));
        assert!(facts("deci", 80, 64, 8));
        assert!(facts("jais2", 68, 64, 8));
        assert!(!facts("jais2", 80, 64, 8));
    }
}
