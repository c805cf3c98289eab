//! The tokenizer of Marian (opus-mt) models, as `transformers`'
//! `MarianTokenizer` runs it: source text is segmented by `source.spm`,
//! target text by `target.spm`, and pieces become ids through the one shared
//! `vocab.json` (a piece it lacks is `<unk>`); `</s>` ends every input.
//! Special-token texts (`</s>`, `<unk>`, `<pad>`) in the input are those
//! tokens, and a leading language code such as `>>hin<<` is one piece of
//! its own. Output ids decode through `target.spm` with special tokens
//! skipped and the result trimmed.
//!
//! Not done: `sacremoses` punctuation normalization (which
//! `MarianTokenizer` applies only when that Python package is installed),
//! and models with `separate_vocabs` (two vocabulary files).
//!
//! Reference: huggingface/transformers
//! `models/marian/tokenization_marian.py`.

use std::collections::HashMap;
use std::path::Path;

use super::sentencepiece::SentencePiece;
use crate::formats::safetensors::read_json;
use crate::Error;

/// Largest `vocab.json` read.
const MAX_VOCAB_BYTES: u64 = 64 << 20;
/// Largest id a vocabulary may use.
const MAX_ID: u64 = 1 << 24;

pub struct MarianTokenizer {
    source: SentencePiece,
    target: SentencePiece,
    vocab: HashMap<String, u32>,
    /// Id -> piece (None for ids the vocabulary skips).
    pieces: Vec<Option<String>>,
    pub eos: u32,
    pub unk: u32,
    pub pad: u32,
}

impl MarianTokenizer {
    /// True if `dir` has the files of a Marian tokenizer.
    pub fn is_marian_dir(dir: &Path) -> bool {
        ["source.spm", "target.spm", "vocab.json"]
            .iter()
            .all(|f| dir.join(f).is_file())
    }

    /// Reads `source.spm`, `target.spm` and `vocab.json` from `dir`.
    pub fn open(dir: &Path) -> Result<MarianTokenizer, Error> {
        let config_path = dir.join("tokenizer_config.json");
        if config_path.is_file() {
            let config = read_json(&config_path)?;
            if config.get("separate_vocabs").and_then(|v| v.as_bool()) == Some(true) {
                return Err(Error::model(
                    config_path.display().to_string(),
                    "separate_vocabs (two vocabulary files) is not supported",
                ));
            }
        }
        let vocab_path = dir.join("vocab.json");
        let shown = vocab_path.display().to_string();
        let len = std::fs::metadata(&vocab_path)
            .map_err(|e| Error::model(&shown, e.to_string()))?
            .len();
        if len > MAX_VOCAB_BYTES {
            return Err(Error::model(&shown, format!("{len} bytes is too large")));
        }
        let json = read_json(&vocab_path)?;
        let map = json
            .as_object()
            .ok_or_else(|| Error::model(&shown, "not a JSON object of piece -> id"))?;
        let mut vocab = HashMap::with_capacity(map.len());
        let mut pieces: Vec<Option<String>> = Vec::new();
        for (piece, id) in map {
            let id = id.as_u64().filter(|&i| i < MAX_ID).ok_or_else(|| {
                Error::model(&shown, format!("'{piece}': id is not a small integer"))
            })? as u32;
            let i = id as usize;
            if pieces.len() <= i {
                pieces.resize(i + 1, None);
            }
            pieces[i] = Some(piece.clone());
            vocab.insert(piece.clone(), id);
        }
        let id = |t: &str| {
            vocab
                .get(t)
                .copied()
                .ok_or_else(|| Error::model(&shown, format!("no '{t}' entry")))
        };
        let (eos, unk, pad) = (id("</s>")?, id("<unk>")?, id("<pad>")?);
        Ok(MarianTokenizer {
            source: SentencePiece::open(&dir.join("source.spm"))?,
            target: SentencePiece::open(&dir.join("target.spm"))?,
            vocab,
            pieces,
            eos,
            unk,
            pad,
        })
    }

    /// Ids covered by the vocabulary (one past the largest).
    pub fn n_ids(&self) -> usize {
        self.pieces.len()
    }

    /// Source text to model input ids, `</s>` appended.
    pub fn encode_source(&self, text: &str) -> Result<Vec<u32>, Error> {
        self.encode(&self.source, text)
    }

    /// Target text to ids, `</s>` appended (as `text_target=`): the
    /// library's own tests check the target vocabulary with it.
    #[cfg(any(test, feature = "internals"))]
    pub fn encode_target(&self, text: &str) -> Result<Vec<u32>, Error> {
        self.encode(&self.target, text)
    }

    fn encode(&self, spm: &SentencePiece, text: &str) -> Result<Vec<u32>, Error> {
        let specials = [("</s>", self.eos), ("<unk>", self.unk), ("<pad>", self.pad)];
        let mut ids = Vec::new();
        let mut rest = text;
        loop {
            // The earliest special-token text (the longest at a tie).
            let next = specials
                .iter()
                .filter_map(|&(t, id)| rest.find(t).map(|at| (at, std::cmp::Reverse(t.len()), id)))
                .min();
            let chunk_end = next.map_or(rest.len(), |(at, _, _)| at);
            self.encode_chunk(spm, &rest[..chunk_end], &mut ids)?;
            match next {
                Some((at, std::cmp::Reverse(len), id)) => {
                    ids.push(id);
                    rest = &rest[at + len..];
                }
                None => break,
            }
        }
        ids.push(self.eos);
        Ok(ids)
    }

    /// One stretch of text without special tokens.
    fn encode_chunk(
        &self,
        spm: &SentencePiece,
        text: &str,
        ids: &mut Vec<u32>,
    ) -> Result<(), Error> {
        let mut text = text;
        if let Some(end) = text.strip_prefix(">>").and_then(|t| t.find("<<")) {
            let code = &text[..end + 4];
            ids.push(self.piece_id(code));
            text = &text[end + 4..];
        }
        for piece in spm.encode(text)? {
            ids.push(self.piece_id(&piece));
        }
        Ok(())
    }

    fn piece_id(&self, piece: &str) -> u32 {
        self.vocab.get(piece).copied().unwrap_or(self.unk)
    }

    /// Output ids to text: special tokens (`</s>`, `<unk>`, `<pad>`) and
    /// ids outside the vocabulary are skipped, the rest decoded by
    /// `target.spm`, the result trimmed.
    pub fn decode(&self, ids: &[u32]) -> String {
        let pieces = ids
            .iter()
            .filter(|&&id| id != self.eos && id != self.unk && id != self.pad)
            .filter_map(|&id| self.pieces.get(id as usize)?.as_deref());
        self.target.decode(pieces).trim().to_string()
    }
}
