//! Tokenizers built from a GGUF file's `tokenizer.ggml.*` metadata, giving
//! the same token ids as llama.cpp (`llama_tokenize` / `llama-tokenize`).
//!
//! - `vocab`: reading and checking the vocabulary (llama.cpp `llama_vocab::impl::load`);
//! - `roles`: end-of-generation, end-of-turn and FIM tokens by text;
//! - `special`: cutting special-token texts out of the input (`tokenizer_st_partition`);
//! - `bpe`: `gpt2` byte-level BPE on the HF `tokenizers` crate (`llm_tokenizer_bpe`);
//! - `spm`: `llama` SentencePiece-style merges by score (`llm_tokenizer_spm`);
//! - `decode`: ids back to text (`token_to_piece`, `detokenize`) and streaming;
//! - `hf`: a Hugging Face `tokenizer.json` carried in the metadata
//!   (`tokenizer.huggingface.json`, for models read from a safetensors
//!   directory), run by the `tokenizers` crate as `transformers` runs it.
//!
//! Reference: ggml-org/llama.cpp `src/llama-vocab.cpp`, `src/unicode.cpp`.
//! The parity goldens in `testdata/tokenizer/` come from
//! `scripts/make-tokenizer-goldens.py`.

mod bpe;
mod decode;
mod hf;
pub mod hf_json;
pub mod marian;
mod roles;
pub mod sentencepiece;
mod special;
mod spm;
mod vocab;

use std::fmt;

use crate::formats::gguf::{Metadata, Value};

pub use decode::StreamDecoder;
pub use hf::KEY_HF_JSON;

use bpe::BpeTokenizer;
use special::{Fragment, SpecialTokens};
use vocab::{Algorithm, Attr, Vocab, KEY_MODEL};

/// The tokenizer metadata of a model file is missing or wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenizerError {
    /// The metadata key at fault.
    pub key: String,
    pub problem: String,
}

impl TokenizerError {
    fn new(key: &str, problem: impl Into<String>) -> TokenizerError {
        TokenizerError {
            key: key.to_string(),
            problem: problem.into(),
        }
    }

    fn missing(key: &str) -> TokenizerError {
        TokenizerError::new(key, "missing")
    }

    fn wrong_type(key: &str, expected: &str, found: &Value) -> TokenizerError {
        let found = match found {
            Value::Array(a) => format!("{} array", a.element_type().name()),
            v => v.value_type().name().to_string(),
        };
        TokenizerError::new(key, format!("should be {expected}, found {found}"))
    }
}

impl fmt::Display for TokenizerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "tokenizer metadata '{}': {}", self.key, self.problem)
    }
}

impl std::error::Error for TokenizerError {}

enum Engine {
    Spm,
    Bpe(Box<BpeTokenizer>),
    Hf(Box<hf::HfEngine>),
}

/// A tokenizer for one model's vocabulary. Cheap to share across threads.
pub struct Tokenizer {
    vocab: Vocab,
    engine: Engine,
    special: SpecialTokens,
    /// The bytes of each token (control tokens as their text).
    pieces: Vec<Box<[u8]>>,
    /// The tokens arranged for JSON-constrained masks, built at the first
    /// use.
    json_index: std::sync::OnceLock<crate::generate::json::vocab::VocabIndex>,
}

impl Tokenizer {
    /// Builds the tokenizer a GGUF file's metadata describes
    /// (`tokenizer.ggml.model` = `gpt2` or `llama`; without that key, a
    /// Hugging Face `tokenizer.huggingface.json`).
    pub fn from_gguf(metadata: &Metadata) -> Result<Tokenizer, TokenizerError> {
        if metadata.get(KEY_MODEL).is_none() && metadata.get(KEY_HF_JSON).is_some() {
            let parts = hf::from_metadata(metadata)?;
            return Ok(Tokenizer {
                special: SpecialTokens::new(&parts.vocab),
                vocab: parts.vocab,
                engine: Engine::Hf(Box::new(parts.engine)),
                pieces: parts.pieces,
                json_index: Default::default(),
            });
        }
        let vocab = Vocab::from_gguf(metadata)?;
        let engine = match vocab.algorithm {
            Algorithm::Spm | Algorithm::Hf => Engine::Spm,
            Algorithm::Bpe(kind) => Engine::Bpe(Box::new(BpeTokenizer::new(&vocab, kind)?)),
        };
        let special = SpecialTokens::new(&vocab);
        let pieces = decode::token_pieces(&vocab);
        Ok(Tokenizer {
            vocab,
            engine,
            special,
            pieces,
            json_index: Default::default(),
        })
    }

    /// The token ids of `text`, as `llama_tokenize(text, add_special,
    /// parse_special)`: `add_special` adds BOS and/or EOS where the
    /// vocabulary asks for them ([`Self::adds_bos`], [`Self::adds_eos`]);
    /// `parse_special` turns control-token texts such as `<|im_start|>` into
    /// those tokens (user-defined tokens are always recognised).
    pub fn encode(&self, text: &str, add_special: bool, parse_special: bool) -> Vec<u32> {
        if let Engine::Hf(hf) = &self.engine {
            return hf.encode(text, add_special, parse_special);
        }
        self.encode_ranges(text, add_special, parse_special, &[])
    }

    /// Whether `text` holds the text of a control token (`<|im_start|>`,
    /// `<|im_end|>`, ...), which `encode` with `parse_special` would turn
    /// into that token.
    pub fn has_control_text(&self, text: &str) -> bool {
        self.special.has_control_text(&self.vocab, text)
    }

    /// As `encode(text, false, true)`, except that control-token texts
    /// overlapping a `protected` byte range stay text (tokenized as
    /// `encode` without `parse_special` would): a chat template's own
    /// markup yields control tokens, the messages' contents never do.
    /// With no control text inside the ranges, the same ids as `encode`.
    pub fn encode_protected(&self, text: &str, protected: &[std::ops::Range<usize>]) -> Vec<u32> {
        let Engine::Hf(hf) = &self.engine else {
            return self.encode_ranges(text, false, true, protected);
        };
        if !protected
            .iter()
            .any(|r| self.has_control_text(&text[r.clone()]))
        {
            return hf.encode(text, false, true);
        }
        // The `tokenizers` crate parses added tokens itself: encode the
        // protected ranges apart, without parsing.
        let mut ranges = protected.to_vec();
        ranges.sort_by_key(|r| r.start);
        let mut out = Vec::new();
        let mut at = 0;
        for r in ranges {
            if r.start > at {
                out.extend(hf.encode(&text[at..r.start], false, true));
            }
            let from = r.start.max(at);
            if r.end > from {
                out.extend(hf.encode(&text[from..r.end], false, false));
            }
            at = at.max(r.end);
        }
        if at < text.len() {
            out.extend(hf.encode(&text[at..], false, true));
        }
        out
    }

    fn encode_ranges(
        &self,
        text: &str,
        add_special: bool,
        parse_special: bool,
        protected: &[std::ops::Range<usize>],
    ) -> Vec<u32> {
        let v = &self.vocab;
        let mut out = Vec::new();
        if add_special && v.add_bos {
            out.extend(v.special.bos);
        }
        let mut after_special = true;
        for fragment in self.special.partition(v, text, parse_special, protected) {
            match fragment {
                Fragment::Token(id) => {
                    out.push(id);
                    after_special = true;
                }
                Fragment::Text(range) => {
                    let piece = &text[range];
                    match &self.engine {
                        Engine::Bpe(bpe) => bpe.encode_into(piece, &mut out),
                        Engine::Hf(hf) => out.extend(hf.encode(piece, false, parse_special)),
                        Engine::Spm => {
                            let prefix = if v.add_space_prefix && after_special {
                                " "
                            } else {
                                ""
                            };
                            let escaped = format!("{prefix}{piece}").replace(' ', "\u{2581}");
                            spm::encode_into(v, &escaped, &mut out);
                        }
                    }
                    after_special = false;
                }
            }
        }
        if add_special && v.add_eos {
            out.extend(v.special.eos);
        }
        out
    }

    /// The text of `ids` (see [`StreamDecoder`] for token-by-token output).
    /// With `skip_special`, control tokens (and a BOS/EOS the vocabulary
    /// adds) are left out; without it they appear as their text. Bytes that
    /// do not form UTF-8 come out as U+FFFD; ids out of range as nothing.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> String {
        if let Engine::Hf(hf) = &self.engine {
            return hf.decode(ids, skip_special);
        }
        String::from_utf8_lossy(&self.decode_bytes(ids, skip_special)).into_owned()
    }

    /// A decoder that turns ids into text one at a time.
    pub fn stream_decoder(&self, skip_special: bool) -> StreamDecoder<'_> {
        if let Engine::Hf(hf) = &self.engine {
            return StreamDecoder::hf(self, hf, skip_special);
        }
        StreamDecoder::new(self, skip_special)
    }

    /// The bytes token `id` stands for (a control token's text for control
    /// tokens; one byte for `<0xNN>` tokens; empty if `id` is out of range).
    pub fn token_bytes(&self, id: u32) -> &[u8] {
        self.pieces.get(id as usize).map_or(&[], |p| p)
    }

    /// The token's text as stored in the vocabulary (`▁the`, `Ġthe`, `<0x0A>`).
    pub fn token_text(&self, id: u32) -> Option<&str> {
        self.vocab.texts.get(id as usize).map(String::as_str)
    }

    /// The id of the token whose vocabulary text is `text`.
    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.vocab.id(text)
    }

    /// Tokens in the vocabulary.
    pub fn vocab_size(&self) -> usize {
        self.vocab.len()
    }

    /// The beginning-of-sequence token, if the model has one.
    pub fn bos_id(&self) -> Option<u32> {
        self.vocab.special.bos
    }

    /// The end-of-sequence token, if the model has one.
    pub fn eos_id(&self) -> Option<u32> {
        self.vocab.special.eos
    }

    /// The end-of-turn token (`<|im_end|>`, `<end_of_turn>`, ...), if any.
    pub fn eot_id(&self) -> Option<u32> {
        self.vocab.special.eot
    }

    /// Whether `encode(.., add_special = true, ..)` starts with BOS.
    pub fn adds_bos(&self) -> bool {
        self.vocab.add_bos
    }

    /// Whether `encode(.., add_special = true, ..)` ends with EOS.
    pub fn adds_eos(&self) -> bool {
        self.vocab.add_eos
    }

    /// Whether generating `id` ends generation (EOS, EOT, EOM and the other
    /// tokens llama.cpp puts in its end-of-generation set).
    pub fn is_end_of_generation(&self, id: u32) -> bool {
        self.vocab.eog.contains(&id)
    }

    /// The end-of-generation ids, ascending.
    pub fn end_of_generation_ids(&self) -> impl Iterator<Item = u32> + '_ {
        self.vocab.eog.iter().copied()
    }

    /// The vocabulary arranged for JSON-constrained masks (built once, at
    /// the first call).
    pub(crate) fn json_index(&self) -> &crate::generate::json::vocab::VocabIndex {
        self.json_index
            .get_or_init(|| crate::generate::json::vocab::VocabIndex::new(self))
    }

    /// Whether `id` is a control token (BOS, EOS, `<|im_start|>`, ...):
    /// decoding with `skip_special` leaves these out.
    pub fn is_control(&self, id: u32) -> bool {
        self.vocab.attr(id).any(Attr::CONTROL)
    }
}
