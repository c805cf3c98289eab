//! nomic-bert (nomic-embed-text v1/v1.5): a BERT encoder with rotary
//! positions (GPT-NeoX layout, optional dynamic NTK scaling past the
//! trained length), Q/K/V fused in one matrix, SwiGLU feed-forward, no
//! biases by default, post-LN, token type embeddings.
//!
//! Three layouts of the same weights are read:
//! - nomic's own checkpoints (`encoder.layers.N.attn.Wqkv`, `mlp.fc11` = up,
//!   `mlp.fc12` = gate, `mlp.fc2`, `norm1`, `norm2`, `emb_ln`), with config
//!   keys `n_embd`, `n_head`, `rotary_emb_base`, ...;
//! - HF transformers' `NomicBertModel` (`layers.N.self_attn.q_proj`, ...);
//! - llama.cpp's `nomic-bert` GGUF (`blk.N.attn_qkv`, `ffn_up`, `ffn_gate`).
//!
//! References: HF `models/nomic_bert/modeling_nomic_bert.py` and its
//! checkpoint key mapping in `conversion_mapping.py`; llama.cpp
//! `convert_hf_to_gguf.py` (`NomicBertModel`).

use super::bert::layer_norm;
use super::config::{JsonConfig, Sizes};
use super::weights::{token_tables, Dense, WeightSource};
use super::{Encoder, EncoderLayer, Mlp, Positions};
use crate::models::hparams::HParams;
use crate::Error;
use crate::convert::bert::{bert_keys, TensorLayout};
use crate::convert::families::ConvertSpec;
use crate::convert::keys::{generic_keys, Ctx};
use crate::convert::vocab::VocabKind;
use crate::formats::gguf::Metadata;
use crate::models::{EncoderArch, EncoderConvert};
use serde_json::Value as Json;

/// How positions are rotated: base and optional dynamic NTK scaling.
struct Rope {
    base: f64,
    ntk: Option<(f64, usize)>,
}

/// nomic-embed-text's long-context limit (`n_positions` in nomic's
/// config): trained on 2048 positions, used up to 8192 with dynamic NTK
/// RoPE scaling by a factor of 2 (nomic's model card:
/// `rotary_scaling_factor=2`). llama.cpp's GGUF records only the trained
/// length (`context_length`), so a GGUF model takes up to this many
/// positions and scales its RoPE past the trained length.
const LONG_POSITIONS: usize = 8192;
const LONG_NTK_FACTOR: f64 = 2.0;

/// Where each weight of layer `i` lives.
enum Layout {
    Nomic,
    Transformers,
    Gguf,
}

impl Layout {
    fn token(&self) -> &'static str {
        match self {
            Layout::Gguf => "token_embd.weight",
            _ => "embeddings.word_embeddings.weight",
        }
    }

    fn token_type(&self) -> &'static str {
        match self {
            Layout::Gguf => "token_types.weight",
            _ => "embeddings.token_type_embeddings.weight",
        }
    }

    fn embd_norm(&self) -> &'static str {
        match self {
            Layout::Nomic => "emb_ln",
            Layout::Transformers => "embeddings.LayerNorm",
            Layout::Gguf => "token_embd_norm",
        }
    }

    /// The prefix (before `.weight` / `.bias`) of part `what` of layer `i`.
    fn layer(&self, i: usize, what: &str) -> String {
        let part = match (self, what) {
            (Layout::Nomic, "qkv") => "attn.Wqkv",
            (Layout::Nomic, "out") => "attn.out_proj",
            (Layout::Nomic, "up") => "mlp.fc11",
            (Layout::Nomic, "gate") => "mlp.fc12",
            (Layout::Nomic, "down") => "mlp.fc2",
            (Layout::Nomic, "attn_norm") => "norm1",
            (Layout::Nomic, _) => "norm2",
            (Layout::Transformers, "q") => "self_attn.q_proj",
            (Layout::Transformers, "k") => "self_attn.k_proj",
            (Layout::Transformers, "v") => "self_attn.v_proj",
            (Layout::Transformers, "out") => "self_attn.o_proj",
            (Layout::Transformers, "up") => "mlp.up_proj",
            (Layout::Transformers, "gate") => "mlp.gate_proj",
            (Layout::Transformers, "down") => "mlp.down_proj",
            (Layout::Transformers, "attn_norm") => "post_attention_layernorm",
            (Layout::Transformers, _) => "post_mlp_layernorm",
            (Layout::Gguf, "qkv") => "attn_qkv",
            (Layout::Gguf, "out") => "attn_output",
            (Layout::Gguf, "up") => "ffn_up",
            (Layout::Gguf, "gate") => "ffn_gate",
            (Layout::Gguf, "down") => "ffn_down",
            (Layout::Gguf, "attn_norm") => "attn_output_norm",
            (Layout::Gguf, _) => "layer_output_norm",
        };
        match self {
            Layout::Nomic => format!("encoder.layers.{i}.{part}"),
            Layout::Transformers => format!("layers.{i}.{part}"),
            Layout::Gguf => format!("blk.{i}.{part}"),
        }
    }
}

/// Loads nomic-bert from a safetensors directory with its `config.json`
/// (nomic's original keys or transformers' `NomicBertConfig`).
pub fn from_hf(src: &WeightSource, config: &serde_json::Value) -> Result<Encoder, Error> {
    let cfg = JsonConfig {
        value: config,
        source: src.source(),
    };
    if cfg.opt_bool(&["prenorm"]) == Some(true) {
        return Err(cfg.error("prenorm", "pre-norm nomic-bert is not supported"));
    }
    if cfg.opt_bool(&["rotary_emb_interleaved"]) == Some(true) {
        return Err(cfg.error(
            "rotary_emb_interleaved",
            "interleaved rotary embeddings are not supported",
        ));
    }
    if let Some(f) = cfg.opt_f64(&["rotary_emb_fraction"])? {
        if f != 1.0 {
            return Err(cfg.error(
                "rotary_emb_fraction",
                &format!("{f}: only 1.0 is supported"),
            ));
        }
    }
    if let Some(a) = cfg.opt_str(&["activation_function", "hidden_act"]) {
        if !matches!(a, "swiglu" | "silu" | "swish") {
            return Err(cfg.error(
                "activation_function",
                &format!("'{a}' is not supported (swiglu)"),
            ));
        }
    }
    let rope = config
        .get("rope_parameters")
        .or_else(|| config.get("rope_scaling"));
    let rope_cfg = rope.map(|r| JsonConfig {
        value: r,
        source: src.source(),
    });
    let rope_base = match &rope_cfg {
        Some(r) => r.opt_f64(&["rope_theta"])?,
        None => None,
    };
    let rope_base = match rope_base {
        Some(b) => b,
        None => cfg
            .opt_f64(&["rotary_emb_base", "rope_theta"])?
            .unwrap_or(1000.0),
    };
    let ntk = match cfg.opt_f64(&["rotary_scaling_factor"])? {
        Some(f) => Some((f, cfg.size(&["max_trained_positions"])?)),
        None => match &rope_cfg {
            Some(r) if r.opt_str(&["rope_type", "type"]) == Some("dynamic") => {
                let f = r.opt_f64(&["factor"])?.ok_or_else(|| {
                    cfg.error("rope_parameters", "dynamic scaling without 'factor'")
                })?;
                Some((f, cfg.size(&["max_position_embeddings"])?))
            }
            _ => None,
        },
    };
    let sizes = Sizes::from_json(&cfg, &["n_positions", "max_position_embeddings"])?;
    let trained = cfg
        .opt_size(&["max_trained_positions"])?
        .unwrap_or(sizes.n_positions)
        .min(sizes.n_positions);
    let rope = Rope {
        base: rope_base,
        ntk,
    };
    let layout = if src.has("encoder.layers.0.attn.Wqkv.weight") {
        Layout::Nomic
    } else {
        Layout::Transformers
    };
    let mut encoder = load(src, &sizes, &rope, &layout)?;
    encoder.config.trained_positions = trained;
    Ok(encoder)
}

/// Loads nomic-bert from a GGUF file of architecture `nomic-bert`: inputs
/// up to the file's `context_length` as llama.cpp runs them, longer ones
/// (up to `LONG_POSITIONS`) with dynamic NTK scaling.
pub fn from_gguf(src: &WeightSource, hp: &HParams) -> Result<Encoder, Error> {
    let mut sizes = Sizes::from_gguf(hp)?;
    let trained = sizes.n_positions;
    sizes.n_positions = trained.max(LONG_POSITIONS);
    let rope = Rope {
        base: hp.opt_f32("rope.freq_base")?.unwrap_or(1000.0) as f64,
        ntk: Some((LONG_NTK_FACTOR, trained)),
    };
    let mut encoder = load(src, &sizes, &rope, &Layout::Gguf)?;
    encoder.config.trained_positions = trained;
    Ok(encoder)
}

fn load(src: &WeightSource, s: &Sizes, rope: &Rope, layout: &Layout) -> Result<Encoder, Error> {
    let dim = s.dim;
    let tables = token_tables(src, layout.token(), layout.token_type(), dim)?;
    let config = s.config(tables.n_vocab, true, &src.source())?;
    // A weight with an optional bias.
    let bias = |name: &str, rows: usize| -> Result<Option<Vec<f32>>, Error> {
        let bias_name = format!("{name}.bias");
        if src.has(&bias_name) {
            Ok(Some(src.vector(&bias_name, rows)?))
        } else {
            Ok(None)
        }
    };
    let part =
        |name: &str, rows: usize, cols: usize| -> Result<(Vec<f32>, Option<Vec<f32>>), Error> {
            let w = src.matrix(&format!("{name}.weight"), rows, cols)?;
            Ok((w, bias(name, rows)?))
        };
    // F16 weights stay in f16 (same bits, half the memory).
    let dense = |name: &str, rows: usize, cols: usize| -> Result<Dense, Error> {
        Ok(Dense {
            w: src.packed(&format!("{name}.weight"), rows, cols)?,
            bias: bias(name, rows)?,
        })
    };
    let mut layers = Vec::with_capacity(s.n_layers);
    for i in 0..s.n_layers {
        let name = |what: &str| layout.layer(i, what);
        let qkv = match layout {
            Layout::Transformers => Dense::stacked(
                &[
                    part(&name("q"), dim, dim)?,
                    part(&name("k"), dim, dim)?,
                    part(&name("v"), dim, dim)?,
                ],
                dim,
            ),
            _ => dense(&name("qkv"), 3 * dim, dim)?,
        };
        layers.push(EncoderLayer {
            qkv,
            out: dense(&name("out"), dim, dim)?,
            attn_norm: layer_norm(src, &name("attn_norm"), dim, s.eps)?,
            mlp: Mlp::SwiGlu {
                gate: dense(&name("gate"), s.ffn, dim)?,
                up: dense(&name("up"), s.ffn, dim)?,
                down: dense(&name("down"), dim, s.ffn)?,
            },
            out_norm: layer_norm(src, &name("out_norm"), dim, s.eps)?,
        });
    }
    Ok(Encoder {
        config,
        token_embd: tables.token_embd,
        token_type0: tables.type0,
        positions: Positions::Rotary {
            base: rope.base,
            ntk: rope.ntk,
        },
        relative_bias: None,
        embd_norm: layer_norm(src, layout.embd_norm(), dim, s.eps)?,
        layers,
    })
}

/// nomic-bert tensor names for the converter (nomic's own checkpoints).
const CONVERT_LAYOUT: TensorLayout = TensorLayout {
    layer_prefix: "encoder.layers.",
    embd_norm: "emb_ln",
    layer: &[
        ("attn.Wqkv", "attn_qkv"),
        ("attn.out_proj", "attn_output"),
        ("mlp.fc11", "ffn_up"),
        ("mlp.fc12", "ffn_gate"),
        ("mlp.fc2", "ffn_down"),
        ("norm1", "attn_output_norm"),
        ("norm2", "layer_output_norm"),
    ],
};

/// The nomic-bert family: GGUF `nomic-bert`, HF `model_type`
/// `nomic_bert`, converted from `NomicBertModel` directories; a Matryoshka
/// cut layer-normalizes first and its models take task prefixes.
pub(crate) const FAMILY: EncoderArch = EncoderArch {
    gguf: Some(("nomic-bert", from_gguf)),
    hf_name: "nomic_bert",
    from_hf,
    matryoshka_layer_norm: true,
    task_prefixes: true,
    convert: Some(EncoderConvert {
        classes: &["NomicBertModel"],
        spec: ConvertSpec {
            vocab: VocabKind::Bert,
            ..ConvertSpec::new(convert_keys)
        },
        layout: &CONVERT_LAYOUT,
    }),
};

/// `NomicBertModel`: the converter's checks (it converts nomic-embed-text
/// v1/v1.5's layout only), then `BertModel`'s keys.
///
/// The converter reads the hyper-parameters through transformers'
/// `AutoConfig`, which (transformers 5) is transformers' own
/// `NomicBertConfig`: `hidden_size`, `num_hidden_layers`,
/// `num_attention_heads`, `intermediate_size`, `max_position_embeddings`
/// and a derived `head_dim` (written as the key and value lengths) rather
/// than the remote code's `n_embd`, `n_layer`, `n_head`, `n_inner`. Those
/// are taken here from either spelling, transformers' first; the context
/// length without `max_position_embeddings` is the converter's own rule
/// (8192 positions trained on 2048: 2048).
fn convert_keys(x: &Ctx, md: &mut Metadata) -> Result<(), Error> {
    let c = nomic_config(x)?;
    let y = Ctx {
        dir: x.dir,
        c: &c,
        arch: x.arch,
        file_type: x.file_type,
    };
    generic_keys(&y, md)?;
    bert_keys(&y, md)
}

/// `config.json` with transformers' names filled in from the remote
/// code's (see [`convert_keys`]), after the converter's checks.
fn nomic_config(x: &Ctx) -> Result<Json, Error> {
    let c = x.c;
    let moe = c.get("moe_every_n_layers");
    if moe.is_some_and(|v| !v.is_null() && v != &Json::from(0) && v != &Json::Bool(false)) {
        return Err(x.bad(
            "moe_every_n_layers",
            "nomic-bert mixture of experts (nomic-embed-text-v2-moe) is not converted",
        ));
    }
    let tok = x.dir.join("tokenizer.json");
    let shown = tok.display().to_string();
    let text = std::fs::read_to_string(&tok).map_err(|e| Error::io(&shown, e))?;
    let j: Json = serde_json::from_str(&text)
        .map_err(|e| Error::model(&shown, format!("invalid JSON: {e}")))?;
    match j.pointer("/model/type").and_then(Json::as_str) {
        Some("WordPiece") => {}
        Some("Unigram") => {
            return Err(Error::model(
                shown,
                "a nomic-bert Unigram (XLM-RoBERTa) vocabulary is not converted",
            ))
        }
        t => {
            return Err(Error::model(
                shown,
                format!("unknown tokenizer {t:?} (the converter knows WordPiece and Unigram)"),
            ))
        }
    }
    let is = |k: &str, want: &Json, what: &str| -> Result<(), Error> {
        match c.get(k) {
            Some(v) if v == want => Ok(()),
            Some(_) => Err(x.bad(k, &format!("must be {what} (the converter's nomic-bert)"))),
            None => Err(x.bad(k, "missing (the converter's nomic-bert needs it)")),
        }
    };
    is("activation_function", &Json::from("swiglu"), "\"swiglu\"")?;
    for k in [
        "causal",
        "qkv_proj_bias",
        "mlp_fc1_bias",
        "mlp_fc2_bias",
        "prenorm",
        "rotary_emb_interleaved",
    ] {
        is(k, &Json::Bool(false), "false")?;
    }
    if c.get("rotary_emb_fraction").and_then(Json::as_f64) != Some(1.0) {
        return Err(x.bad("rotary_emb_fraction", "must be 1.0 (the converter's nomic-bert)"));
    }
    is("rotary_emb_scale_base", &Json::Null, "null")?;
    let positions = c.get("n_positions").and_then(Json::as_u64);
    let trained = c
        .get("max_trained_positions")
        .map_or(Some(2048), Json::as_u64);
    let ctx = match (positions, trained) {
        (Some(8192), Some(2048)) => 2048,
        (Some(2048), Some(2048)) => 512,
        _ => {
            return Err(x.bad(
                "n_positions",
                &format!(
                    "{positions:?} with max_trained_positions {trained:?}: not a layout the converter knows (8192/2048 or 2048/2048)"
                ),
            ))
        }
    };
    let mut m = c.as_object().cloned().unwrap_or_default();
    for (ours, theirs) in [
        ("hidden_size", "n_embd"),
        ("num_hidden_layers", "n_layer"),
        ("num_attention_heads", "n_head"),
        ("intermediate_size", "n_inner"),
    ] {
        if m.get(ours).is_none_or(Json::is_null) {
            let v = m.get(theirs).cloned().unwrap_or(Json::Null);
            m.insert(ours.into(), v);
        }
    }
    if m.get("max_position_embeddings").is_none_or(Json::is_null) {
        m.insert("max_position_embeddings".into(), Json::from(ctx));
    }
    if m.get("head_dim").is_none_or(Json::is_null) {
        let size = |k: &str| m.get(k).and_then(Json::as_u64);
        match (size("hidden_size"), size("num_attention_heads")) {
            (Some(w), Some(h)) if h > 0 && w % h == 0 => {
                m.insert("head_dim".into(), Json::from(w / h));
            }
            _ => {
                return Err(x.bad(
                    "n_head",
                    "missing, zero or not a divisor of n_embd",
                ))
            }
        }
    }
    Ok(Json::Object(m))
}
