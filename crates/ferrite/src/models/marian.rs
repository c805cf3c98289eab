//! Marian (Helsinki-NLP opus-mt) encoder-decoder models from a Hugging Face
//! directory (`config.json` + `model.safetensors`): post-norm layers with
//! LayerNorm, sinusoidal positions added to embeddings scaled by
//! `sqrt(d_model)`, Q/K/V/output projections with biases, SiLU ("swish")
//! feed-forward, one embedding table shared by encoder, decoder and output
//! (tied), and `final_logits_bias` added to the logits.
//!
//! Reference: HF transformers `models/marian/modeling_marian.py`,
//! `configuration_marian.py`.

use std::path::Path;

use serde::Deserialize;

use super::encoder::weights::WeightSource;
use super::seq2seq::forward::hf_activation;
use super::seq2seq::weights::{ProjLoader, WeightFormat};
use super::seq2seq::{
    sinusoidal_table, AttnWeights, DecoderLayer, EncoderLayer, Ffn, Norm, NormPlacement, Positions,
    Seq2Seq, Seq2SeqConfig,
};
use crate::formats::safetensors::SafetensorsDir;
use crate::Error;

/// LayerNorm epsilon of every Marian norm (PyTorch's default).
const LN_EPS: f32 = 1e-5;

/// The `config.json` fields a Marian model is built from.
#[derive(Deserialize, Debug)]
pub struct MarianJson {
    pub d_model: usize,
    pub encoder_layers: usize,
    pub decoder_layers: usize,
    pub encoder_attention_heads: usize,
    pub decoder_attention_heads: usize,
    pub encoder_ffn_dim: usize,
    pub decoder_ffn_dim: usize,
    pub vocab_size: usize,
    pub decoder_vocab_size: Option<usize>,
    pub max_position_embeddings: usize,
    #[serde(default = "swish")]
    pub activation_function: String,
    #[serde(default)]
    pub scale_embedding: bool,
    pub pad_token_id: u32,
    pub eos_token_id: u32,
    pub decoder_start_token_id: Option<u32>,
    #[serde(default = "yes")]
    pub share_encoder_decoder_embeddings: bool,
    #[serde(default = "yes")]
    pub tie_word_embeddings: bool,
    /// Old BART-style keys; Marian models have them false or absent.
    #[serde(default)]
    pub normalize_before: bool,
    #[serde(default)]
    pub normalize_embedding: bool,
    #[serde(default)]
    pub add_final_layer_norm: bool,
}

fn swish() -> String {
    "swish".into()
}

fn yes() -> bool {
    true
}

/// Which stack a layer belongs to.
#[derive(Clone, Copy)]
enum Stack {
    Encoder,
    Decoder,
}

/// Tensor names as `MarianMTModel` saves them.
mod names {
    use super::Stack;

    pub const SHARED: &str = "model.shared.weight";
    pub const ENCODER_EMBED: &str = "model.encoder.embed_tokens.weight";
    pub const LM_HEAD: &str = "lm_head.weight";
    pub const LOGITS_BIAS: &str = "final_logits_bias";

    /// `model.{stack}.layers.{i}.{part}`.
    pub fn layer(stack: Stack, i: usize, part: &str) -> String {
        let s = match stack {
            Stack::Encoder => "encoder",
            Stack::Decoder => "decoder",
        };
        format!("model.{s}.layers.{i}.{part}")
    }
}

/// Reads `config.json` of a Marian directory.
pub fn read_config(st: &SafetensorsDir) -> Result<MarianJson, Error> {
    let source = st.dir().join("config.json").display().to_string();
    let c: MarianJson = serde_json::from_value(st.config.clone())
        .map_err(|e| Error::model(&source, format!("not a Marian config: {e}")))?;
    let bad = |what: &str| Err(Error::model(&source, what.to_string()));
    if c.normalize_before || c.normalize_embedding || c.add_final_layer_norm {
        return bad(
            "normalize_before / normalize_embedding / add_final_layer_norm are not supported",
        );
    }
    if c.encoder_attention_heads != c.decoder_attention_heads {
        return bad("encoder and decoder must have the same number of heads");
    }
    let heads = c.encoder_attention_heads;
    if heads == 0 || c.d_model == 0 || !c.d_model.is_multiple_of(heads) || c.d_model > 1 << 16 {
        return bad("d_model must be a positive multiple of the attention heads");
    }
    if c.encoder_layers > 256 || c.decoder_layers > 256 || c.max_position_embeddings > 1 << 20 {
        return bad("too many layers or positions");
    }
    if !c.share_encoder_decoder_embeddings
        || c.decoder_vocab_size.is_some_and(|v| v != c.vocab_size)
    {
        return bad("separate encoder and decoder vocabularies are not supported");
    }
    Ok(c)
}

/// Loads a Marian model from `dir`.
pub fn load(dir: &Path, format: WeightFormat) -> Result<Seq2Seq, Error> {
    if !SafetensorsDir::is_model_dir(dir) {
        let msg = if dir.join("pytorch_model.bin").is_file() {
            "has only pytorch_model.bin, which ferrite does not read (a pickle): convert it to \
             model.safetensors first, e.g. with transformers: \
             MarianMTModel.from_pretrained(dir).save_pretrained(dir, safe_serialization=True)"
        } else {
            "no model.safetensors here"
        };
        return Err(Error::model(dir.display().to_string(), msg));
    }
    let st = SafetensorsDir::open(dir)?;
    let c = read_config(&st)?;
    let source = WeightSource::Safetensors(st);
    let (dim, n_vocab) = (c.d_model, c.vocab_size);
    let act = hf_activation(&c.activation_function).ok_or_else(|| {
        Error::model(
            source.source(),
            format!("activation '{}' is not supported", c.activation_function),
        )
    })?;
    for id in [c.pad_token_id, c.eos_token_id] {
        if id as usize >= n_vocab {
            return Err(Error::model(
                source.source(),
                format!("token id {id} is outside the vocabulary"),
            ));
        }
    }
    let embed_name = if source.has(names::SHARED) {
        names::SHARED
    } else {
        names::ENCODER_EMBED
    };
    let embed = source.matrix(embed_name, n_vocab, dim)?;
    let pl = ProjLoader {
        src: &source,
        format,
    };
    let lm_head = if !c.tie_word_embeddings && source.has(names::LM_HEAD) {
        pl.proj(names::LM_HEAD, None, n_vocab, dim)?
    } else {
        pl.from_values(names::LM_HEAD, &embed, None, n_vocab, dim)?
    };
    let logits_bias = if source.has(names::LOGITS_BIAS) {
        Some(source.vector(names::LOGITS_BIAS, n_vocab)?)
    } else {
        None
    };
    let norm = |stack, i, part: &str| -> Result<Norm, Error> {
        Ok(Norm::Layer {
            weight: source.vector(&names::layer(stack, i, &format!("{part}.weight")), dim)?,
            bias: source.vector(&names::layer(stack, i, &format!("{part}.bias")), dim)?,
            eps: LN_EPS,
        })
    };
    let proj = |stack, i, part: &str, rows, cols| {
        let w = names::layer(stack, i, &format!("{part}.weight"));
        let b = names::layer(stack, i, &format!("{part}.bias"));
        pl.proj(&w, Some(&b), rows, cols)
    };
    let attn = |stack, i, part: &str| -> Result<AttnWeights, Error> {
        Ok(AttnWeights {
            q: proj(stack, i, &format!("{part}.q_proj"), dim, dim)?,
            k: proj(stack, i, &format!("{part}.k_proj"), dim, dim)?,
            v: proj(stack, i, &format!("{part}.v_proj"), dim, dim)?,
            o: proj(stack, i, &format!("{part}.out_proj"), dim, dim)?,
        })
    };
    let ffn = |stack, i, ffn_dim| -> Result<Ffn, Error> {
        Ok(Ffn::Plain {
            up: proj(stack, i, "fc1", ffn_dim, dim)?,
            down: proj(stack, i, "fc2", dim, ffn_dim)?,
            act,
        })
    };
    let mut encoder = Vec::with_capacity(c.encoder_layers);
    for i in 0..c.encoder_layers {
        let s = Stack::Encoder;
        encoder.push(EncoderLayer {
            attn: attn(s, i, "self_attn")?,
            attn_norm: norm(s, i, "self_attn_layer_norm")?,
            ffn: ffn(s, i, c.encoder_ffn_dim)?,
            ffn_norm: norm(s, i, "final_layer_norm")?,
        });
    }
    let mut decoder = Vec::with_capacity(c.decoder_layers);
    for i in 0..c.decoder_layers {
        let s = Stack::Decoder;
        decoder.push(DecoderLayer {
            self_attn: attn(s, i, "self_attn")?,
            self_norm: norm(s, i, "self_attn_layer_norm")?,
            cross_attn: attn(s, i, "encoder_attn")?,
            cross_norm: norm(s, i, "encoder_attn_layer_norm")?,
            ffn: ffn(s, i, c.decoder_ffn_dim)?,
            ffn_norm: norm(s, i, "final_layer_norm")?,
        });
    }
    let head_dim = dim / c.encoder_attention_heads;
    let n_pos = c.max_position_embeddings;
    Ok(Seq2Seq {
        config: Seq2SeqConfig {
            dim,
            n_heads: c.encoder_attention_heads,
            head_dim,
            n_vocab,
            attn_scale: (head_dim as f32).powf(-0.5),
            embed_scale: if c.scale_embedding {
                (dim as f32).sqrt()
            } else {
                1.0
            },
            output_scale: 1.0,
            max_positions: Some(n_pos),
            placement: NormPlacement::Post,
            decoder_start: c.decoder_start_token_id.unwrap_or(c.pad_token_id),
            eos: c.eos_token_id,
        },
        embed,
        positions: Positions::Sinusoidal {
            table: sinusoidal_table(n_pos, dim),
            n: n_pos,
        },
        encoder,
        decoder,
        encoder_norm: None,
        decoder_norm: None,
        lm_head,
        logits_bias,
    })
}
