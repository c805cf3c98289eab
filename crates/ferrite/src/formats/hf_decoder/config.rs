//! `config.json` into the GGUF file's `{arch}.*` hyper-parameter keys,
//! checked here first (errors name the config field).

use serde_json::Value as Json;

use super::*;

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

    /// An optional float, in the range its key calls for
    /// ([`float_problem`](crate::models::hparams::float_problem)).
    pub fn opt_f32(&self, key: &str) -> Result<Option<f32>, Error> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => match v.as_f64() {
                Some(x) => match crate::models::hparams::float_problem(key, x) {
                    None => Ok(Some(x as f32)),
                    Some(problem) => Err(self.bad(key, problem)),
                },
                None => Err(self.bad(key, format!("{v} is not a number"))),
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
    /// The experts are MXFP4 blocks (`quantization_config.quant_method`
    /// `mxfp4`: gpt-oss as OpenAI publishes it).
    pub(crate) mxfp4: bool,
}

/// Metadata being written, under `{arch}.` keys.
pub struct Keys<'a> {
    pub(super) md: &'a mut Metadata,
    pub(super) arch: &'static str,
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
                truncate: match s.get("truncate").filter(|v| !v.is_null()) {
                    None => true,
                    Some(Json::Bool(b)) => *b,
                    Some(v) => {
                        return Err(c.bad(
                            &format!("{field}.truncate"),
                            format!("{v} is not true or false"),
                        ))
                    }
                },
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
            truncate,
        } => {
            ty(k, "yarn");
            // ferrite's own key (ggml always truncates; gpt-oss does not).
            if s.get("truncate").is_some_and(|v| !v.is_null()) {
                k.set("rope.scaling.yarn_truncate", Value::Bool(truncate));
            }
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
/// `attention.sliding_window_pattern` (per layer: whether it slides), for
/// Qwen2 / Qwen3 (and their MoE) configs: when `use_sliding_window`, on the
/// layers `layer_types` marks `sliding_attention` (else those from
/// `max_window_layers` on, as transformers derives them).
/// convert_hf_to_gguf.py writes neither for these classes (llama.cpp runs
/// them without a window).
pub(crate) fn qwen_window(c: &Config, n_layers: usize, k: &mut Keys) -> Result<(), Error> {
    if c.opt_bool("use_sliding_window")? != Some(true) {
        return Ok(());
    }
    let flags = match c.get("layer_types") {
        Some(v) => layer_types(c, v, n_layers)?,
        None => {
            let from = c.opt_size("max_window_layers")?.unwrap_or(0);
            (0..n_layers).map(|l| l >= from).collect()
        }
    };
    window_keys(c, k, flags)
}

/// `attention.sliding_window` (config.json's `sliding_window`) and the
/// per-layer `attention.sliding_window_pattern` `flags`, when any layer
/// slides.
pub fn window_keys(c: &Config, k: &mut Keys, flags: Vec<bool>) -> Result<(), Error> {
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

/// A sliding-window rule of a Llama-style family: the layer count, the
/// keys being written.
pub(crate) type Window = fn(&Config, usize, &mut Keys) -> Result<(), Error>;

/// A dense Llama-style config (Llama, Mistral, Qwen2, Qwen3): its
/// sliding-window keys by `window` (checked first), then [`llama_keys`]
/// with a SiLU MLP, untied unless `tie_word_embeddings`.
pub(crate) fn dense_config(c: &Config, k: &mut Keys, window: Window) -> Result<Hp, Error> {
    llama_style_config(c, k, window, false)
}

/// [`dense_config`] with Qwen's mixture-of-experts keys (`moe.rs`) after
/// the window: Qwen3-MoE, Qwen2-MoE.
pub(crate) fn qwen_moe_config(c: &Config, k: &mut Keys) -> Result<Hp, Error> {
    llama_style_config(c, k, qwen_window, true)
}

/// See [`dense_config`] and [`qwen_moe_config`].
fn llama_style_config(c: &Config, k: &mut Keys, window: Window, moe: bool) -> Result<Hp, Error> {
    let n_layers = layers(c, "num_hidden_layers")?;
    window(c, n_layers, k)?;
    if moe {
        moe::moe_config(c, n_layers, k)?;
    }
    let mut hp = llama_keys(c, k, "hidden_act", &["silu"])?;
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
        mxfp4: false,
    })
}

/// GPT-2 hyper-parameters into `md`.
pub(super) fn gpt2_config(c: &Config, md: &mut Metadata) -> Result<Hp, Error> {
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
        mxfp4: false,
    })
}
