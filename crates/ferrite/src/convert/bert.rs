//! Encoders for the converter (`BertModel`, `NomicBertModel`): which
//! class is which family (the families' registry entries,
//! `models::ENCODERS`), their tensor names (each family's
//! [`TensorLayout`]), and BERT's keys beyond the generic ones (a family's
//! own are in its file in `models/encoder/`).

use std::path::Path;

use serde_json::Value as Json;

use super::keys::Ctx;
use crate::formats::gguf::{Metadata, Value};
use crate::models::{EncoderConvert, ENCODERS};
use crate::Error;

/// How an encoder family's HF tensors are named, for the converter
/// (`EncoderConvert::layout` of its registry entry).
pub(crate) struct TensorLayout {
    /// The layers' prefix (`encoder.layer.`, then the layer number).
    pub(crate) layer_prefix: &'static str,
    /// The module of the embeddings' norm (`token_embd_norm`).
    pub(crate) embd_norm: &'static str,
    /// Per-layer modules: HF module suffix, GGUF name.
    pub(crate) layer: &'static [(&'static str, &'static str)],
}

/// An encoder tensor's GGUF name (`None`: left out, as the converter
/// leaves out the pooler, the masked-LM head and `position_ids`), for the
/// GGUF architecture `arch`, whose tensors are named as `layout` says.
pub(super) fn encoder_name(
    (arch, layout): (&str, &TensorLayout),
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
        m if m == layout.embd_norm => Some("token_embd_norm"),
        _ => None,
    };
    if let Some(f) = fixed {
        return Ok(Some(format!("{f}.{suffix}")));
    }
    let rest = module
        .strip_prefix(layout.layer_prefix)
        .ok_or_else(unknown)?;
    let (l, m) = rest.split_once('.').ok_or_else(unknown)?;
    let l: usize = l.parse().map_err(|_| unknown())?;
    if l >= n_layers {
        return Err(Error::model(
            source,
            format!("tensor '{name}': layer {l} is not one of the {n_layers} in config.json"),
        ));
    }
    let (_, g) = layout
        .layer
        .iter()
        .find(|(h, _)| *h == m)
        .ok_or_else(unknown)?;
    Ok(Some(format!("blk.{l}.{g}.{suffix}")))
}

/// `BertModel.set_gguf_parameters`'s own keys: not causal, the pooling of
/// the sentence-transformers `modules.json`.
pub(crate) fn bert_keys(x: &Ctx, md: &mut Metadata) -> Result<(), Error> {
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

/// The GGUF architecture of an encoder `config.json` (a class of an
/// encoder family's `EncoderConvert`), with how it is converted, or an
/// error listing what `ferrite convert` knows.
pub(super) fn encoder_arch(
    config: &Json,
    source: &str,
) -> Result<(&'static str, &'static EncoderConvert), Error> {
    let archs: Vec<&str> = config
        .get("architectures")
        .and_then(Json::as_array)
        .map(|a| a.iter().filter_map(Json::as_str).collect())
        .unwrap_or_default();
    // Encoders converted: (GGUF architecture, how).
    let converted = || {
        ENCODERS
            .iter()
            .filter_map(|e| Some((e.gguf?.0, e.convert.as_ref()?)))
    };
    if let Some(found) = archs
        .iter()
        .find_map(|a| converted().find(|(_, c)| c.classes.contains(a)))
    {
        return Ok(found);
    }
    let mut known = crate::formats::hf_decoder::supported_classes();
    known.extend(converted().flat_map(|(_, c)| c.classes.iter().copied()));
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

