//! MPNet (Song et al. 2020) as HF transformers' `MPNetModel` lays it out,
//! the encoder of sentence-transformers' `all-mpnet-base-v2`: BERT's
//! layers (Q/K/V and output with biases, GELU feed-forward, post-LN) with
//! two differences:
//!
//! - learned absolute positions counted from `padding_idx + 1` = 2 (as
//!   RoBERTa), so a table of 514 rows takes 512 tokens;
//! - a learned bias per head and relative-distance bucket added to every
//!   layer's scaled attention scores (one table,
//!   `encoder.relative_attention_bias`, shared by all layers), and no
//!   token type embeddings.
//!
//! Reference: HF `models/mpnet/modeling_mpnet.py` (`MPNetEmbeddings`,
//! `MPNetSelfAttention`, `MPNetEncoder.compute_position_bias`).

use super::bert::{activation, load, Globals};
use super::config::{JsonConfig, Sizes};
use super::weights::WeightSource;
use super::{Encoder, RelativeBias};
use crate::Error;
use crate::models::EncoderArch;

/// The position id of the first token: MPNet's `padding_idx` (1) + 1.
const FIRST_POSITION: usize = 2;
/// HF's `relative_position_bucket` default, not in `config.json`.
const MAX_DISTANCE: usize = 128;

/// Loads MPNet from a safetensors directory with its `config.json`.
pub fn from_hf(src: &WeightSource, config: &serde_json::Value) -> Result<Encoder, Error> {
    let cfg = JsonConfig {
        value: config,
        source: src.source(),
    };
    let act_name = cfg.opt_str(&["hidden_act"]).unwrap_or("gelu");
    let act = activation(act_name)
        .ok_or_else(|| cfg.error("hidden_act", &format!("'{act_name}' is not supported")))?;
    let n_buckets = cfg
        .opt_size(&["relative_attention_num_buckets"])?
        .unwrap_or(32);
    // Buckets are stored as bytes; the even split (before / after) needs
    // at least 2 per side for the logarithmic part to have room.
    if !(4..=256).contains(&n_buckets) || !n_buckets.is_multiple_of(2) {
        return Err(cfg.error(
            "relative_attention_num_buckets",
            &format!("{n_buckets} is not an even number in 4..=256"),
        ));
    }
    let sizes = Sizes::from_json(&cfg, &["max_position_embeddings"])?;
    // `MPNetForMaskedLM` checkpoints put the model under `mpnet.`.
    let p = if src.has("mpnet.embeddings.word_embeddings.weight") {
        "mpnet."
    } else {
        ""
    };
    let names = |i: usize, what: &str| -> String {
        let part = match what {
            "q" => "attention.attn.q",
            "k" => "attention.attn.k",
            "v" => "attention.attn.v",
            "out" => "attention.attn.o",
            "attn_norm" => "attention.LayerNorm",
            "up" => "intermediate.dense",
            "down" => "output.dense",
            _ => "output.LayerNorm",
        };
        format!("{p}encoder.layer.{i}.{part}")
    };
    let globals = Globals {
        token: format!("{p}embeddings.word_embeddings.weight"),
        position: format!("{p}embeddings.position_embeddings.weight"),
        token_type: format!("{p}embeddings.token_type_embeddings.weight"),
        norm: format!("{p}embeddings.LayerNorm"),
        first_position: FIRST_POSITION,
    };
    let mut encoder = load(src, &sizes, act, &globals, &names)?;
    let table = src.matrix(
        &format!("{p}encoder.relative_attention_bias.weight"),
        n_buckets,
        sizes.n_heads,
    )?;
    encoder.relative_bias = Some(RelativeBias {
        table,
        n_buckets,
        max_distance: MAX_DISTANCE,
    });
    Ok(encoder)
}

/// The MPNet family: HF `model_type` `mpnet` only (llama.cpp has no GGUF
/// layout for it, so it is neither read from GGUF nor converted).
pub(crate) const FAMILY: EncoderArch = EncoderArch {
    gguf: None,
    hf_name: "mpnet",
    from_hf,
    matryoshka_layer_norm: false,
    task_prefixes: false,
    convert: None,
};
