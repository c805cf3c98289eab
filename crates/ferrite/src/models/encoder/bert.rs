//! BERT (Devlin et al. 2018) as HF transformers' `BertModel` and llama.cpp's
//! `bert` GGUF architecture lay it out: word + learned position + token
//! type embeddings, LayerNorm; per layer Q/K/V with biases, output
//! projection, post-LN, a GELU feed-forward, post-LN.
//!
//! Tensor names: HF `bert/modeling_bert.py` (optionally under a `bert.`
//! prefix, as in `BertForMaskedLM` checkpoints); llama.cpp
//! `gguf-py/gguf/tensor_mapping.py` (`token_embd`, `position_embd`,
//! `token_types`, `blk.N.attn_q`, ...).

use ferrite_kernels::math::Activation;

use super::config::{JsonConfig, Sizes};
use super::weights::{token_tables, Dense, WeightSource};
use super::{Encoder, EncoderLayer, Mlp, Norm, Positions};
use crate::models::hparams::HParams;
use crate::Error;
use crate::convert::bert::{bert_keys, TensorLayout};
use crate::convert::families::ConvertSpec;
use crate::convert::keys::{generic_keys, Ctx};
use crate::convert::vocab::VocabKind;
use crate::formats::gguf::Metadata;
use crate::models::{EncoderArch, EncoderConvert};

/// The activation a `hidden_act` names.
pub(crate) fn activation(name: &str) -> Option<Activation> {
    Some(match name {
        "gelu" => Activation::GeluErf,
        "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => Activation::GeluTanh,
        "silu" | "swish" => Activation::Silu,
        "relu" => Activation::Relu,
        _ => return None,
    })
}

/// Loads BERT from a safetensors directory with its `config.json`.
pub fn from_hf(src: &WeightSource, config: &serde_json::Value) -> Result<Encoder, Error> {
    let cfg = JsonConfig {
        value: config,
        source: src.source(),
    };
    if let Some(p) = cfg.opt_str(&["position_embedding_type"]) {
        if p != "absolute" {
            return Err(cfg.error(
                "position_embedding_type",
                &format!("'{p}' is not supported (only 'absolute')"),
            ));
        }
    }
    let act_name = cfg.opt_str(&["hidden_act"]).unwrap_or("gelu");
    let act = activation(act_name)
        .ok_or_else(|| cfg.error("hidden_act", &format!("'{act_name}' is not supported")))?;
    let sizes = Sizes::from_json(&cfg, &["max_position_embeddings"])?;
    let p = if src.has("bert.embeddings.word_embeddings.weight") {
        "bert."
    } else {
        ""
    };
    let names = |i: usize, what: &str| -> String {
        let part = match what {
            "q" => "attention.self.query",
            "k" => "attention.self.key",
            "v" => "attention.self.value",
            "out" => "attention.output.dense",
            "attn_norm" => "attention.output.LayerNorm",
            "up" => "intermediate.dense",
            "down" => "output.dense",
            _ => "output.LayerNorm",
        };
        format!("{p}encoder.layer.{i}.{part}")
    };
    load(
        src,
        &sizes,
        act,
        &Globals {
            token: format!("{p}embeddings.word_embeddings.weight"),
            position: format!("{p}embeddings.position_embeddings.weight"),
            token_type: format!("{p}embeddings.token_type_embeddings.weight"),
            norm: format!("{p}embeddings.LayerNorm"),
            first_position: 0,
        },
        &names,
    )
}

/// Loads BERT from a GGUF file of architecture `bert`.
pub fn from_gguf(src: &WeightSource, hp: &HParams) -> Result<Encoder, Error> {
    let sizes = Sizes::from_gguf(hp)?;
    // BERT checkpoints use the exact (erf) GELU (HF `hidden_act: gelu`);
    // llama.cpp's graph approximates it with tanh, and its embeddings
    // differ from HF's by about 6e-5 for that reason.
    let act = Activation::GeluErf;
    let names = |i: usize, what: &str| -> String {
        let part = match what {
            "q" => "attn_q",
            "k" => "attn_k",
            "v" => "attn_v",
            "out" => "attn_output",
            "attn_norm" => "attn_output_norm",
            "up" => "ffn_up",
            "down" => "ffn_down",
            _ => "layer_output_norm",
        };
        format!("blk.{i}.{part}")
    };
    load(
        src,
        &sizes,
        act,
        &Globals {
            token: "token_embd.weight".into(),
            position: "position_embd.weight".into(),
            token_type: "token_types.weight".into(),
            norm: "token_embd_norm".into(),
            first_position: 0,
        },
        &names,
    )
}

/// Names of the tensors outside the layers, and where positions start.
pub(crate) struct Globals {
    pub token: String,
    pub position: String,
    /// Absent in models without token types.
    pub token_type: String,
    /// Prefix of `.weight` / `.bias`.
    pub norm: String,
    /// The position table's row for the first token.
    pub first_position: usize,
}

pub(crate) fn layer_norm(
    src: &WeightSource,
    prefix: &str,
    dim: usize,
    eps: f32,
) -> Result<Norm, Error> {
    Ok(Norm::Layer {
        weight: src.vector(&format!("{prefix}.weight"), dim)?,
        bias: src.vector(&format!("{prefix}.bias"), dim)?,
        eps,
    })
}

/// Loads a BERT-shaped encoder whose layer `i`'s part `what` (`q`, `k`, `v`, `out`,
/// `attn_norm`, `up`, `down`, `out_norm`) is named `names(i, what)`.
pub(crate) fn load(
    src: &WeightSource,
    s: &Sizes,
    act: Activation,
    g: &Globals,
    names: &dyn Fn(usize, &str) -> String,
) -> Result<Encoder, Error> {
    let dim = s.dim;
    let tables = token_tables(src, &g.token, &g.token_type, dim)?;
    let mut config = s.config(tables.n_vocab, false, &src.source())?;
    if g.first_position >= s.n_positions {
        return Err(Error::model(
            src.source(),
            format!(
                "{} positions leave none after the first {}",
                s.n_positions, g.first_position
            ),
        ));
    }
    config.max_positions = s.n_positions - g.first_position;
    config.trained_positions = config.max_positions;
    let table = src.matrix(&g.position, s.n_positions, dim)?;
    // F16 weights stay in f16 (same bits, half the memory).
    let dense = |name: &str, rows: usize, cols: usize| -> Result<Dense, Error> {
        Ok(Dense {
            w: src.packed(&format!("{name}.weight"), rows, cols)?,
            bias: Some(src.vector(&format!("{name}.bias"), rows)?),
        })
    };
    let mut layers = Vec::with_capacity(s.n_layers);
    for i in 0..s.n_layers {
        let part = |what: &str| -> Result<(Vec<f32>, Option<Vec<f32>>), Error> {
            let name = names(i, what);
            Ok((
                src.matrix(&format!("{name}.weight"), dim, dim)?,
                Some(src.vector(&format!("{name}.bias"), dim)?),
            ))
        };
        let qkv = Dense::stacked(&[part("q")?, part("k")?, part("v")?], dim);
        layers.push(EncoderLayer {
            qkv,
            out: dense(&names(i, "out"), dim, dim)?,
            attn_norm: layer_norm(src, &names(i, "attn_norm"), dim, s.eps)?,
            mlp: Mlp::Plain {
                up: dense(&names(i, "up"), s.ffn, dim)?,
                down: dense(&names(i, "down"), dim, s.ffn)?,
                act,
            },
            out_norm: layer_norm(src, &names(i, "out_norm"), dim, s.eps)?,
        });
    }
    Ok(Encoder {
        config,
        token_embd: tables.token_embd,
        token_type0: tables.type0,
        positions: Positions::Learned {
            table,
            first: g.first_position,
        },
        relative_bias: None,
        embd_norm: layer_norm(src, &g.norm, dim, s.eps)?,
        layers,
    })
}

/// BERT tensor names for the converter (older checkpoints' LayerNorm
/// `gamma` / `beta` are renamed `weight` / `bias` first).
const CONVERT_LAYOUT: TensorLayout = TensorLayout {
    layer_prefix: "encoder.layer.",
    embd_norm: "embeddings.LayerNorm",
    layer: &[
        ("attention.self.query", "attn_q"),
        ("attention.self.key", "attn_k"),
        ("attention.self.value", "attn_v"),
        ("attention.output.dense", "attn_output"),
        ("attention.output.LayerNorm", "attn_output_norm"),
        ("intermediate.dense", "ffn_up"),
        ("output.dense", "ffn_down"),
        ("output.LayerNorm", "layer_output_norm"),
        ("attention.output.layer_norm", "attn_output_norm"),
        ("output.layer_norm", "layer_output_norm"),
    ],
};

/// `BertModel`: the generic keys, then not causal and the pooling.
fn convert_keys(x: &Ctx, md: &mut Metadata) -> Result<(), Error> {
    generic_keys(x, md)?;
    bert_keys(x, md)
}

/// The BERT family: GGUF `bert`, HF `model_type` `bert`; converted from
/// `BertModel`, `BertForMaskedLM` and `CamembertModel` directories.
pub(crate) const FAMILY: EncoderArch = EncoderArch {
    gguf: Some(("bert", from_gguf)),
    hf_name: "bert",
    from_hf,
    matryoshka_layer_norm: false,
    task_prefixes: false,
    convert: Some(EncoderConvert {
        classes: &["BertModel", "BertForMaskedLM", "CamembertModel"],
        spec: ConvertSpec {
            vocab: VocabKind::Bert,
            ..ConvertSpec::new(convert_keys)
        },
        layout: &CONVERT_LAYOUT,
    }),
};
