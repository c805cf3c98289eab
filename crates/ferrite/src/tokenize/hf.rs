//! Tokenizers described by a Hugging Face `tokenizer.json` (carried in GGUF
//! metadata under `tokenizer.huggingface.json`, the GGUF spec's key for it),
//! run by the HF `tokenizers` crate itself, so that ids, added tokens and
//! decoding are those of `transformers`' fast tokenizers.
//!
//! The rest of [`super::Tokenizer`] sees an ordinary [`Vocab`]: token texts
//! (`id_to_token`), special added tokens as control tokens and the other
//! added tokens as user-defined ones, BOS/EOS from
//! `tokenizer.ggml.bos_token_id` / `eos_token_id`, and the end-of-generation
//! set found by token text as llama.cpp finds it ([`super::roles`]).
//!
//! Special tokens are added as `transformers`' `TokenizersBackend` adds
//! them: by the `tokenizer.json` post-processor, unless
//! `tokenizer_config.json` said `add_bos_token` / `add_eos_token`
//! explicitly (carried as `tokenizer.ggml.add_bos_token` /
//! `add_eos_token`), in which case BOS and/or EOS around the text and
//! nothing else (its `update_post_processor`). Without `parse_special`,
//! special-token texts are tokenized as text (HF `split_special_tokens`),
//! while non-special added tokens are still recognised.
//!
//! Decoding is `tokenizers`' `decode`, without `transformers`'
//! `clean_up_tokenization_spaces` pass. Streaming decodes a window of
//! recent ids and hands out the new text once it does not end in U+FFFD,
//! as `tokenizers`' `DecodeStream` does.
//!
//! Reference: huggingface/tokenizers `tokenizers/src/tokenizer/mod.rs`
//! (`decode_stream`); transformers `tokenization_utils_tokenizers.py`.

use std::collections::HashMap;

use tokenizers::Tokenizer as HfTokenizer;

use crate::formats::gguf::{Metadata, Value};

use super::bpe::char_to_byte_table;
use super::roles::find_roles;
use super::vocab::{parse_byte_token, Algorithm, Attr, SpecialIds, Vocab};
use super::TokenizerError;

/// The GGUF key holding a whole `tokenizer.json`.
pub const KEY_HF_JSON: &str = "tokenizer.huggingface.json";
const KEY_BOS: &str = "tokenizer.ggml.bos_token_id";
const KEY_EOS: &str = "tokenizer.ggml.eos_token_id";
const KEY_PAD: &str = "tokenizer.ggml.padding_token_id";
const KEY_ADD_BOS: &str = "tokenizer.ggml.add_bos_token";
const KEY_ADD_EOS: &str = "tokenizer.ggml.add_eos_token";

/// Most tokens a vocabulary may have.
const MAX_TOKENS: usize = 1 << 24;
/// Ids a streaming decode may hold back while they end in an unfinished
/// character; past this the text is handed out as it is (U+FFFD and all).
const MAX_PENDING: usize = 8;

/// The `tokenizers` pipeline of one model.
pub(crate) struct HfEngine {
    /// Special-token texts become those tokens.
    parsing: HfTokenizer,
    /// Special-token texts are plain text.
    literal: HfTokenizer,
    /// `Some` when `tokenizer_config.json` set the BOS/EOS flags: these ids
    /// around the text replace the post-processor.
    explicit: Option<(Option<u32>, Option<u32>)>,
    /// A token for each byte, for text `tokenizers` fails on.
    byte_tokens: Vec<Option<u32>>,
}

impl HfEngine {
    /// See [`super::Tokenizer::encode`]. Text the pipeline fails on (a
    /// pre-tokenizer regex running out of backtracking) falls back to one
    /// token per byte where the vocabulary has byte tokens.
    pub fn encode(&self, text: &str, add_special: bool, parse_special: bool) -> Vec<u32> {
        let tok = if parse_special {
            &self.parsing
        } else {
            &self.literal
        };
        let post = add_special && self.explicit.is_none();
        let mut ids = match tok.encode_fast(text, post) {
            Ok(enc) => enc.get_ids().to_vec(),
            Err(_) => text
                .bytes()
                .filter_map(|b| self.byte_tokens[b as usize])
                .collect(),
        };
        if let (true, Some((bos, eos))) = (add_special, self.explicit) {
            if let Some(bos) = bos {
                ids.insert(0, bos);
            }
            ids.extend(eos);
        }
        ids
    }

    /// `tokenizers`' decode; ids it does not know are left out.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> String {
        self.parsing
            .decode(ids, skip_special)
            .unwrap_or_else(|_| String::new())
    }
}

/// What [`from_metadata`] reads.
pub(crate) struct HfParts {
    pub vocab: Vocab,
    pub engine: HfEngine,
    /// The bytes of each token.
    pub pieces: Vec<Box<[u8]>>,
}

/// Reads a tokenizer from `tokenizer.huggingface.json` and the special-token
/// keys: its vocabulary, pipeline and the bytes of each token.
pub(crate) fn from_metadata(md: &Metadata) -> Result<HfParts, TokenizerError> {
    let json = match md.get(KEY_HF_JSON) {
        Some(Value::String(s)) => s,
        Some(v) => return Err(TokenizerError::wrong_type(KEY_HF_JSON, "a string", v)),
        None => return Err(TokenizerError::missing(KEY_HF_JSON)),
    };
    let parsing: HfTokenizer =
        super::hf_json::parse_hf_json(json).map_err(|e| TokenizerError::new(KEY_HF_JSON, e))?;
    let n = parsing.get_vocab_size(true);
    if n == 0 || n > MAX_TOKENS {
        return Err(TokenizerError::new(
            KEY_HF_JSON,
            format!("{n} tokens is not a vocabulary size in 1..={MAX_TOKENS}"),
        ));
    }
    let mut literal = parsing.clone();
    literal.set_encode_special_tokens(true);

    // Ids can have holes (added tokens past the model's vocabulary): the
    // vocabulary runs to the largest id.
    let added = parsing.get_added_tokens_decoder();
    let n = added.keys().map(|&id| id as usize + 1).fold(n, usize::max);
    if n > MAX_TOKENS {
        return Err(TokenizerError::new(
            KEY_HF_JSON,
            format!("added token ids reach {n}, past {MAX_TOKENS}"),
        ));
    }
    let mut texts = Vec::with_capacity(n);
    let mut attrs = Vec::with_capacity(n);
    for id in 0..n as u32 {
        let (text, attr) = match (added.get(&id), parsing.id_to_token(id)) {
            (Some(t), _) if t.special => (t.content.clone(), Attr::CONTROL),
            (Some(t), _) => (t.content.clone(), Attr::USER_DEFINED),
            (None, Some(t)) if !t.is_empty() => (t, Attr::NORMAL),
            (None, Some(_)) => (format!("[EMPTY_{id}]"), Attr::NORMAL),
            (None, None) => (format!("[UNUSED_{id}]"), Attr::UNUSED),
        };
        texts.push(text);
        attrs.push(attr);
    }
    // As `token_to_id`: an added token's text wins over a model token's.
    let mut text_to_id = HashMap::with_capacity(n);
    for (id, text) in texts.iter().enumerate() {
        let keep_first = text_to_id
            .get(text)
            .is_some_and(|&first: &u32| added.contains_key(&first));
        if !keep_first {
            text_to_id.insert(text.clone(), id as u32);
        }
    }

    let mut special = SpecialIds {
        bos: get_id(md, KEY_BOS, n)?,
        eos: get_id(md, KEY_EOS, n)?,
        pad: get_id(md, KEY_PAD, n)?,
        ..SpecialIds::default()
    };
    let explicit_bos = get_bool(md, KEY_ADD_BOS)?;
    let explicit_eos = get_bool(md, KEY_ADD_EOS)?;
    let explicit = (explicit_bos.is_some() || explicit_eos.is_some()).then(|| {
        (
            special.bos.filter(|_| explicit_bos == Some(true)),
            special.eos.filter(|_| explicit_eos == Some(true)),
        )
    });
    let (add_bos, add_eos) = match explicit {
        Some((bos, eos)) => (bos.is_some(), eos.is_some()),
        None => {
            // What the post-processor puts around a text.
            let with = parsing.encode_fast("a", true).map_err(|e| {
                TokenizerError::new(KEY_HF_JSON, format!("cannot tokenize a test text: {e}"))
            })?;
            let ids = with.get_ids();
            (
                special.bos.is_some() && ids.first().copied() == special.bos,
                special.eos.is_some() && ids.len() > 1 && ids.last().copied() == special.eos,
            )
        }
    };
    let eog = find_roles(&texts, &text_to_id, &mut attrs, &mut special);
    let pieces = token_pieces(&texts, &attrs, json);
    let mut byte_tokens = vec![None; 256];
    for (id, piece) in pieces.iter().enumerate().rev() {
        if let ([b], true) = (&piece[..], attrs[id].any(Attr::NORMAL)) {
            byte_tokens[*b as usize] = Some(id as u32);
        }
    }
    let vocab = Vocab {
        algorithm: Algorithm::Hf,
        texts,
        attrs,
        scores: Vec::new(),
        text_to_id,
        merges: Vec::new(),
        special,
        eog,
        add_bos,
        add_eos,
        add_space_prefix: false,
        ignore_merges: false,
        clean_spaces: false,
    };
    let engine = HfEngine {
        parsing,
        literal,
        explicit,
        byte_tokens,
    };
    Ok(HfParts {
        vocab,
        engine,
        pieces,
    })
}

/// The bytes each token stands for: added tokens as their text; with a
/// byte-level decoder, the GPT-2 byte mapping undone; otherwise `▁` as a
/// space and `<0xNN>` as that byte (SentencePiece-style vocabularies).
fn token_pieces(texts: &[String], attrs: &[Attr], json: &str) -> Vec<Box<[u8]>> {
    let byte_level = serde_json::from_str::<serde_json::Value>(json)
        .ok()
        .and_then(|v| {
            v.get("decoder")
                .map(|d| d.to_string().contains("\"ByteLevel\""))
        })
        .unwrap_or(false);
    let table = char_to_byte_table();
    texts
        .iter()
        .zip(attrs)
        .map(|(text, attr)| {
            let as_text = attr.any(Attr::CONTROL | Attr::USER_DEFINED) || !attr.any(Attr::NORMAL);
            let piece: Vec<u8> = if as_text {
                text.as_bytes().to_vec()
            } else if byte_level {
                text.chars()
                    .map(|c| table.get(c as usize).copied().flatten())
                    .collect::<Option<Vec<u8>>>()
                    .unwrap_or_else(|| text.as_bytes().to_vec())
            } else if let Some(b) = parse_byte_token(text) {
                vec![b]
            } else {
                text.replace('\u{2581}', " ").into_bytes()
            };
            piece.into_boxed_slice()
        })
        .collect()
}

fn get_id(md: &Metadata, key: &'static str, n: usize) -> Result<Option<u32>, TokenizerError> {
    let Some(v) = md.get(key) else {
        return Ok(None);
    };
    match v.as_u64() {
        // id < n <= MAX_TOKENS fits u32.
        Some(id) if id < n as u64 => Ok(Some(id as u32)),
        Some(id) => Err(TokenizerError::new(
            key,
            format!("token id {id} is out of range (the vocabulary has {n} tokens)"),
        )),
        None => Err(TokenizerError::wrong_type(key, "a non-negative integer", v)),
    }
}

fn get_bool(md: &Metadata, key: &'static str) -> Result<Option<bool>, TokenizerError> {
    match md.get(key) {
        None => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(v) => Err(TokenizerError::wrong_type(key, "a bool", v)),
    }
}

/// Streaming decode over `tokenizers`' decode: the text of a window of
/// recent ids, of which the part after the already-emitted prefix is
/// handed out once it is whole.
pub(crate) struct HfStream {
    skip_special: bool,
    /// Ids from the start of the prefix on.
    ids: Vec<u32>,
    /// How many of `ids` make up the prefix (already handed out).
    read: usize,
    /// The text of `ids[..read]`.
    prefix: String,
}

impl HfStream {
    pub fn new(skip_special: bool) -> HfStream {
        HfStream {
            skip_special,
            ids: Vec::new(),
            read: 0,
            prefix: String::new(),
        }
    }

    /// Adds one id; returns the text that is now complete (maybe empty).
    pub fn push(&mut self, engine: &HfEngine, id: u32) -> String {
        self.ids.push(id);
        let text = engine.decode(&self.ids, self.skip_special);
        let unfinished =
            text.ends_with(char::REPLACEMENT_CHARACTER) && self.ids.len() - self.read < MAX_PENDING;
        if text.len() <= self.prefix.len() || unfinished {
            return String::new();
        }
        let new = match text.get(self.prefix.len()..) {
            Some(rest) if text.starts_with(&self.prefix) => rest.to_string(),
            // The window's text changed before the new ids (a decoder that
            // looks across tokens): hand out what follows the common part.
            _ => {
                let common = common_prefix(&text, &self.prefix);
                text[common..].to_string()
            }
        };
        // The new prefix is the ids just handed out; decoding from the old
        // prefix's last ids keeps the context a decoder may need.
        self.ids.drain(..self.read);
        self.read = self.ids.len();
        self.prefix = engine.decode(&self.ids, self.skip_special);
        new
    }

    /// Ends the stream: whatever is held back comes out as it is.
    pub fn finish(self, engine: &HfEngine) -> String {
        let text = engine.decode(&self.ids, self.skip_special);
        let common = common_prefix(&text, &self.prefix);
        text[common..].to_string()
    }
}

/// Bytes at the start of `a` and `b` that agree, cut to a character boundary.
fn common_prefix(a: &str, b: &str) -> usize {
    let mut n = a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count();
    while !a.is_char_boundary(n) {
        n -= 1;
    }
    n
}
