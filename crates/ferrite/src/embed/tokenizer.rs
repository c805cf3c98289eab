//! Tokenizers for embedding models, on the HF `tokenizers` crate: a
//! model's own `tokenizer.json`, or BERT WordPiece rebuilt from a GGUF
//! file's vocabulary (`tokenizer.ggml.model = "bert"`).
//!
//! llama.cpp's converter stores a BERT vocabulary in "phantom space" form:
//! a piece that starts a word gets a leading `▁`, a continuation piece
//! loses its `##`, and bracketed specials (`[CLS]`) stay as they are
//! (`convert_hf_to_gguf.py`, `BertModel.set_vocab`). We undo that mapping
//! and run standard BERT tokenization: clean-up, CJK split, lower-casing
//! with accent stripping, whitespace/punctuation split, greedy
//! longest-match-first WordPiece with `##` continuations.

use std::path::Path;

use tokenizers::models::wordpiece::WordPiece;
use tokenizers::normalizers::bert::BertNormalizer;
use tokenizers::pre_tokenizers::bert::BertPreTokenizer;
use tokenizers::processors::bert::BertProcessing;
use tokenizers::utils::truncation::{TruncationDirection, TruncationParams, TruncationStrategy};

use crate::formats::gguf::{Array, Metadata};
use crate::Error;

/// The result of tokenizing one text.
pub struct Tokens {
    pub ids: Vec<u32>,
    /// Whether the text was cut to the model's maximum length.
    pub truncated: bool,
}

/// A tokenizer that adds the model's special tokens and truncates to a
/// maximum length as sentence-transformers does.
pub struct EmbedTokenizer {
    /// Without truncation, to tell whether an input is too long.
    full: tokenizers::Tokenizer,
    /// The same, truncating to the maximum length (specials included).
    truncating: tokenizers::Tokenizer,
    pub max_tokens: usize,
}

fn tok_err(source: &str, e: impl std::fmt::Display) -> Error {
    Error::model(source, format!("tokenizer: {e}"))
}

impl EmbedTokenizer {
    /// From a `tokenizer.json` file.
    pub fn from_file(path: &Path, max_tokens: usize) -> Result<EmbedTokenizer, Error> {
        let source = path.display().to_string();
        let tok = tokenizers::Tokenizer::from_file(path).map_err(|e| tok_err(&source, e))?;
        Self::new(tok, max_tokens, &source)
    }

    /// BERT WordPiece from GGUF vocabulary metadata.
    pub fn from_gguf(
        meta: &Metadata,
        max_tokens: usize,
        source: &str,
    ) -> Result<EmbedTokenizer, Error> {
        let model = meta.get_str("tokenizer.ggml.model").unwrap_or("");
        if model != "bert" {
            return Err(Error::model(
                source,
                format!("tokenizer.ggml.model '{model}' is not supported for embeddings (bert)"),
            ));
        }
        let tokens = match meta.get("tokenizer.ggml.tokens").and_then(|v| v.as_array()) {
            Some(Array::String(t)) => t,
            _ => {
                return Err(tok_err(
                    source,
                    "tokenizer.ggml.tokens is missing or not a string array",
                ))
            }
        };
        let mut vocab = ahash::AHashMap::with_capacity(tokens.len());
        for (id, t) in tokens.iter().enumerate() {
            let piece = if let Some(word) = t.strip_prefix('\u{2581}') {
                word.to_string()
            } else if t.starts_with('[') && t.ends_with(']') {
                t.clone()
            } else {
                format!("##{t}")
            };
            // The first id wins if two pieces map to the same text.
            vocab.entry(piece).or_insert(id as u32);
        }
        let id_key = |key: &str| -> Result<u32, Error> {
            meta.get_u64(key)
                .filter(|&i| (i as usize) < tokens.len())
                .map(|i| i as u32)
                .ok_or_else(|| tok_err(source, format!("{key} is missing or out of range")))
        };
        let text_of = |id: u32| tokens[id as usize].clone();
        let cls = id_key("tokenizer.ggml.cls_token_id")
            .or_else(|_| id_key("tokenizer.ggml.bos_token_id"))?;
        let sep = id_key("tokenizer.ggml.seperator_token_id")
            .or_else(|_| id_key("tokenizer.ggml.eos_token_id"))?;
        let unk = id_key("tokenizer.ggml.unknown_token_id")?;
        let wp = WordPiece::builder()
            .vocab(vocab)
            .unk_token(text_of(unk))
            .continuing_subword_prefix("##".into())
            .max_input_chars_per_word(100)
            .build()
            .map_err(|e| tok_err(source, e))?;
        let mut tok = tokenizers::Tokenizer::new(wp);
        tok.with_normalizer(Some(BertNormalizer::new(true, true, None, true)));
        tok.with_pre_tokenizer(Some(BertPreTokenizer));
        tok.with_post_processor(Some(BertProcessing::new(
            (text_of(sep), sep),
            (text_of(cls), cls),
        )));
        Self::new(tok, max_tokens, source)
    }

    fn new(
        mut tok: tokenizers::Tokenizer,
        max_tokens: usize,
        source: &str,
    ) -> Result<EmbedTokenizer, Error> {
        tok.with_padding(None);
        tok.with_truncation(None).map_err(|e| tok_err(source, e))?;
        let mut truncating = tok.clone();
        truncating
            .with_truncation(Some(TruncationParams {
                direction: TruncationDirection::Right,
                max_length: max_tokens,
                strategy: TruncationStrategy::LongestFirst,
                stride: 0,
            }))
            .map_err(|e| tok_err(source, e))?;
        Ok(EmbedTokenizer {
            full: tok,
            truncating,
            max_tokens,
        })
    }

    /// The ids of `text` with the model's special tokens, however long.
    pub fn encode_untruncated(&self, text: &str) -> Result<Vec<u32>, Error> {
        let enc = self
            .full
            .encode_fast(text, true)
            .map_err(|e| Error::Input(format!("cannot tokenize input: {e}")))?;
        Ok(enc.get_ids().to_vec())
    }

    /// The ids of `text` with the model's special tokens; cut to
    /// `max_tokens` if `truncate`, else an error if longer.
    pub fn encode(&self, text: &str, truncate: bool) -> Result<Tokens, Error> {
        let tok = if truncate {
            &self.truncating
        } else {
            &self.full
        };
        let enc = tok
            .encode_fast(text, true)
            .map_err(|e| Error::Input(format!("cannot tokenize input: {e}")))?;
        let truncated = !enc.get_overflowing().is_empty();
        let ids = enc.get_ids().to_vec();
        if !truncate && ids.len() > self.max_tokens {
            return Err(Error::Input(format!(
                "input of {} tokens is longer than the model's maximum of {}",
                ids.len(),
                self.max_tokens
            )));
        }
        Ok(Tokens { ids, truncated })
    }
}
