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
use tokenizers::{Encoding, Token};

use crate::formats::gguf::{Array, Metadata};
use crate::Error;

/// The result of tokenizing one text.
pub struct Tokens {
    pub ids: Vec<u32>,
    /// Whether the text was cut to the model's maximum length.
    pub truncated: bool,
}

/// A tokenizer that adds the model's special tokens and truncates to a
/// maximum length as sentence-transformers does: a text too long keeps its
/// first tokens and the special tokens that close it (`[SEP]`), exactly
/// what HF `tokenizers` produces with `TruncationStrategy::LongestFirst`.
pub struct EmbedTokenizer {
    tok: tokenizers::Tokenizer,
    /// The length inputs are cut to unless a call asks for another.
    pub max_tokens: usize,
    /// How many special tokens the template puts after the text.
    tail: usize,
}

fn tok_err(source: &str, e: impl std::fmt::Display) -> Error {
    Error::model(source, format!("tokenizer: {e}"))
}

impl EmbedTokenizer {
    /// From a `tokenizer.json` file.
    pub fn from_file(path: &Path, max_tokens: usize) -> Result<EmbedTokenizer, Error> {
        let source = path.display().to_string();
        let tok =
            crate::tokenize::hf_json::read_hf_json(path).map_err(|e| tok_err(&source, e))?;
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
        // The specials after a one-word text.
        let probe = tok.encode_fast("a", true).map_err(|e| tok_err(source, e))?;
        let tail = probe
            .get_special_tokens_mask()
            .iter()
            .rev()
            .take_while(|&&m| m == 1)
            .count();
        if tail + 2 > max_tokens {
            return Err(tok_err(
                source,
                format!("a maximum of {max_tokens} tokens leaves no room for text"),
            ));
        }
        Ok(EmbedTokenizer {
            tok,
            max_tokens,
            tail,
        })
    }

    /// The tokenizer of the embedding model at `path` (what
    /// [`crate::open::find`] tells is an embedder: a directory with a
    /// `tokenizer.json`, or a GGUF file of an encoder architecture), with no
    /// length limit. For `ferrite tokenize`.
    pub fn of_model(path: &Path) -> Result<EmbedTokenizer, Error> {
        if path.is_dir() {
            return Self::from_file(&path.join("tokenizer.json"), usize::MAX);
        }
        let file = crate::formats::gguf::GgufFile::open(path)?;
        Self::from_gguf(file.metadata(), usize::MAX, &path.display().to_string())
    }

    /// The text of token `id` in the vocabulary (`##ing`, `[CLS]`, ...).
    pub fn token_text(&self, id: u32) -> Option<String> {
        self.tok.id_to_token(id)
    }

    /// The ids of `text` with the model's special tokens, however long.
    pub fn encode_untruncated(&self, text: &str) -> Result<Vec<u32>, Error> {
        let enc = self
            .tok
            .encode_fast(text, true)
            .map_err(|e| Error::Input(format!("cannot tokenize input: {e}")))?;
        Ok(enc.get_ids().to_vec())
    }

    /// The ids of a text's tokens without special tokens (what a client
    /// that tokenized the text itself sends) with the model's special
    /// tokens added, as [`Self::encode_untruncated`] adds them to the text.
    /// An id that is not in the vocabulary is an error naming its index.
    pub fn with_special_tokens(&self, ids: &[u32]) -> Result<Vec<u32>, Error> {
        let mut tokens = Vec::with_capacity(ids.len());
        for (i, &id) in ids.iter().enumerate() {
            let value = self.tok.id_to_token(id).ok_or_else(|| {
                Error::Input(format!(
                    "token {i}: id {id} is not in the vocabulary (ids 0..{})",
                    self.tok.get_vocab_size(true)
                ))
            })?;
            tokens.push(Token::new(id, value, (0, 0)));
        }
        let enc = self
            .tok
            .post_process(Encoding::from_tokens(tokens, 0), None, true)
            .map_err(|e| Error::Input(format!("cannot add special tokens: {e}")))?;
        Ok(enc.get_ids().to_vec())
    }

    /// The ids of `text` with the model's special tokens; cut to
    /// `max_tokens` if `truncate`, else an error if longer.
    pub fn encode(&self, text: &str, truncate: bool) -> Result<Tokens, Error> {
        self.encode_to(text, self.max_tokens, truncate)
    }

    /// As [`Self::encode`] with a maximum of `max` tokens (at least the
    /// special tokens plus one).
    pub fn encode_to(&self, text: &str, max: usize, truncate: bool) -> Result<Tokens, Error> {
        if max < self.tail + 2 {
            return Err(Error::Input(format!(
                "a maximum of {max} tokens leaves no room for text"
            )));
        }
        let mut ids = self.encode_untruncated(text)?;
        let n = ids.len();
        if n <= max {
            return Ok(Tokens {
                ids,
                truncated: false,
            });
        }
        if !truncate {
            return Err(Error::Input(format!(
                "input of {n} tokens is longer than the maximum of {max}"
            )));
        }
        // Keep the first max - tail tokens and the closing specials
        // (n > max >= tail + 2, so the range is not empty).
        ids.drain(max - self.tail..n - self.tail);
        Ok(Tokens {
            ids,
            truncated: true,
        })
    }
}
