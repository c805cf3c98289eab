//! BERT encoders (`BertModel` in the converter): tensor names and the
//! keys beyond the generic ones.

use std::path::Path;

use serde_json::Value as Json;

use super::keys::Ctx;
use crate::formats::gguf::{Metadata, Value};
use crate::Error;

/// The encoder classes converted (`BertModel` in the converter), and
/// each's GGUF architecture.
pub(super) const ENCODERS: [(&str, &str); 3] = [
    ("BertModel", "bert"),
    ("BertForMaskedLM", "bert"),
    ("CamembertModel", "bert"),
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

/// A BERT tensor's GGUF name (`None`: left out, as the converter leaves
/// out the pooler, the masked-LM head and `position_ids`).
pub(super) fn bert_name(
    name: &str,
    n_layers: usize,
    source: &str,
) -> Result<Option<String>, Error> {
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
            format!("tensor '{name}' is not part of a BERT model"),
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
        "embeddings.LayerNorm" => Some("token_embd_norm"),
        _ => None,
    };
    if let Some(f) = fixed {
        return Ok(Some(format!("{f}.{suffix}")));
    }
    let rest = module.strip_prefix("encoder.layer.").ok_or_else(unknown)?;
    let (l, m) = rest.split_once('.').ok_or_else(unknown)?;
    let l: usize = l.parse().map_err(|_| unknown())?;
    if l >= n_layers {
        return Err(Error::model(
            source,
            format!("tensor '{name}': layer {l} is not one of the {n_layers} in config.json"),
        ));
    }
    let (_, g) = BERT_LAYER
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
