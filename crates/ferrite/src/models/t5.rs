//! T5 and flan-t5 encoder-decoder models from a Hugging Face directory
//! (`config.json` + `model.safetensors`): pre-norm layers with T5's RMS
//! norm (no bias, no mean), no biases anywhere, unscaled attention scores
//! with learned relative position buckets (one table per stack, from the
//! first layer), ReLU (`"relu"`) or gated-GELU (`"gated-gelu"`) feed-forward,
//! final norms after both stacks, and, with tied embeddings (T5), the last
//! hidden state scaled by `d_model^-0.5` before the output matrix; untied
//! (flan-t5, T5 v1.1) it is not scaled and `lm_head.weight` is the output.
//!
//! The output matrix and its scale follow transformers 5: `lm_head.weight`
//! when the file holds one, else the embedding table; scaled if
//! `scale_decoder_outputs` says so, else if `tie_word_embeddings` (default
//! true). transformers 5 writes `"tie_word_embeddings": true,
//! "scale_decoder_outputs": false` plus its own `lm_head.weight` when it
//! saves a flan-t5 again, and loads that as the same untied model.
//!
//! Reference: HF transformers `models/t5/modeling_t5.py`,
//! `configuration_t5.py`.

use std::path::Path;

use ferrite_kernels::math::Activation;
use serde::Deserialize;

use super::encoder::weights::WeightSource;
use super::seq2seq::weights::{ProjLoader, WeightFormat};
use super::seq2seq::{
    AttnWeights, DecoderLayer, EncoderLayer, Ffn, Norm, NormPlacement, Positions, RelativeBias,
    Seq2Seq, Seq2SeqConfig,
};
use crate::formats::safetensors::SafetensorsDir;
use crate::Error;

/// The `config.json` fields a T5 model is built from.
#[derive(Deserialize, Debug)]
pub struct T5Json {
    pub d_model: usize,
    pub d_kv: usize,
    pub d_ff: usize,
    pub num_heads: usize,
    pub num_layers: usize,
    pub num_decoder_layers: Option<usize>,
    pub vocab_size: usize,
    #[serde(default = "default_buckets")]
    pub relative_attention_num_buckets: usize,
    #[serde(default = "default_max_distance")]
    pub relative_attention_max_distance: usize,
    #[serde(default = "default_ffn")]
    pub feed_forward_proj: String,
    #[serde(default = "default_eps")]
    pub layer_norm_epsilon: f32,
    #[serde(default = "yes")]
    pub tie_word_embeddings: bool,
    /// Written by transformers 5 (the `tie_word_embeddings` it was given).
    #[serde(default)]
    pub scale_decoder_outputs: Option<bool>,
    #[serde(default)]
    pub pad_token_id: u32,
    #[serde(default = "one")]
    pub eos_token_id: u32,
    pub decoder_start_token_id: Option<u32>,
}

fn default_buckets() -> usize {
    32
}
fn default_max_distance() -> usize {
    128
}
fn default_ffn() -> String {
    "relu".into()
}
fn default_eps() -> f32 {
    1e-6
}
fn yes() -> bool {
    true
}
fn one() -> u32 {
    1
}

/// Which stack a block belongs to.
#[derive(Clone, Copy)]
enum Stack {
    Encoder,
    Decoder,
}

/// Tensor names as `T5ForConditionalGeneration` saves them.
mod names {
    use super::Stack;

    pub const SHARED: &str = "shared.weight";
    pub const LM_HEAD: &str = "lm_head.weight";

    fn stack(s: Stack) -> &'static str {
        match s {
            Stack::Encoder => "encoder",
            Stack::Decoder => "decoder",
        }
    }

    /// `{stack}.block.{i}.layer.{j}.{part}`.
    pub fn block(s: Stack, i: usize, j: usize, part: &str) -> String {
        format!("{}.block.{i}.layer.{j}.{part}", stack(s))
    }

    /// `{stack}.final_layer_norm.weight`.
    pub fn final_norm(s: Stack) -> String {
        format!("{}.final_layer_norm.weight", stack(s))
    }

    /// The relative position table, held by the first block.
    pub fn relative_bias(s: Stack) -> String {
        block(s, 0, 0, "SelfAttention.relative_attention_bias.weight")
    }
}

/// True if a `config.json` describes a T5 model.
pub fn is_t5(config: &serde_json::Value) -> bool {
    matches!(
        config.get("model_type").and_then(|v| v.as_str()),
        Some("t5") | Some("mt5")
    )
}

/// Loads a T5 model from `dir`.
pub fn load(dir: &Path, format: WeightFormat) -> Result<Seq2Seq, Error> {
    let st = SafetensorsDir::open(dir)?;
    let source = st.dir().join("config.json").display().to_string();
    let c: T5Json = serde_json::from_value(st.config.clone())
        .map_err(|e| Error::model(&source, format!("not a T5 config: {e}")))?;
    let bad = |what: String| Error::model(&source, what);
    if let Some(problem) =
        super::hparams::float_problem("layer_norm_epsilon", c.layer_norm_epsilon.into())
    {
        return Err(bad(format!("'layer_norm_epsilon': {problem}")));
    }
    let (gated, act) = match c.feed_forward_proj.as_str() {
        "relu" => (false, Activation::Relu),
        "gated-gelu" => (true, Activation::GeluTanh),
        "gated-relu" => (true, Activation::Relu),
        "gelu" => (false, Activation::GeluErf),
        other => return Err(bad(format!("feed_forward_proj '{other}' is not supported"))),
    };
    let (dim, qd, n_vocab) = (c.d_model, c.num_heads * c.d_kv, c.vocab_size);
    if dim == 0 || qd == 0 || dim > 1 << 16 || qd > 1 << 16 || c.num_layers > 256 {
        return Err(bad(
            "d_model, num_heads * d_kv and num_layers must be sensible".into(),
        ));
    }
    if c.relative_attention_num_buckets < 4 || c.relative_attention_num_buckets > 1 << 12 {
        return Err(bad("relative_attention_num_buckets out of range".into()));
    }
    let n_dec = c.num_decoder_layers.unwrap_or(c.num_layers);
    if n_dec > 256 {
        return Err(bad("too many decoder layers".into()));
    }
    let src = WeightSource::Safetensors(st);
    let pl = ProjLoader { src: &src, format };
    let embed = src.matrix(names::SHARED, n_vocab, dim)?;
    let lm_head = if src.has(names::LM_HEAD) || !c.tie_word_embeddings {
        pl.proj(names::LM_HEAD, None, n_vocab, dim)?
    } else {
        pl.from_values(names::LM_HEAD, &embed, None, n_vocab, dim)?
    };
    let eps = c.layer_norm_epsilon;
    let norm = |name: String| -> Result<Norm, Error> {
        Ok(Norm::RmsF32 {
            weight: src.vector(&name, dim)?,
            eps,
        })
    };
    let attn = |s, i, j, part: &str| -> Result<AttnWeights, Error> {
        let p = |x: &str, rows, cols| {
            pl.proj(
                &names::block(s, i, j, &format!("{part}.{x}.weight")),
                None,
                rows,
                cols,
            )
        };
        Ok(AttnWeights {
            q: p("q", qd, dim)?,
            k: p("k", qd, dim)?,
            v: p("v", qd, dim)?,
            o: p("o", dim, qd)?,
        })
    };
    let ffn = |s, i, j| -> Result<Ffn, Error> {
        let p = |x: &str, rows, cols| {
            pl.proj(
                &names::block(s, i, j, &format!("DenseReluDense.{x}.weight")),
                None,
                rows,
                cols,
            )
        };
        Ok(if gated {
            Ffn::Gated {
                gate: p("wi_0", c.d_ff, dim)?,
                up: p("wi_1", c.d_ff, dim)?,
                down: p("wo", dim, c.d_ff)?,
                act,
            }
        } else {
            Ffn::Plain {
                up: p("wi", c.d_ff, dim)?,
                down: p("wo", dim, c.d_ff)?,
                act,
            }
        })
    };
    let mut encoder = Vec::with_capacity(c.num_layers);
    for i in 0..c.num_layers {
        let s = Stack::Encoder;
        encoder.push(EncoderLayer {
            attn: attn(s, i, 0, "SelfAttention")?,
            attn_norm: norm(names::block(s, i, 0, "layer_norm.weight"))?,
            ffn: ffn(s, i, 1)?,
            ffn_norm: norm(names::block(s, i, 1, "layer_norm.weight"))?,
        });
    }
    let mut decoder = Vec::with_capacity(n_dec);
    for i in 0..n_dec {
        let s = Stack::Decoder;
        decoder.push(DecoderLayer {
            self_attn: attn(s, i, 0, "SelfAttention")?,
            self_norm: norm(names::block(s, i, 0, "layer_norm.weight"))?,
            cross_attn: attn(s, i, 1, "EncDecAttention")?,
            cross_norm: norm(names::block(s, i, 1, "layer_norm.weight"))?,
            ffn: ffn(s, i, 2)?,
            ffn_norm: norm(names::block(s, i, 2, "layer_norm.weight"))?,
        });
    }
    let nb = c.relative_attention_num_buckets;
    let rel = RelativeBias {
        n_buckets: nb,
        max_distance: c.relative_attention_max_distance.max(1),
        encoder: src.matrix(&names::relative_bias(Stack::Encoder), nb, c.num_heads)?,
        decoder: src.matrix(&names::relative_bias(Stack::Decoder), nb, c.num_heads)?,
    };
    for id in [c.pad_token_id, c.eos_token_id] {
        if id as usize >= n_vocab {
            return Err(bad(format!("token id {id} is outside the vocabulary")));
        }
    }
    Ok(Seq2Seq {
        config: Seq2SeqConfig {
            dim,
            n_heads: c.num_heads,
            head_dim: c.d_kv,
            n_vocab,
            attn_scale: 1.0,
            embed_scale: 1.0,
            output_scale: if c.scale_decoder_outputs.unwrap_or(c.tie_word_embeddings) {
                (dim as f32).powf(-0.5)
            } else {
                1.0
            },
            max_positions: None,
            placement: NormPlacement::Pre,
            decoder_start: c.decoder_start_token_id.unwrap_or(c.pad_token_id),
            eos: c.eos_token_id,
        },
        embed,
        positions: Positions::Relative(rel),
        encoder,
        decoder,
        encoder_norm: Some(norm(names::final_norm(Stack::Encoder))?),
        decoder_norm: Some(norm(names::final_norm(Stack::Decoder))?),
        lm_head,
        logits_bias: None,
    })
}
