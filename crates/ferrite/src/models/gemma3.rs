//! Gemma 3 (text) as llama.cpp's GGUF files lay it out
//! (`general.architecture = "gemma3"`).
//!
//! The token embedding is scaled by `sqrt(dim)`. Per layer: RMSNorm -> Q/K/V
//! projections -> per-head RMSNorm of Q and K -> RoPE (halves, ggml "neox")
//! -> grouped-query causal attention, over the last `sliding_window`
//! positions in local layers and over everything in global layers -> output
//! projection -> RMSNorm -> residual; RMSNorm -> GeGLU MLP (tanh GELU) ->
//! RMSNorm -> residual. Then a final RMSNorm and the output matrix (tied to
//! the embedding), optionally soft-capped.
//!
//! Local and global layers rotate with different RoPE bases
//! (`rope.freq_base_swa`, default 10 000, and `rope.freq_base`); linear RoPE
//! scaling (`rope.scaling.factor`, Gemma 3 4B and up) applies to global
//! layers only. Which layers are local comes from
//! `attention.sliding_window_pattern` (an array of per-layer flags, or a
//! period `n`: every `n`-th layer is global), by default a period of 6. The
//! norm weights are used as stored: the GGUF converter already added the 1
//! that Gemma's RMSNorm adds. Attention scores are scaled by
//! `1/sqrt(head_dim)` (`dim / heads` for the 27B model): llama.cpp multiplies
//! the queries by that (`f_attention_scale`) and then uses a softmax scale
//! of 1, the same product.
//!
//! A local layer's KV cache is a ring of `window + MAX_CHUNK - 1` slots
//! (position `p` in slot `p % capacity`), enough that storing a whole chunk
//! never overwrites a key an earlier token of the chunk still attends to.
//!
//! Reference: llama.cpp `src/models/gemma3.cpp` (graph and hyper-parameters),
//! `src/llama-hparams.cpp` (`set_swa_pattern`, `is_masked_swa`).
//!
//! The family's registry entry (`FAMILY`, see `models::registry`) is here
//! too: the Hugging Face class read as it (`HF`, Gemma 2's mapping with
//! Gemma 3's variant) and the converter's keys (`convert_keys`).

use std::sync::Arc;

use crate::formats::gguf::GgufFile;
use crate::formats::names;
use crate::layers::rope::{Rope, RopeStyle};
use crate::models::build;
use crate::models::hparams::HParams;
use crate::models::transformer::{Attention, Block, Decoder, GatedAct, Norm, Shape};
use crate::tensor::Loader;
use crate::Error;
use crate::formats::hf_decoder::Family as HfMapping;
use crate::models::registry::{BuiltinChat, DecoderFamily};
use crate::formats::hf_decoder::HfFamily;
use crate::models::gemma2;
use crate::convert::families::ConvertSpec;
use crate::convert::keys::{generic_keys, global_rope, rope_parameters, Ctx};
use crate::formats::gguf::{Metadata, Value};
use serde_json::Value as Json;

/// What differs between Gemma 2 and Gemma 3 (`models::gemma2` holds
/// Gemma 2's).
pub struct Variant {
    pub arch: &'static str,
    /// Per-head RMSNorm of queries and keys (Gemma 3).
    pub qk_norm: bool,
    /// Period of local/global layers when the file does not say
    /// (llama.cpp's defaults: Gemma 3 five local layers then a global one,
    /// 6; Gemma 2 alternating, 2).
    pub swa_period: usize,
    /// RoPE base of local layers when the file does not say; `None`: the
    /// global base (Gemma 2).
    pub local_rope_base: Option<f32>,
    /// The layer count of the model whose queries llama.cpp scales by
    /// `dim / heads` instead of the head size (Gemma 2 27B: 46; Gemma 3
    /// 27B: 62), when the file has no `attention.scale`.
    pub big_model_layers: usize,
    /// Reads `attn_logit_softcapping` (Gemma 2).
    pub attn_softcap: bool,
}

/// Gemma 3.
pub const GEMMA3: Variant = Variant {
    arch: "gemma3",
    qk_norm: true,
    swa_period: 6,
    local_rope_base: Some(10_000.0),
    big_model_layers: 62,
    attn_softcap: false,
};

/// Hyper-parameters of a Gemma 3 model, from GGUF metadata.
#[derive(Clone, Debug, PartialEq)]
pub struct Gemma3Config {
    pub n_vocab: usize,
    pub dim: usize,
    pub n_layers: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub ffn_dim: usize,
    pub norm_eps: f32,
    /// Values per head that RoPE rotates.
    pub rope_dims: usize,
    /// RoPE base of global layers.
    pub rope_base: f32,
    /// `1 / rope.scaling.factor` for global layers, else 1.
    pub rope_freq_scale: f32,
    /// RoPE base of local (sliding-window) layers.
    pub rope_base_local: f32,
    /// Positions a local layer attends to (including the current one);
    /// `None`: every layer is global.
    pub sliding_window: Option<usize>,
    /// Whether each layer is local (sliding-window).
    pub local: Vec<bool>,
    /// Multiplies `q . k` before the softmax.
    pub attention_scale: f32,
    /// `cap * tanh(logit / cap)` on the output logits, if set.
    pub final_logit_softcap: Option<f32>,
    /// `cap * tanh(score / cap)` on the attention scores, if set (Gemma 2).
    pub attn_logit_softcap: Option<f32>,
    /// The context length the model was trained with.
    pub n_ctx_train: usize,
}

impl Gemma3Config {
    #[cfg(test)]
    pub fn from_gguf(file: &GgufFile) -> Result<Gemma3Config, Error> {
        Gemma3Config::of_variant(file, &GEMMA3)
    }

    /// The config of a file of Gemma variant `v`.
    pub fn of_variant(file: &GgufFile, v: &Variant) -> Result<Gemma3Config, Error> {
        let source = file.path().display().to_string();
        let hp = HParams {
            meta: file.metadata(),
            arch: file.header.architecture().unwrap_or(v.arch),
            source: &source,
        };
        let common = hp.common(file, 8192)?;
        let (dim, n_layers, heads) = (common.dim, common.n_layers, common.heads);
        let head_dim = heads.head_dim;
        let rope = hp.rope(head_dim)?;
        if let Some(s) = &rope.scaling {
            return Err(hp.error(
                "rope.scaling.type",
                &format!("'{}' is not supported for {}", s.name(), v.arch),
            ));
        }
        let rope_dims = rope.dims;
        // Per-layer-type head and rope sizes exist in the format; Gemma 3
        // uses one size for both layer types.
        for (what, want) in [
            ("attention.key_length_swa", head_dim),
            ("attention.value_length_swa", head_dim),
            ("rope.dimension_count_swa", rope_dims),
        ] {
            if let Some(v) = hp.opt_size(what)? {
                if v != want {
                    return Err(hp.error(what, &format!("{v} differs from {want} (not supported)")));
                }
            }
        }

        let sliding_window = hp.opt_size("attention.sliding_window")?;
        let local = match sliding_window {
            None => vec![false; n_layers],
            Some(_) => swa_layers(&hp, n_layers, v.swa_period)?,
        };

        // llama.cpp scales queries by 1/sqrt(head_dim), except for the 27B
        // models, whose `query_pre_attn_scalar` is dim / heads (Gemma's
        // reference config, gemma_pytorch `config.py`). The converter does
        // not write that scalar, so the rule is llama.cpp's unless the file
        // has `attention.scale` (ferrite writes it for HF directories, from
        // `query_pre_attn_scalar`).
        let scale_dim = if n_layers == v.big_model_layers {
            dim / heads.n_heads
        } else {
            head_dim
        };
        let attention_scale = match hp.opt_f32("attention.scale")? {
            None => 1.0 / (scale_dim as f32).sqrt(),
            Some(s) if s > 0.0 => s,
            Some(s) => return Err(hp.error("attention.scale", &format!("{s} is not positive"))),
        };
        let cap = |key: &str| -> Result<Option<f32>, Error> {
            match hp.opt_f32(key)? {
                Some(c) if c > 0.0 => Ok(Some(c)),
                Some(0.0) | None => Ok(None),
                Some(c) => Err(hp.error(key, &format!("{c} is negative"))),
            }
        };
        let final_logit_softcap = cap("final_logit_softcapping")?;
        let attn_logit_softcap = if v.attn_softcap {
            cap("attn_logit_softcapping")?
        } else {
            None
        };
        let norm_eps = hp
            .opt_f32("attention.layer_norm_rms_epsilon")?
            .ok_or_else(|| hp.error("attention.layer_norm_rms_epsilon", "missing"))?;
        Ok(Gemma3Config {
            n_vocab: common.n_vocab,
            dim,
            n_layers,
            n_heads: heads.n_heads,
            n_kv_heads: heads.n_kv_heads,
            head_dim,
            ffn_dim: common.ffn_dim,
            norm_eps,
            rope_dims,
            rope_base: rope.base,
            rope_freq_scale: rope.freq_scale,
            rope_base_local: hp
                .opt_f32("rope.freq_base_swa")?
                .unwrap_or(v.local_rope_base.unwrap_or(rope.base)),
            sliding_window,
            local,
            attention_scale,
            final_logit_softcap,
            attn_logit_softcap,
            n_ctx_train: common.n_ctx_train,
        })
    }
}

/// Which layers are local: `attention.sliding_window_pattern` as per-layer
/// flags, or as a period `n` (layer `l` is local unless `l % n == n - 1`;
/// `n = 0`: all local), by default `default_period`.
fn swa_layers(hp: &HParams, n_layers: usize, default_period: usize) -> Result<Vec<bool>, Error> {
    const KEY: &str = "attention.sliding_window_pattern";
    let period = match hp.opt_value(KEY) {
        None => default_period,
        Some(v) if v.as_array().is_some() => {
            return hp
                .opt_flags(KEY, n_layers)?
                .ok_or_else(|| hp.error(KEY, "missing"))
        }
        Some(v) => match v.as_u64().and_then(|n| usize::try_from(n).ok()) {
            Some(n) => n,
            None => return Err(hp.error(KEY, &format!("{v} is not a layer period"))),
        },
    };
    Ok((0..n_layers)
        .map(|l| period == 0 || l % period < period - 1)
        .collect())
}

/// Loads a Gemma 3 file.
pub fn load(file: Arc<GgufFile>) -> Result<Decoder, Error> {
    load_variant(file, &GEMMA3)
}

/// Loads a file of Gemma variant `v`.
pub fn load_variant(file: Arc<GgufFile>, v: &Variant) -> Result<Decoder, Error> {
    let c = Gemma3Config::of_variant(&file, v)?;
    let w = Loader::new(file);
    let s = Shape {
        n_vocab: c.n_vocab,
        dim: c.dim,
        n_heads: c.n_heads,
        n_kv_heads: c.n_kv_heads,
        head_dim: c.head_dim,
        ffn_dim: c.ffn_dim,
        n_ctx_train: c.n_ctx_train,
    };
    let (dim, hd, eps) = (c.dim, c.head_dim, c.norm_eps);
    // Rotations: 0 for global layers, 1 for local ones.
    let ropes = vec![
        Rope::new(
            c.rope_dims,
            c.rope_base,
            c.rope_freq_scale,
            RopeStyle::Halves,
        ),
        Rope::new(c.rope_dims, c.rope_base_local, 1.0, RopeStyle::Halves),
    ];
    let qk_norm = |name: &str| -> Result<Option<Norm>, Error> {
        if v.qk_norm {
            build::rms(&w, name, hd, eps).map(Some)
        } else {
            Ok(None)
        }
    };
    let blocks = (0..c.n_layers)
        .map(|l| {
            let local = c.local[l];
            Ok(Block {
                attn_norm: build::rms(&w, &names::attn_norm(l), dim, eps)?,
                attn: Attention {
                    qkv: build::qkv(&w, l, &s)?,
                    q_norm: qk_norm(&names::attn_q_norm(l))?,
                    k_norm: qk_norm(&names::attn_k_norm(l))?,
                    out: build::attn_output(&w, l, &s)?,
                    rope: Some(usize::from(local)),
                    window: if local { c.sliding_window } else { None },
                    scale: c.attention_scale,
                    softcap: c.attn_logit_softcap,
                    sinks: None,
                },
                post_attn_norm: Some(build::rms(&w, &names::post_attention_norm(l), dim, eps)?),
                ffn_norm: build::rms(&w, &names::ffn_norm(l), dim, eps)?,
                mlp: build::gated_mlp(&w, l, &s, GatedAct::GeluTanh)?,
                post_ffn_norm: Some(build::rms(&w, &names::post_ffw_norm(l), dim, eps)?),
            })
        })
        .collect::<Result<Vec<_>, Error>>()?;
    let (mut input, output) = build::token_input(&w, &s)?;
    input.scale = Some((dim as f32).sqrt());
    let mut head = build::head(build::rms(&w, names::OUTPUT_NORM, dim, eps)?, output);
    head.softcap = c.final_logit_softcap;
    Ok(Decoder {
        arch: v.arch.into(),
        shape: s,
        input,
        ropes,
        blocks,
        head,
    })
}

// How a Hugging Face directory of this family becomes its GGUF file
// (`formats::hf_decoder` runs it).

/// `Gemma3ForCausalLM` directories (the text model).
const HF: HfFamily = HfFamily {
    arch: "gemma3",
    config: |c, k| gemma2::gemma_config(c, k, &GEMMA3),
    layer: &gemma2::HF_LAYER,
    norm_plus_one: true,
    permute_qk: false,
    mxfp4: false,
    modules: None,
    special: None,
};

/// The Gemma 3 family: GGUF `gemma3`, read from `Gemma3ForCausalLM` (the
/// text model), chatted with Gemma's turns.
pub(crate) const FAMILY: DecoderFamily = DecoderFamily {
    hf: &[("Gemma3ForCausalLM", HfMapping::Table(&HF))],
    chat: BuiltinChat::Gemma,
    convert: Some(ConvertSpec {
        sentencepiece: true,
        trims_token_embd: true,
        ..ConvertSpec::new(convert_keys)
    }),
    ..DecoderFamily::new(GEMMA3.arch, load)
};

/// `Gemma3Model`: the generic keys, then some again with Gemma 3's
/// defaults (a key written again keeps its place).
fn convert_keys(x: &Ctx, md: &mut Metadata) -> Result<(), Error> {
    generic_keys(x, md)?;
    let uint_or = |key: &str, default: u32| -> Result<Value, Error> {
        x.find(&[key])
            .map_or(Ok(Value::U32(default)), |v| x.uint(v, key))
    };
    let float_or = |key: &str, default: f64| -> Result<Value, Error> {
        x.find(&[key])
            .map_or(Ok(Value::F32(default as f32)), |v| x.float(v, key))
    };
    x.put(
        md,
        "context_length",
        uint_or("max_position_embeddings", 131072)?,
    );
    x.put(
        md,
        "attention.head_count",
        uint_or("num_attention_heads", 8)?,
    );
    x.put(
        md,
        "attention.layer_norm_rms_epsilon",
        float_or("rms_norm_eps", 1e-6)?,
    );
    x.put(md, "attention.key_length", uint_or("head_dim", 256)?);
    x.put(md, "attention.value_length", uint_or("head_dim", 256)?);
    let rp = rope_parameters(x.c);
    let theta = match global_rope(&rp).get("rope_theta") {
        Some(t) => x.float(t, "rope_theta")?,
        None => Value::F32(1_000_000.0),
    };
    x.put(md, "rope.freq_base", theta);
    if x.c
        .get("attn_logit_softcapping")
        .is_some_and(|v| !v.is_null())
    {
        return Err(x.bad(
            "attn_logit_softcapping",
            "Gemma 3 has none (the converter refuses it)",
        ));
    }
    // Written when truthy (not null, not 0).
    if let Some(v) = x
        .find(&["final_logit_softcapping"])
        .filter(|v| v.as_f64() != Some(0.0))
    {
        x.put(
            md,
            "final_logit_softcapping",
            x.float(v, "final_logit_softcapping")?,
        );
    }
    if x.c.get("sliding_window_pattern").and_then(Json::as_u64) != Some(1) {
        x.put(
            md,
            "attention.sliding_window",
            x.need_uint(&["sliding_window"])?,
        );
    }
    x.put(
        md,
        "attention.head_count_kv",
        uint_or("num_key_value_heads", 4)?,
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::gguf::{write_gguf, Array, Metadata, TensorToWrite, Value};
    use ferrite_kernels::GgmlType;

    /// The config of a small Gemma 3 file: 12 layers, 4 heads of 32 over 2
    /// KV heads, a 16-position window; `set` overrides or adds keys, `drop`
    /// removes them. The only tensor is a 10-token embedding.
    fn config(set: &[(&str, Value)], drop: &[&str]) -> Result<Gemma3Config, Error> {
        let base = [
            ("general.architecture", Value::String("gemma3".into())),
            ("gemma3.embedding_length", Value::U32(64)),
            ("gemma3.block_count", Value::U32(12)),
            ("gemma3.feed_forward_length", Value::U32(128)),
            ("gemma3.attention.head_count", Value::U32(4)),
            ("gemma3.attention.head_count_kv", Value::U32(2)),
            ("gemma3.attention.key_length", Value::U32(32)),
            ("gemma3.attention.value_length", Value::U32(32)),
            ("gemma3.attention.layer_norm_rms_epsilon", Value::F32(1e-6)),
            ("gemma3.rope.freq_base", Value::F32(1e6)),
            ("gemma3.attention.sliding_window", Value::U32(16)),
        ];
        let mut meta = Metadata::default();
        for (k, v) in set.iter().cloned().chain(base) {
            if !drop.contains(&k) {
                meta.insert(k.to_string(), v);
            }
        }
        let embd = vec![0u8; 64 * 10 * 4];
        let tensors = [TensorToWrite {
            name: names::TOKEN_EMBD,
            dims: &[64, 10],
            ty: GgmlType::F32,
            data: &embd,
        }];
        let mut bytes = Vec::new();
        write_gguf(&mut bytes, 3, &meta, &tensors).unwrap();
        Gemma3Config::from_gguf(&GgufFile::from_vec("test.gguf", bytes)?)
    }

    fn pattern(local: &[bool]) -> String {
        local.iter().map(|&l| if l { 'L' } else { 'G' }).collect()
    }

    #[test]
    fn defaults_follow_llama_cpp() {
        let c = config(&[], &[]).unwrap();
        assert_eq!(pattern(&c.local), "LLLLLGLLLLLG");
        assert_eq!(
            (c.n_vocab, c.n_heads, c.n_kv_heads, c.head_dim),
            (10, 4, 2, 32)
        );
        assert_eq!(
            (c.rope_base, c.rope_base_local, c.rope_freq_scale),
            (1e6, 1e4, 1.0)
        );
        assert_eq!(c.attention_scale, 1.0 / 32f32.sqrt());
        assert_eq!(c.final_logit_softcap, None);
        assert_eq!(c.sliding_window, Some(16));
    }

    #[test]
    fn the_sliding_window_pattern_is_read_in_every_form() {
        let key = "gemma3.attention.sliding_window_pattern";
        let c = config(&[(key, Value::U32(3))], &[]).unwrap();
        assert_eq!(pattern(&c.local), "LLGLLGLLGLLG");
        let c = config(&[(key, Value::U32(0))], &[]).unwrap();
        assert_eq!(pattern(&c.local), "LLLLLLLLLLLL");
        let c = config(&[(key, Value::U32(1))], &[]).unwrap();
        assert_eq!(pattern(&c.local), "GGGGGGGGGGGG");
        let flags: Vec<bool> = (0..12).map(|l| l % 2 == 0).collect();
        let c = config(&[(key, Value::Array(Array::Bool(flags)))], &[]).unwrap();
        assert_eq!(pattern(&c.local), "LGLGLGLGLGLG");
        let c = config(&[(key, Value::Array(Array::I32(vec![1; 12])))], &[]).unwrap();
        assert_eq!(pattern(&c.local), "LLLLLLLLLLLL");
        let err = config(&[(key, Value::Array(Array::Bool(vec![true; 11])))], &[]).unwrap_err();
        assert!(err.to_string().contains(key), "{err}");
        let err = config(&[(key, Value::String("6".into()))], &[]).unwrap_err();
        assert!(err.to_string().contains(key), "{err}");
        // Without a window every layer is global, whatever the pattern.
        let c = config(
            &[(key, Value::U32(2))],
            &["gemma3.attention.sliding_window"],
        )
        .unwrap();
        assert_eq!(pattern(&c.local), "GGGGGGGGGGGG");
    }

    #[test]
    fn larger_models_options_are_read() {
        // Gemma 3 4B and up: linear RoPE scaling of global layers, a local
        // base, soft-capping; 27B (62 layers): queries scaled by dim/heads.
        let c = config(
            &[
                ("gemma3.rope.scaling.type", Value::String("linear".into())),
                ("gemma3.rope.scaling.factor", Value::F32(8.0)),
                ("gemma3.rope.freq_base_swa", Value::F32(5e3)),
                ("gemma3.final_logit_softcapping", Value::F32(30.0)),
                ("gemma3.block_count", Value::U32(62)),
            ],
            &[],
        )
        .unwrap();
        assert_eq!((c.rope_freq_scale, c.rope_base_local), (0.125, 5e3));
        assert_eq!(c.final_logit_softcap, Some(30.0));
        assert_eq!(c.attention_scale, 1.0 / (64f32 / 4.0).sqrt());
        let err = config(
            &[
                ("gemma3.rope.scaling.type", Value::String("yarn".into())),
                ("gemma3.rope.scaling.factor", Value::F32(8.0)),
                (
                    "gemma3.rope.scaling.original_context_length",
                    Value::U32(4096),
                ),
            ],
            &[],
        )
        .unwrap_err();
        assert!(err.to_string().contains("not supported"), "{err}");
    }

    #[test]
    fn bad_metadata_is_an_error_naming_the_key() {
        for (set, drop, key) in [
            (
                vec![],
                vec!["gemma3.attention.layer_norm_rms_epsilon"],
                "layer_norm_rms_epsilon",
            ),
            (
                vec![("gemma3.attention.head_count_kv", Value::U32(3))],
                vec![],
                "head_count_kv",
            ),
            (
                vec![("gemma3.attention.value_length", Value::U32(16))],
                vec![],
                "value_length",
            ),
            (
                vec![("gemma3.rope.dimension_count", Value::U32(33))],
                vec![],
                "dimension_count",
            ),
            (
                vec![("gemma3.embedding_length", Value::U32(32))],
                vec![],
                "token_embd",
            ),
        ] {
            let err = config(&set, &drop).unwrap_err().to_string();
            assert!(err.contains(key), "{key}: {err}");
        }
    }
}
