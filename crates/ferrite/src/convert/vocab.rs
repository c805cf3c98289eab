//! The tokenizer keys `convert_hf_to_gguf.py` writes: the vocabulary of
//! `tokenizer.json` as `tokenizer.ggml.tokens` / `token_type` (byte-level
//! BPE as `gpt2`, WordPiece as `bert` with its phantom-space pieces), the
//! pre-tokenizer's name (found, as the converter finds it, from the hash
//! of the ids the tokenizer gives a fixed check text), and what gguf-py's
//! `SpecialVocab` adds: merges, special token ids, `add_*_token` flags, the
//! chat template and the normalizer's flags.

use std::collections::HashMap;
use std::path::Path;

use serde_json::Value as Json;
use sha2::{Digest, Sha256};

use super::json::read_json;
use super::special::Special;
use crate::formats::gguf::{Array, Metadata, Value};
use crate::Error;

/// `gguf.TokenType`.
pub(super) const NORMAL: i32 = 1;
pub(super) const CONTROL: i32 = 3;
pub(super) const USER_DEFINED: i32 = 4;
pub(super) const UNUSED: i32 = 5;

/// The check text and the known `(sha256 of its ids, pre-tokenizer)` pairs,
/// extracted from llama.cpp's converter by `scripts/make-convert-goldens.py`.
const PRE_TOKENIZERS: &str = include_str!("pre_tokenizers.tsv");

/// The number of tokens of `tokenizer.json` (its model's vocabulary and
/// its added tokens, counted as Gemma 3's converter counts them).
pub(super) fn tokenizer_json_size(dir: &Path) -> Result<u64, Error> {
    let path = dir.join("tokenizer.json");
    let j = read_json(&path, true)?.unwrap_or_default();
    let vocab = j.get("model").and_then(|m| m.get("vocab"));
    let n = vocab
        .and_then(|v| {
            v.as_object()
                .map(|o| o.len())
                .or(v.as_array().map(Vec::len))
        })
        .ok_or_else(|| Error::model(path.display().to_string(), "no model vocabulary"))?;
    let added = j
        .get("added_tokens")
        .and_then(Json::as_array)
        .map_or(0, Vec::len);
    Ok((n + added) as u64)
}

/// The vocabulary kind written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum VocabKind {
    /// Byte-level BPE (`tokenizer.ggml.model = gpt2`).
    Gpt2,
    /// WordPiece (`bert`), for BERT and MPNet.
    Bert,
}

/// The pre-tokenizer name of `tokenizer.json` at `path` (`None`: its hash
/// is not one the converter knows).
fn pre_tokenizer(path: &Path) -> Result<(Option<String>, String), Error> {
    let mut lines = PRE_TOKENIZERS.lines();
    let check: String = lines
        .next()
        .and_then(|l| l.strip_prefix("check\t"))
        .and_then(|j| serde_json::from_str(j).ok())
        .ok_or_else(|| Error::Internal("pre_tokenizers.tsv: no check text".into()))?;
    let mut tok = crate::tokenize::hf_json::read_hf_json(path)
        .map_err(|e| Error::model(path.display().to_string(), e))?;
    // transformers' encode() ignores the file's truncation and padding.
    tok.with_truncation(None)
        .map_err(|e| Error::model(path.display().to_string(), e.to_string()))?;
    tok.with_padding(None);
    let enc = tok
        .encode(check.as_str(), true)
        .map_err(|e| Error::model(path.display().to_string(), e.to_string()))?;
    // Python's str() of a list of ints.
    let ids: Vec<String> = enc.get_ids().iter().map(u32::to_string).collect();
    let text = format!("[{}]", ids.join(", "));
    let hash = hex(&Sha256::digest(text.as_bytes()));
    // The converter tests every entry in turn: the last match wins.
    let name = lines
        .filter_map(|l| {
            let (h, n) = l.split_once('\t')?;
            (h == hash).then(|| n.to_string())
        })
        .next_back();
    Ok((name, hash))
}

pub(super) fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Does a token look special to the converter (`does_token_look_special`).
pub(super) fn looks_special(t: &str) -> bool {
    matches!(t, "<pad>" | "<mask>" | "<2mass>" | "[@BOS@]")
        || (t.starts_with("<|") && t.ends_with("|>"))
        || (t.starts_with("<\u{ff5c}") && t.ends_with("\u{ff5c}>"))
        || (t.starts_with("<unused") && t.ends_with('>'))
}

/// The tokenizer keys for `dir`, appended to `md`. `pre_override` names
/// the pre-tokenizer when the check-text hash is unknown (a known hash
/// always gives the converter's name).
pub(crate) fn write_vocab(
    dir: &Path,
    config: &Json,
    kind: VocabKind,
    pre_override: Option<&str>,
    md: &mut Metadata,
) -> Result<(), Error> {
    let path = dir.join("tokenizer.json");
    let tokenizer = read_json(&path, true)?.unwrap_or(Json::Null);
    let shown = path.display().to_string();
    let mut vocab: HashMap<u32, String> = HashMap::new();
    match tokenizer.get("model").and_then(|m| m.get("vocab")) {
        Some(Json::Object(v)) => {
            for (tok, id) in v {
                let id = id
                    .as_u64()
                    .and_then(|i| u32::try_from(i).ok())
                    .ok_or_else(|| Error::model(&shown, format!("token '{tok}': bad id")))?;
                vocab.insert(id, tok.clone());
            }
        }
        _ => {
            return Err(Error::model(
                &shown,
                "model.vocab is not a map of tokens to ids (only BPE and WordPiece \
                 tokenizers are converted)",
            ))
        }
    }
    // Added tokens: content, special, normalized.
    let mut added: HashMap<u32, (String, bool, bool)> = HashMap::new();
    for a in tokenizer
        .get("added_tokens")
        .and_then(Json::as_array)
        .into_iter()
        .flatten()
    {
        let (Some(id), Some(c)) = (
            a.get("id")
                .and_then(Json::as_u64)
                .and_then(|i| u32::try_from(i).ok()),
            a.get("content").and_then(Json::as_str),
        ) else {
            continue;
        };
        let special = a.get("special").and_then(Json::as_bool).unwrap_or(false);
        let normalized = a
            .get("normalized")
            .and_then(Json::as_bool)
            .unwrap_or(!special);
        vocab.insert(id, c.to_string());
        added.insert(id, (c.to_string(), special, normalized));
    }
    let max_id = vocab.keys().copied().max().unwrap_or(0) as usize;
    let vocab_size = match config.get("vocab_size").and_then(Json::as_u64) {
        Some(n) => n as usize,
        None => vocab.len(),
    };
    if max_id >= vocab_size {
        return Err(Error::model(
            &shown,
            format!("token id {max_id} is not below vocab_size {vocab_size}"),
        ));
    }
    let (pre, hash) = pre_tokenizer(&path)?;
    let pre = match (pre, pre_override) {
        (Some(p), _) => p,
        (None, Some(p)) => p.to_string(),
        (None, None) => {
            return Err(Error::Input(format!(
                "{shown}: the pre-tokenizer is not one llama.cpp's converter knows \
                 (check-text hash {hash}); name it with --pre-tokenizer NAME \
                 (e.g. gpt-2 for GPT-2's byte-level regex), as convert_hf_to_gguf.py \
                 would need its table updated"
            )))
        }
    };
    let mut tokens = Vec::with_capacity(vocab_size);
    let mut types = Vec::with_capacity(vocab_size);
    for i in 0..vocab_size as u32 {
        let Some(tok) = vocab.get(&i) else {
            tokens.push(format!("[PAD{i}]"));
            types.push(UNUSED);
            continue;
        };
        let mut tok = tok.clone();
        let ty = match added.get(&i) {
            Some((_, special, _)) if *special || looks_special(&tok) => CONTROL,
            Some(_) => {
                tok = tok.replace('\u{2581}', " ");
                USER_DEFINED
            }
            None => NORMAL,
        };
        tokens.push(tok);
        types.push(ty);
    }
    let (model, load_merges, n_vocab) = match kind {
        VocabKind::Gpt2 => ("gpt2", true, None),
        VocabKind::Bert => {
            let n = config
                .get("type_vocab_size")
                .and_then(Json::as_u64)
                .unwrap_or(1);
            md.insert(
                "tokenizer.ggml.token_type_count".into(),
                Value::U32(n as u32),
            );
            for (t, ty) in tokens.iter_mut().zip(&types) {
                if *ty == CONTROL {
                    continue;
                }
                *t = match t.strip_prefix("##") {
                    Some(rest) => rest.to_string(),
                    None => format!("\u{2581}{t}"),
                };
            }
            ("bert", false, Some(tokens.len()))
        }
    };
    md.insert("tokenizer.ggml.model".into(), Value::String(model.into()));
    md.insert("tokenizer.ggml.pre".into(), Value::String(pre));
    md.insert(
        "tokenizer.ggml.tokens".into(),
        Value::Array(Array::String(tokens)),
    );
    md.insert(
        "tokenizer.ggml.token_type".into(),
        Value::Array(Array::I32(types)),
    );
    Special::load(dir, &tokenizer, config, load_merges, n_vocab)?.write(md);
    Ok(())
}
