//! BERT encoders (`BertModel` in the converter) and nomic-bert
//! (`NomicBertModel`): tensor names and the keys beyond the generic ones.

use std::path::Path;

use serde_json::Value as Json;

use super::keys::Ctx;
use crate::formats::gguf::{Metadata, Value};
use crate::Error;

/// The encoder classes converted (`BertModel` in the converter), and
/// each's GGUF architecture.
pub(super) const ENCODERS: [(&str, &str); 4] = [
    ("BertModel", "bert"),
    ("BertForMaskedLM", "bert"),
    ("CamembertModel", "bert"),
    ("NomicBertModel", "nomic-bert"),
];

/// BERT tensor names: HF module suffix, GGUF name (`{}`: the layer).
const BERT_LAYER: [(&str, &str); 10] = [
    ("attention.self.query", "attn_q"),
    ("attention.self.key", "attn_k"),
    ("attention.self.value", "attn_v"),
    ("attention.output.dense", "attn_output"),
    ("attention.output.LayerNorm", "attn_output_norm"),
    ("intermediate.dense", "ffn_up"),
    ("output.dense", "ffn_down"),
    ("output.LayerNorm", "layer_output_norm"),
    // Older checkpoints' LayerNorm parameter names (gamma/beta are renamed
    // before matching).
    ("attention.output.layer_norm", "attn_output_norm"),
    ("output.layer_norm", "layer_output_norm"),
];

/// nomic-bert tensor names (`{}`: the layer): HF module suffix, GGUF name.
const NOMIC_LAYER: [(&str, &str); 7] = [
    ("attn.Wqkv", "attn_qkv"),
    ("attn.out_proj", "attn_output"),
    ("mlp.fc11", "ffn_up"),
    ("mlp.fc12", "ffn_gate"),
    ("mlp.fc2", "ffn_down"),
    ("norm1", "attn_output_norm"),
    ("norm2", "layer_output_norm"),
];

/// An encoder tensor's GGUF name (`None`: left out, as the converter
/// leaves out the pooler, the masked-LM head and `position_ids`), for the
/// GGUF architecture `arch` (`bert` or `nomic-bert`).
pub(super) fn encoder_name(
    arch: &str,
    name: &str,
    n_layers: usize,
    source: &str,
) -> Result<Option<String>, Error> {
    let nomic = arch == "nomic-bert";
    let mut n = name.strip_prefix("bert.").unwrap_or(name).to_string();
    if let Some(b) = n.strip_suffix(".gamma") {
        n = format!("{b}.weight");
    } else if let Some(b) = n.strip_suffix(".beta") {
        n = format!("{b}.bias");
    }
    if matches!(
        n.as_str(),
        "embeddings.position_ids" | "pooler.dense.weight" | "pooler.dense.bias"
    ) || n.starts_with("cls.predictions")
        || n.starts_with("cls.seq_relationship")
    {
        return Ok(None);
    }
    let unknown = || {
        Error::model(
            source,
            format!("tensor '{name}' is not part of a {arch} model"),
        )
    };
    let (module, suffix) = match n.rsplit_once('.') {
        Some((m, s @ ("weight" | "bias"))) => (m, s),
        _ => return Err(unknown()),
    };
    let fixed = match module {
        "embeddings.word_embeddings" => Some("token_embd"),
        "embeddings.position_embeddings" => Some("position_embd"),
        "embeddings.token_type_embeddings" => Some("token_types"),
        "embeddings.LayerNorm" if !nomic => Some("token_embd_norm"),
        "emb_ln" if nomic => Some("token_embd_norm"),
        _ => None,
    };
    if let Some(f) = fixed {
        return Ok(Some(format!("{f}.{suffix}")));
    }
    let (prefix, table) = if nomic {
        ("encoder.layers.", &NOMIC_LAYER[..])
    } else {
        ("encoder.layer.", &BERT_LAYER[..])
    };
    let rest = module.strip_prefix(prefix).ok_or_else(unknown)?;
    let (l, m) = rest.split_once('.').ok_or_else(unknown)?;
    let l: usize = l.parse().map_err(|_| unknown())?;
    if l >= n_layers {
        return Err(Error::model(
            source,
            format!("tensor '{name}': layer {l} is not one of the {n_layers} in config.json"),
        ));
    }
    let (_, g) = table
        .iter()
        .find(|(h, _)| *h == m)
        .ok_or_else(unknown)?;
    Ok(Some(format!("blk.{l}.{g}.{suffix}")))
}

/// `BertModel.set_gguf_parameters`'s own keys: not causal, the pooling of
/// the sentence-transformers `modules.json`.
pub(super) fn bert_keys(x: &Ctx, md: &mut Metadata) -> Result<(), Error> {
    let dir = x.dir;
    x.put(md, "attention.causal", Value::Bool(false));
    let modules = dir.join("modules.json");
    let Ok(text) = std::fs::read_to_string(&modules) else {
        return Ok(());
    };
    let shown = |p: &Path| p.display().to_string();
    let j: Json = serde_json::from_str(&text)
        .map_err(|e| Error::model(shown(&modules), format!("invalid JSON: {e}")))?;
    let Some(path) = j.as_array().into_iter().flatten().find_map(|m| {
        let ty = m.get("type").and_then(Json::as_str)?;
        ty.ends_with("Pooling")
            .then(|| m.get("path").and_then(Json::as_str).map(str::to_string))
            .flatten()
    }) else {
        return Ok(());
    };
    let cfg = dir.join(&path).join("config.json");
    let text = std::fs::read_to_string(&cfg).map_err(|e| Error::io(shown(&cfg), e))?;
    let p: Json = serde_json::from_str(&text)
        .map_err(|e| Error::model(shown(&cfg), format!("invalid JSON: {e}")))?;
    let on = |k: &str| p.get(k).and_then(Json::as_bool) == Some(true);
    let ty = if on("pooling_mode_mean_tokens") {
        1
    } else if on("pooling_mode_cls_token") {
        2
    } else if on("pooling_mode_lasttoken") {
        3
    } else {
        match p.get("pooling_mode").and_then(Json::as_str) {
            Some("mean") => 1,
            Some("cls") => 2,
            Some("lasttoken") => 3,
            _ => {
                return Err(Error::model(
                    shown(&cfg),
                    "only mean, CLS and last-token pooling are converted",
                ))
            }
        }
    };
    x.put(md, "pooling_type", Value::U32(ty));
    Ok(())
}

/// The GGUF architecture of an encoder `config.json` (one of
/// [`ENCODERS`]), or an error listing what `ferrite convert` knows.
pub(super) fn encoder_arch(config: &Json, source: &str) -> Result<&'static str, Error> {
    let archs: Vec<&str> = config
        .get("architectures")
        .and_then(Json::as_array)
        .map(|a| a.iter().filter_map(Json::as_str).collect())
        .unwrap_or_default();
    if let Some((_, arch)) = archs
        .iter()
        .find_map(|a| ENCODERS.iter().find(|(c, _)| c == a))
    {
        return Ok(arch);
    }
    let mut known = crate::formats::hf_decoder::supported_classes();
    known.extend(ENCODERS.iter().map(|(c, _)| *c));
    let why = if archs.iter().any(|a| a.starts_with("MPNet")) {
        " (llama.cpp's converter has no MPNet architecture, so there is no file to match)"
    } else {
        ""
    };
    Err(Error::model(
        source,
        format!(
            "'architectures': {archs:?} is not a class ferrite convert knows ({}){why}",
            known.join(", ")
        ),
    ))
}

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
pub(super) fn nomic_keys(x: &Ctx, md: &mut Metadata) -> Result<(), Error> {
    let c = nomic_config(x)?;
    let y = Ctx {
        dir: x.dir,
        c: &c,
        arch: x.arch,
        file_type: x.file_type,
    };
    super::keys::generic_keys(&y, md)?;
    bert_keys(&y, md)
}

/// `config.json` with transformers' names filled in from the remote
/// code's (see [`nomic_keys`]), after the converter's checks.
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
