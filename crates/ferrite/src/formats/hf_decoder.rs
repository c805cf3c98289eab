//! Decoder LLMs from Hugging Face directories (`config.json`,
//! `model.safetensors` or shards listed in `model.safetensors.index.json`,
//! `tokenizer.json`, `tokenizer_config.json`), turned into an in-memory
//! GGUF file laid out as llama.cpp's `convert_hf_to_gguf.py` lays it out,
//! which the GGUF loaders (`models::llama`, `qwen2`, `gpt2`) then run
//! unchanged: the storage seam is "anything expressible as GGUF metadata and
//! tensors", as for llama2.c checkpoints (`super::llama2c`).
//!
//! - `config.json` becomes the `{arch}.*` hyper-parameter keys, checked
//!   here first (errors name the config field): `LlamaForCausalLM` ->
//!   `llama`, `Qwen2ForCausalLM` -> `qwen2`, `GPT2LMHeadModel` -> `gpt2`.
//! - Tensors are renamed (`model.layers.N.self_attn.q_proj.weight` ->
//!   `blk.N.attn_q.weight`, ...; `lm_head.weight` is dropped when
//!   `tie_word_embeddings`) and keep their type (F32, F16 and BF16 all have
//!   matmul kernels; other dtypes are refused).
//! - RoPE: HF Llama rotates the two halves of each head (`rotate_half`),
//!   while llama.cpp's `llama` files rotate adjacent pairs; as the
//!   converter does (`LlamaModel.permute`), the rows of `q_proj` and
//!   `k_proj` (weights and biases) are permuted per head from
//!   `[h][j][i]` to `[h][i][j]` (`j` the half, `i < head_dim / 2`), so that
//!   the Llama loader's adjacent-pair RoPE computes HF's. Qwen2 files keep
//!   halves (ggml "neox"): no permutation.
//! - GPT-2's `Conv1D` weights are stored `(in, out)`; they are transposed to
//!   ggml's `(out, in)` rows.
//! - The tokenizer travels as metadata: `tokenizer.json` whole under
//!   `tokenizer.huggingface.json` (run by the `tokenizers` crate, see
//!   `crate::tokenize`), BOS/EOS/PAD ids from `tokenizer_config.json`'s
//!   token texts (else `config.json`'s ids), its explicit
//!   `add_bos_token` / `add_eos_token`, and the chat template
//!   (`chat_template.jinja`, else `tokenizer_config.json`'s
//!   `chat_template`) under `tokenizer.chat_template`.
//!
//! Memory: the GGUF file is built in memory, so loading costs the model's
//! size once in RAM (the safetensors files are only mapped while it is
//! built; unchanged tensors are copied straight from the map).
//!
//! Reference: llama.cpp `convert_hf_to_gguf.py` (`LlamaModel`,
//! `Qwen2Model`, `GPT2Model`), `gguf-py/gguf/vocab.py` (`SpecialVocab`);
//! HF `modeling_llama.py`, `modeling_qwen2.py`, `modeling_gpt2.py`.

use std::borrow::Cow;
use std::path::Path;

use ferrite_kernels::GgmlType;
use serde_json::Value as Json;

use crate::formats::gguf::{write_gguf, Array, GgufFile, Metadata, TensorToWrite, Value};
use crate::formats::names;
use crate::formats::safetensors::{SafetensorsDir, StTensorInfo};
use crate::layers::rope::Scaling;
use crate::models::hparams::MAX_LAYERS;
use crate::tokenize::KEY_HF_JSON;
use crate::Error;

mod moe;

/// Largest size hyper-parameter accepted (as `models::hparams`).
const MAX_SIZE: u64 = 1 << 24;
/// Largest `tokenizer.json` read.
const MAX_TOKENIZER_BYTES: u64 = 256 << 20;
/// Largest chat template read.
const MAX_TEMPLATE_BYTES: u64 = 1 << 20;

/// How a family of HF checkpoints maps onto a GGUF architecture.
#[derive(Clone, Copy)]
pub(crate) enum Family {
    Llama,
    /// Llama with a sliding window on every layer (`sliding_window`).
    Mistral,
    Qwen2,
    Qwen3,
    Gpt2,
    /// Qwen3 / Qwen2 with mixture-of-experts layers (`hf_decoder/moe.rs`).
    Qwen3Moe,
    Qwen2Moe,
    /// A family described as data by its `models::` file.
    Table(&'static HfFamily),
}

/// An HF decoder family whose tensors are renamed one to one (and
/// possibly permuted or shifted): its `models::` file says how.
pub(crate) struct HfFamily {
    /// `general.architecture` of the GGUF file.
    pub arch: &'static str,
    /// Writes the `{arch}.*` keys from `config.json`.
    pub config: fn(&Config, &mut Keys) -> Result<Hp, Error>,
    /// Per-layer modules: HF module (`self_attn.q_proj`), GGUF name.
    pub layer: &'static [(&'static str, LayerName)],
    /// Norm weights get 1 added (Gemma's `(1 + w)` RMSNorm, as the
    /// converter stores them).
    pub norm_plus_one: bool,
    /// Q/K rows permuted for adjacent-pair RoPE (Llama-style files).
    pub permute_qk: bool,
}

/// The decoder classes read, by their name in `config.json`
/// `architectures`: the one place they are matched.
const HF_DECODERS: [(&str, Family); 12] = [
    ("LlamaForCausalLM", Family::Llama),
    ("MistralForCausalLM", Family::Mistral),
    ("Qwen2ForCausalLM", Family::Qwen2),
    ("Qwen3ForCausalLM", Family::Qwen3),
    ("GPT2LMHeadModel", Family::Gpt2),
    ("Qwen3MoeForCausalLM", Family::Qwen3Moe),
    ("Qwen2MoeForCausalLM", Family::Qwen2Moe),
    (
        "Gemma2ForCausalLM",
        Family::Table(&crate::models::gemma2::HF),
    ),
    (
        "Gemma3ForCausalLM",
        Family::Table(&crate::models::gemma2::HF_GEMMA3),
    ),
    ("Phi3ForCausalLM", Family::Table(&crate::models::phi3::HF)),
    ("Olmo2ForCausalLM", Family::Table(&crate::models::olmo2::HF)),
    (
        "SmolLM3ForCausalLM",
        Family::Table(&crate::models::smollm3::HF),
    ),
];

impl Family {
    /// `general.architecture` of the GGUF file.
    pub(crate) fn gguf_name(self) -> &'static str {
        match self {
            Family::Llama | Family::Mistral => "llama",
            Family::Qwen2 => "qwen2",
            Family::Qwen3 => "qwen3",
            Family::Gpt2 => "gpt2",
            Family::Qwen3Moe => "qwen3moe",
            Family::Qwen2Moe => "qwen2moe",
            Family::Table(t) => t.arch,
        }
    }

    /// The dense family whose attention layers this one has.
    fn dense(self) -> Family {
        match self {
            Family::Qwen3Moe => Family::Qwen3,
            Family::Qwen2Moe => Family::Qwen2,
            f => f,
        }
    }
}

/// Names of the HF decoder classes [`open`] reads.
pub fn supported_classes() -> Vec<&'static str> {
    HF_DECODERS.iter().map(|(name, _)| *name).collect()
}

fn architectures(config: &Json) -> Vec<&str> {
    config
        .get("architectures")
        .and_then(Json::as_array)
        .map(|a| a.iter().filter_map(Json::as_str).collect())
        .unwrap_or_default()
}

/// `config.json`, read with errors that name the field.
pub struct Config<'a> {
    pub json: &'a Json,
    pub source: String,
}

impl Config<'_> {
    pub fn bad(&self, key: &str, problem: impl std::fmt::Display) -> Error {
        Error::model(&self.source, format!("'{key}': {problem}"))
    }

    pub fn get(&self, key: &str) -> Option<&Json> {
        self.json.get(key).filter(|v| !v.is_null())
    }

    pub fn opt_size(&self, key: &str) -> Result<Option<usize>, Error> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => match v.as_u64() {
                Some(n) if n > 0 && n <= MAX_SIZE => Ok(Some(n as usize)),
                _ => Err(self.bad(key, format!("{v} is not a size in 1..={MAX_SIZE}"))),
            },
        }
    }

    pub fn size(&self, key: &str) -> Result<usize, Error> {
        self.opt_size(key)?.ok_or_else(|| self.bad(key, "missing"))
    }

    /// The first of `keys` present (GPT-2 configs have two spellings).
    pub fn size_of(&self, keys: &[&str]) -> Result<usize, Error> {
        for key in keys {
            if let Some(n) = self.opt_size(key)? {
                return Ok(n);
            }
        }
        Err(self.bad(keys[0], "missing"))
    }

    pub fn opt_f32(&self, key: &str) -> Result<Option<f32>, Error> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => match v.as_f64() {
                Some(x) if x.is_finite() && (x as f32).is_finite() => Ok(Some(x as f32)),
                _ => Err(self.bad(key, format!("{v} is not a finite number"))),
            },
        }
    }

    pub fn opt_bool(&self, key: &str) -> Result<Option<bool>, Error> {
        match self.get(key) {
            None => Ok(None),
            Some(Json::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err(self.bad(key, format!("{v} is not true or false"))),
        }
    }

    pub fn opt_str(&self, key: &str) -> Result<Option<&str>, Error> {
        match self.get(key) {
            None => Ok(None),
            Some(Json::String(s)) => Ok(Some(s)),
            Some(v) => Err(self.bad(key, format!("{v} is not a string"))),
        }
    }
}

/// The checked hyper-parameters the tensor mapping needs.
#[derive(Clone, Debug)]
pub(crate) struct Hp {
    pub(crate) n_layers: usize,
    pub(crate) n_heads: usize,
    pub(crate) n_kv_heads: usize,
    pub(crate) head_dim: usize,
    pub(crate) tied: bool,
    pub(crate) vocab_size: Option<usize>,
    /// Tensors the converter makes up: `rope_freqs.weight` (Llama 3).
    pub(crate) extra: Vec<(&'static str, Vec<f32>)>,
}

/// Metadata being written, under `{arch}.` keys.
pub struct Keys<'a> {
    md: &'a mut Metadata,
    arch: &'static str,
}

impl Keys<'_> {
    pub fn set(&mut self, what: &str, v: Value) {
        self.md.insert(format!("{}.{what}", self.arch), v);
    }

    pub fn size(&mut self, what: &str, n: usize) {
        // Sizes are checked to be at most MAX_SIZE < 2^32.
        self.set(what, Value::U32(n as u32));
    }
}

/// Heads of a Llama-style config, checked against each other and the width.
pub fn heads(c: &Config, dim: usize) -> Result<(usize, usize, usize), Error> {
    let n_heads = c.size("num_attention_heads")?;
    let n_kv_heads = c.opt_size("num_key_value_heads")?.unwrap_or(n_heads);
    if !n_heads.is_multiple_of(n_kv_heads) {
        return Err(c.bad(
            "num_key_value_heads",
            format!("{n_heads} attention heads cannot be grouped over {n_kv_heads} KV heads"),
        ));
    }
    let head_dim = match c.opt_size("head_dim")? {
        Some(d) => d,
        None if dim.is_multiple_of(n_heads) => dim / n_heads,
        None => {
            return Err(c.bad(
                "num_attention_heads",
                format!("hidden_size {dim} is not divisible by {n_heads} heads"),
            ))
        }
    };
    if !head_dim.is_multiple_of(2) {
        return Err(c.bad("head_dim", format!("{head_dim} is odd (RoPE needs pairs)")));
    }
    Ok((n_heads, n_kv_heads, head_dim))
}

/// The layer count, at most [`MAX_LAYERS`].
pub fn layers(c: &Config, key: &str) -> Result<usize, Error> {
    let n = c.size(key)?;
    if n > MAX_LAYERS {
        return Err(c.bad(
            key,
            format!("{n} layers is more than the {MAX_LAYERS} ferrite accepts"),
        ));
    }
    Ok(n)
}

/// RoPE base and scaling: `rope_theta` / `rope_scaling` (transformers 4)
/// or `rope_parameters` (transformers 5). Unscaled, `linear`, `yarn` and
/// `dynamic` become `rope.scaling.*` keys (`dynamic` is ferrite's own: the
/// converter writes nothing for it); `llama3` becomes the per-pair factors
/// the converter stores as `rope_freqs.weight`, returned here.
pub fn rope(c: &Config, k: &mut Keys, dims: usize) -> Result<Option<Vec<f32>>, Error> {
    let params = c.get("rope_parameters");
    let scaling = c.get("rope_scaling").or(params);
    let theta = match params.and_then(|p| p.get("rope_theta")) {
        Some(v) => Some(
            v.as_f64()
                .filter(|x| *x > 0.0 && (*x as f32).is_finite())
                .ok_or_else(|| {
                    c.bad(
                        "rope_parameters.rope_theta",
                        format!("{v} is not a positive number"),
                    )
                })? as f32,
        ),
        None => match c.opt_f32("rope_theta")? {
            Some(t) if t <= 0.0 => return Err(c.bad("rope_theta", format!("{t} is not positive"))),
            t => t,
        },
    };
    let base = theta.unwrap_or(10_000.0);
    k.set("rope.freq_base", Value::F32(base));
    if let Some(f) = c.opt_f32("partial_rotary_factor")? {
        if f != 1.0 {
            return Err(c.bad("partial_rotary_factor", "partial RoPE is not supported"));
        }
    }
    let Some(s) = scaling else {
        return Ok(None);
    };
    let field = if c.get("rope_scaling").is_some() {
        "rope_scaling"
    } else {
        "rope_parameters"
    };
    let kind = s
        .get("rope_type")
        .or_else(|| s.get("type"))
        .and_then(Json::as_str)
        .unwrap_or("default");
    // A number of the scaling's parameters; `None` when absent or null.
    let num = |key: &str| -> Result<Option<f32>, Error> {
        match s.get(key).filter(|v| !v.is_null()) {
            None => Ok(None),
            Some(v) => match v.as_f64() {
                Some(x) if x.is_finite() && (x as f32).is_finite() => Ok(Some(x as f32)),
                _ => Err(c.bad(&format!("{field}.{key}"), format!("{v} is not a number"))),
            },
        }
    };
    let need = |key: &str| -> Result<f32, Error> {
        num(key)?.ok_or_else(|| c.bad(&format!("{field}.{key}"), "missing"))
    };
    let ctx = |key: &str| -> Result<usize, Error> {
        let v = s
            .get(key)
            .ok_or_else(|| c.bad(&format!("{field}.{key}"), "missing"))?;
        v.as_u64()
            .filter(|n| *n > 0 && *n <= MAX_SIZE)
            .map(|n| n as usize)
            .ok_or_else(|| c.bad(&format!("{field}.{key}"), format!("{v} is not a size")))
    };
    let scaling = match kind {
        "default" => return Ok(None),
        "linear" => Scaling::Linear {
            factor: need("factor")?,
        },
        "llama3" => Scaling::Llama3 {
            factor: need("factor")?,
            low_freq_factor: need("low_freq_factor")?,
            high_freq_factor: need("high_freq_factor")?,
            original_ctx: ctx("original_max_position_embeddings")?,
        },
        "yarn" => {
            if s.get("truncate").and_then(Json::as_bool) == Some(false) {
                return Err(c.bad(
                    &format!("{field}.truncate"),
                    "YaRN without truncation is not supported yet",
                ));
            }
            let factor = need("factor")?;
            let attention_factor = match (
                num("attention_factor")?,
                num("mscale")?,
                num("mscale_all_dim")?,
            ) {
                (Some(a), _, _) => Some(a),
                (None, Some(m), Some(all)) if m != 0.0 && all != 0.0 => {
                    let get = |m: f32| {
                        if factor <= 1.0 {
                            1.0
                        } else {
                            0.1 * m * factor.ln() + 1.0
                        }
                    };
                    Some(get(m) / get(all))
                }
                _ => None,
            };
            Scaling::Yarn {
                factor,
                original_ctx: ctx("original_max_position_embeddings")?,
                beta_fast: num("beta_fast")?.filter(|b| *b != 0.0).unwrap_or(32.0),
                beta_slow: num("beta_slow")?.filter(|b| *b != 0.0).unwrap_or(1.0),
                attention_factor,
                truncate: true,
            }
        }
        "dynamic" => Scaling::Dynamic {
            factor: need("factor")?,
            max_positions: c.size("max_position_embeddings")?,
        },
        other => {
            return Err(c.bad(
                field,
                format!("RoPE scaling '{other}' is not supported yet"),
            ))
        }
    };
    scaling
        .check()
        .map_err(|e| c.bad(field, format!("{}: {e}", scaling.name())))?;
    let ty = |k: &mut Keys, t: &str| k.set("rope.scaling.type", Value::String(t.into()));
    match scaling {
        Scaling::Linear { factor } => {
            ty(k, "linear");
            k.set("rope.scaling.factor", Value::F32(factor));
        }
        Scaling::Llama3 { .. } => return Ok(Some(scaling.llama3_factors(dims, base))),
        Scaling::Yarn {
            factor,
            original_ctx,
            beta_fast,
            beta_slow,
            attention_factor,
            ..
        } => {
            ty(k, "yarn");
            k.set("rope.scaling.factor", Value::F32(factor));
            k.size("rope.scaling.original_context_length", original_ctx);
            k.set("rope.scaling.yarn_beta_fast", Value::F32(beta_fast));
            k.set("rope.scaling.yarn_beta_slow", Value::F32(beta_slow));
            if let Some(a) = attention_factor {
                k.set("rope.scaling.yarn_attn_factor", Value::F32(a));
            }
        }
        Scaling::Dynamic {
            factor,
            max_positions,
        } => {
            ty(k, "dynamic");
            k.set("rope.scaling.factor", Value::F32(factor));
            k.size("rope.scaling.original_context_length", max_positions);
        }
    }
    Ok(None)
}

/// Sliding-window attention as `attention.sliding_window` (the window, in
/// positions including the query's own, as transformers' mask) and
/// `attention.sliding_window_pattern` (per layer: whether it slides):
/// Mistral's `sliding_window` on every layer (null: none); Qwen2 / Qwen3's
/// when `use_sliding_window`, on the layers `layer_types` marks
/// `sliding_attention` (else those from `max_window_layers` on, as
/// transformers derives them). convert_hf_to_gguf.py writes neither for
/// these classes (llama.cpp runs them without a window).
fn sliding_window(c: &Config, f: Family, n_layers: usize, k: &mut Keys) -> Result<(), Error> {
    let flags = match f {
        Family::Mistral => match c.opt_size("sliding_window")? {
            Some(_) => vec![true; n_layers],
            None => return Ok(()),
        },
        Family::Qwen2 | Family::Qwen3 if c.opt_bool("use_sliding_window")? == Some(true) => {
            match c.get("layer_types") {
                Some(v) => layer_types(c, v, n_layers)?,
                None => {
                    let from = c.opt_size("max_window_layers")?.unwrap_or(0);
                    (0..n_layers).map(|l| l >= from).collect()
                }
            }
        }
        _ => return Ok(()),
    };
    let window = c.size("sliding_window")?;
    if flags.iter().any(|&f| f) {
        k.size("attention.sliding_window", window);
        k.set(
            "attention.sliding_window_pattern",
            Value::Array(Array::Bool(flags)),
        );
    }
    Ok(())
}

/// `layer_types` (`v`): whether each of the `n` layers slides
/// (`sliding_attention`) or not (`full_attention`).
pub fn layer_types(c: &Config, v: &Json, n: usize) -> Result<Vec<bool>, Error> {
    let bad = || {
        c.bad(
            "layer_types",
            format!("expected {n} of 'sliding_attention' / 'full_attention'"),
        )
    };
    let types = v.as_array().filter(|a| a.len() == n).ok_or_else(bad)?;
    types
        .iter()
        .map(|t| match t.as_str() {
            Some("sliding_attention") => Ok(true),
            Some("full_attention") => Ok(false),
            _ => Err(bad()),
        })
        .collect()
}

/// Llama and Qwen2 hyper-parameters into `md`.
fn llama_config(c: &Config, f: Family, md: &mut Metadata) -> Result<Hp, Error> {
    let mut k = Keys {
        md,
        arch: f.gguf_name(),
    };
    let n_layers = layers(c, "num_hidden_layers")?;
    sliding_window(c, f.dense(), n_layers, &mut k)?;
    moe::moe_config(c, f, n_layers, &mut k)?;
    let mut hp = llama_keys(c, &mut k, "hidden_act", &["silu"])?;
    hp.tied = c.opt_bool("tie_word_embeddings")?.unwrap_or(false);
    Ok(hp)
}

/// The keys of a Llama-style config (sizes, heads, RoPE, RMSNorm epsilon),
/// its MLP activation `act_key` checked to be one of `acts` (the first is
/// the default); untied unless the caller says otherwise.
pub(crate) fn llama_keys(
    c: &Config,
    k: &mut Keys,
    act_key: &str,
    acts: &[&str],
) -> Result<Hp, Error> {
    let dim = c.size("hidden_size")?;
    let n_layers = layers(c, "num_hidden_layers")?;
    let (n_heads, n_kv_heads, head_dim) = heads(c, dim)?;
    let act = c.opt_str(act_key)?.unwrap_or(acts[0]);
    if !acts.contains(&act) {
        return Err(c.bad(
            act_key,
            format!("'{act}' is not supported ({})", acts.join(", ")),
        ));
    }
    if let Some(n_ctx) = c.opt_size("max_position_embeddings")? {
        k.size("context_length", n_ctx);
    }
    k.size("embedding_length", dim);
    k.size("block_count", n_layers);
    k.size("feed_forward_length", c.size("intermediate_size")?);
    k.size("attention.head_count", n_heads);
    k.size("attention.head_count_kv", n_kv_heads);
    // As the converter: written whenever config.json states it.
    if c.opt_size("head_dim")?.is_some() || head_dim * n_heads != dim {
        k.size("attention.key_length", head_dim);
        k.size("attention.value_length", head_dim);
    }
    k.size("rope.dimension_count", head_dim);
    let rope_freqs = rope(c, k, head_dim)?;
    let eps = c.opt_f32("rms_norm_eps")?.unwrap_or(1e-6);
    k.set("attention.layer_norm_rms_epsilon", Value::F32(eps));
    Ok(Hp {
        n_layers,
        n_heads,
        n_kv_heads,
        head_dim,
        tied: false,
        vocab_size: c.opt_size("vocab_size")?,
        extra: rope_freqs
            .map(|f| vec![(names::ROPE_FREQS, f)])
            .unwrap_or_default(),
    })
}

/// GPT-2 hyper-parameters into `md`.
fn gpt2_config(c: &Config, md: &mut Metadata) -> Result<Hp, Error> {
    let mut k = Keys { md, arch: "gpt2" };
    let dim = c.size_of(&["n_embd", "hidden_size"])?;
    let n_layers = layers(c, "n_layer")?;
    let n_heads = c.size_of(&["n_head", "num_attention_heads"])?;
    if !dim.is_multiple_of(n_heads) {
        return Err(c.bad(
            "n_head",
            format!("n_embd {dim} is not divisible by {n_heads} heads"),
        ));
    }
    let act = c.opt_str("activation_function")?.unwrap_or("gelu_new");
    if !matches!(act, "gelu_new" | "gelu_pytorch_tanh") {
        return Err(c.bad(
            "activation_function",
            format!("'{act}' is not supported (gelu_new)"),
        ));
    }
    if c.opt_bool("scale_attn_by_inverse_layer_idx")? == Some(true) {
        return Err(c.bad("scale_attn_by_inverse_layer_idx", "not supported"));
    }
    if c.opt_bool("scale_attn_weights")? == Some(false) {
        return Err(c.bad("scale_attn_weights", "unscaled attention is not supported"));
    }
    let ffn = match c.opt_size("n_inner")? {
        Some(n) => n,
        None => 4 * dim,
    };
    k.size("context_length", c.size_of(&["n_positions", "n_ctx"])?);
    k.size("embedding_length", dim);
    k.size("block_count", n_layers);
    k.size("feed_forward_length", ffn);
    k.size("attention.head_count", n_heads);
    let eps = c.opt_f32("layer_norm_epsilon")?.unwrap_or(1e-5);
    k.set("attention.layer_norm_epsilon", Value::F32(eps));
    Ok(Hp {
        n_layers,
        n_heads,
        n_kv_heads: n_heads,
        head_dim: dim / n_heads,
        tied: c.opt_bool("tie_word_embeddings")?.unwrap_or(true),
        vocab_size: c.opt_size("vocab_size")?,
        extra: Vec::new(),
    })
}

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
type Mapped = Option<(String, Reshape)>;

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
const GPT2_LAYER: [(&str, LayerName, bool); 6] = [
    ("ln_1", names::attn_norm, false),
    ("attn.c_attn", names::attn_qkv, true),
    ("attn.c_proj", names::attn_output, true),
    ("ln_2", names::ffn_norm, false),
    ("mlp.c_fc", names::ffn_up, true),
    ("mlp.c_proj", names::ffn_down, true),
];

/// `{prefix}{layer}.{rest}` split into the layer and the rest.
fn layer_of<'a>(name: &'a str, prefix: &str) -> Option<(&'a str, &'a str)> {
    let rest = name.strip_prefix(prefix)?;
    rest.split_once('.')
}

/// `module.weight` / `module.bias`: the module and whether a bias.
fn module_of(rest: &str) -> Option<(&str, bool)> {
    if let Some(m) = rest.strip_suffix(".weight") {
        Some((m, false))
    } else {
        rest.strip_suffix(".bias").map(|m| (m, true))
    }
}

/// The GGUF name `weight_name`, or its bias.
fn weight_or_bias(weight_name: String, bias: bool) -> String {
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
        Family::Llama
        | Family::Mistral
        | Family::Qwen2
        | Family::Qwen3
        | Family::Qwen3Moe
        | Family::Qwen2Moe => {
            let fixed = match name {
                "model.embed_tokens.weight" => Some(names::TOKEN_EMBD),
                "model.norm.weight" => Some(names::OUTPUT_NORM),
                "lm_head.weight" if hp.tied => return Ok(None),
                "lm_head.weight" => Some(names::OUTPUT),
                _ => None,
            };
            if let Some(n) = fixed {
                return Ok(Some((n.to_string(), Reshape::None)));
            }
            let (l, rest) = layer_of(name, "model.layers.").ok_or_else(unknown)?;
            let l = layer(l)?;
            if rest == "self_attn.rotary_emb.inv_freq" {
                return Ok(None);
            }
            let (module, bias) = module_of(rest).ok_or_else(unknown)?;
            if module.ends_with("_norm")
                && module.starts_with("self_attn.")
                && !matches!(f.dense(), Family::Qwen3)
            {
                return Err(unknown());
            }
            if let Some(mapped) = moe::map_module(f, l, module, bias, source, name)? {
                return Ok(Some(mapped));
            }
            let (_, gguf) = LLAMA_LAYER
                .iter()
                .find(|(m, _)| *m == module)
                .ok_or_else(unknown)?;
            let reshape = match (f, module) {
                (Family::Llama | Family::Mistral, "self_attn.q_proj") => {
                    Reshape::RopePairs(hp.n_heads)
                }
                (Family::Llama | Family::Mistral, "self_attn.k_proj") => {
                    Reshape::RopePairs(hp.n_kv_heads)
                }
                _ => Reshape::None,
            };
            Ok(Some((weight_or_bias(gguf(l), bias), reshape)))
        }
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
fn rope_pairs(data: &[u8], rows: usize, row_bytes: usize, n_head: usize) -> Vec<u8> {
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
fn transpose(data: &[u8], rows: usize, cols: usize, elem: usize) -> Vec<u8> {
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
    let data = st.tensor_data(t);
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
            let bytes = values
                .iter()
                .flat_map(|v| (v + 1.0).to_le_bytes())
                .collect();
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

/// A token's id in a parsed `tokenizer.json`: an added token's, else the
/// model vocabulary's (an object of ids, or a Unigram list of pieces).
fn token_id(tokenizer: &Json, text: &str) -> Option<u32> {
    let added = tokenizer.get("added_tokens").and_then(Json::as_array);
    if let Some(t) = added
        .into_iter()
        .flatten()
        .find(|t| t.get("content").and_then(Json::as_str) == Some(text))
    {
        return t
            .get("id")
            .and_then(Json::as_u64)
            .and_then(|i| u32::try_from(i).ok());
    }
    match tokenizer.get("model").and_then(|m| m.get("vocab"))? {
        Json::Object(vocab) => vocab
            .get(text)
            .and_then(Json::as_u64)
            .and_then(|i| u32::try_from(i).ok()),
        Json::Array(pieces) => pieces
            .iter()
            .position(|p| p.get(0).and_then(Json::as_str) == Some(text))
            .and_then(|i| u32::try_from(i).ok()),
        _ => None,
    }
}

/// A token text in `tokenizer_config.json`: a string or `{"content": ...}`.
fn token_text(v: &Json) -> Option<&str> {
    v.as_str()
        .or_else(|| v.get("content").and_then(Json::as_str))
}

/// A file of at most `max` bytes, or None if it does not exist.
fn read_small(path: &Path, max: u64) -> Result<Option<String>, Error> {
    let shown = || path.display().to_string();
    let Ok(meta) = std::fs::metadata(path) else {
        return Ok(None);
    };
    if meta.len() > max {
        return Err(Error::model(
            shown(),
            format!("{} bytes is more than the {max} accepted", meta.len()),
        ));
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::model(shown(), format!("cannot read: {e}")))?;
    Ok(Some(text))
}

/// The tokenizer files of `dir` as GGUF metadata.
pub(crate) fn tokenizer_metadata(
    dir: &Path,
    config: &Json,
    md: &mut Metadata,
) -> Result<(), Error> {
    let path = dir.join("tokenizer.json");
    let json = read_small(&path, MAX_TOKENIZER_BYTES)?.ok_or_else(|| {
        Error::model(
            dir.display().to_string(),
            "no tokenizer.json (a decoder directory needs its Hugging Face tokenizer)",
        )
    })?;
    let parsed: Json = serde_json::from_str(&json)
        .map_err(|e| Error::model(path.display().to_string(), format!("invalid JSON: {e}")))?;
    let cfg_path = dir.join("tokenizer_config.json");
    let tok_config = match read_small(&cfg_path, MAX_TOKENIZER_BYTES)? {
        Some(text) => serde_json::from_str(&text).map_err(|e| {
            Error::model(cfg_path.display().to_string(), format!("invalid JSON: {e}"))
        })?,
        None => Json::Null,
    };
    let mut set = |k: &str, v: Value| {
        md.insert(k.to_string(), v);
    };
    // As gguf-py's SpecialVocab: the token texts of tokenizer_config.json,
    // else the ids of config.json.
    for (role, key) in [
        ("bos", "tokenizer.ggml.bos_token_id"),
        ("eos", "tokenizer.ggml.eos_token_id"),
        ("pad", "tokenizer.ggml.padding_token_id"),
    ] {
        let by_text = tok_config
            .get(format!("{role}_token"))
            .and_then(token_text)
            .and_then(|t| token_id(&parsed, t));
        let by_id = || {
            let v = config.get(format!("{role}_token_id"))?;
            let first = v.as_array().and_then(|a| a.first()).unwrap_or(v);
            first.as_u64().and_then(|i| u32::try_from(i).ok())
        };
        if let Some(id) = by_text.or_else(by_id) {
            set(key, Value::U32(id));
        }
    }
    for (flag, key) in [
        ("add_bos_token", "tokenizer.ggml.add_bos_token"),
        ("add_eos_token", "tokenizer.ggml.add_eos_token"),
    ] {
        if let Some(b) = tok_config.get(flag).and_then(Json::as_bool) {
            set(key, Value::Bool(b));
        }
    }
    let template = match read_small(&dir.join("chat_template.jinja"), MAX_TEMPLATE_BYTES)? {
        Some(t) => Some(t),
        None => match tok_config.get("chat_template") {
            Some(Json::String(t)) => Some(t.clone()),
            // A list of named templates: the default one.
            Some(Json::Array(list)) => list
                .iter()
                .find(|t| t.get("name").and_then(Json::as_str) == Some("default"))
                .or_else(|| list.first())
                .and_then(|t| t.get("template"))
                .and_then(Json::as_str)
                .map(str::to_string),
            _ => None,
        },
    };
    if let Some(t) = template {
        set(crate::generate::chat::TEMPLATE_KEY, Value::String(t));
    }
    set(KEY_HF_JSON, Value::String(json));
    Ok(())
}

/// The checked family and hyper-parameters of a decoder directory's
/// `config.json` (`None`: not one of the decoder classes), for
/// `crate::convert`: the same checks [`open`] makes.
pub(crate) fn decoder_plan(
    config: &Json,
    source: &str,
) -> Result<Option<(&'static str, Family, Hp)>, Error> {
    let c = Config {
        json: config,
        source: source.to_string(),
    };
    let archs = architectures(config);
    let Some((class, family)) = archs
        .iter()
        .find_map(|a| HF_DECODERS.iter().find(|(name, _)| name == a))
        .copied()
    else {
        return Ok(None);
    };
    if c.get("quantization_config").is_some() {
        return Err(c.bad(
            "quantization_config",
            "quantized checkpoints are not supported (use F32, F16 or BF16 weights)",
        ));
    }
    let mut scratch = Metadata::default();
    let hp = match family {
        Family::Gpt2 => gpt2_config(&c, &mut scratch)?,
        _ => llama_config(&c, family, &mut scratch)?,
    };
    Ok(Some((class, family, hp)))
}

/// Reads the HF decoder directory `dir` into an in-memory GGUF file of its
/// GGUF architecture (see the module notes).
pub fn open(dir: &Path) -> Result<GgufFile, Error> {
    let st = SafetensorsDir::open(dir)?;
    let source = dir.join("config.json").display().to_string();
    let c = Config {
        json: &st.config,
        source: source.clone(),
    };
    if c.get("quantization_config").is_some() {
        return Err(c.bad(
            "quantization_config",
            "quantized checkpoints are not supported (use F32, F16 or BF16 weights)",
        ));
    }
    let archs = architectures(&st.config);
    let Some((class, family)) = archs
        .iter()
        .find_map(|a| HF_DECODERS.iter().find(|(name, _)| name == a))
        .copied()
    else {
        return Err(c.bad(
            "architectures",
            format!(
                "{archs:?} is not a supported decoder ({})",
                supported_classes().join(", ")
            ),
        ));
    };

    let mut md = Metadata::default();
    md.insert(
        "general.architecture".into(),
        Value::String(family.gguf_name().into()),
    );
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| class.to_string());
    md.insert("general.name".into(), Value::String(name));
    let hp = match family {
        Family::Llama
        | Family::Mistral
        | Family::Qwen2
        | Family::Qwen3
        | Family::Qwen3Moe
        | Family::Qwen2Moe => llama_config(&c, family, &mut md)?,
        Family::Gpt2 => gpt2_config(&c, &mut md)?,
        Family::Table(t) => (t.config)(
            &c,
            &mut Keys {
                md: &mut md,
                arch: t.arch,
            },
        )?,
    };
    tokenizer_metadata(dir, &st.config, &mut md)?;

    let mut tensors = Vec::with_capacity(st.tensors.len());
    for t in &st.tensors {
        let source = st.shard_path(t).display().to_string();
        if let Some((name, reshape)) = map_name(family, &hp, &t.name, &source)? {
            tensors.push(convert(&st, t, name, reshape, &hp, &source)?);
        }
    }
    moe::stack_experts(&mut tensors, &md, family, &source)?;
    for (name, values) in &hp.extra {
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        tensors.push(Out {
            name: name.to_string(),
            dims: vec![values.len() as u64],
            ty: GgmlType::F32,
            data: Cow::Owned(bytes),
        });
    }
    if !hp.tied && !tensors.iter().any(|t| t.name == names::OUTPUT) {
        return Err(c.bad(
            "tie_word_embeddings",
            "false, but there is no lm_head.weight",
        ));
    }
    if let (Some(v), Some(embd)) = (
        hp.vocab_size,
        tensors.iter().find(|t| t.name == names::TOKEN_EMBD),
    ) {
        let rows = embd.dims.get(1).copied().unwrap_or(0);
        if rows != v as u64 {
            return Err(c.bad(
                "vocab_size",
                format!("{v} differs from the token embedding's {rows} rows"),
            ));
        }
    }
    let to_write: Vec<TensorToWrite> = tensors
        .iter()
        .map(|t| TensorToWrite {
            name: &t.name,
            dims: &t.dims,
            ty: t.ty,
            data: &t.data,
        })
        .collect();
    // One allocation of about the final size: no doubling while writing.
    let data: usize = tensors.iter().map(|t| t.data.len() + 64).sum();
    let meta: usize = md
        .get(KEY_HF_JSON)
        .and_then(Value::as_str)
        .map_or(0, str::len);
    let mut out = Vec::with_capacity(data + meta + (1 << 16));
    write_gguf(&mut out, 3, &md, &to_write).map_err(|e| Error::model(&source, e.to_string()))?;
    drop(to_write);
    drop(tensors);
    drop(st);
    Ok(GgufFile::from_vec(dir, out)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rope_pairs_interleaves_each_heads_halves() {
        // Two heads of 4 rows, one byte per row: [a0 a1 b0 b1] -> [a0 b0 a1 b1].
        let data = [0u8, 1, 2, 3, 10, 11, 12, 13];
        assert_eq!(rope_pairs(&data, 8, 1, 2), vec![0, 2, 1, 3, 10, 12, 11, 13]);
    }

    #[test]
    fn transpose_swaps_rows_and_columns() {
        // 2 x 3 of 2-byte values.
        let data = [1u8, 0, 2, 0, 3, 0, 4, 0, 5, 0, 6, 0];
        assert_eq!(
            transpose(&data, 2, 3, 2),
            vec![1, 0, 4, 0, 2, 0, 5, 0, 3, 0, 6, 0]
        );
    }
}
