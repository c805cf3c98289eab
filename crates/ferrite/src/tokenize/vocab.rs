//! The vocabulary a GGUF file describes under `tokenizer.ggml.*`: token
//! texts, types, scores, merges, special ids and the add-BOS/EOS flags,
//! checked and turned into the tables the tokenizers use.
//!
//! Mirrors the vocabulary loader of llama.cpp (`src/llama-vocab.cpp`,
//! `llama_vocab::impl::load`): the same per-type defaults (SPM: BOS 1, EOS 2,
//! UNK 0, add BOS; BPE: BOS = EOS = 11), empty token texts renamed
//! `[EMPTY_<id>]`, then the token roles of [`super::roles`].
//! Where llama.cpp only warns about a bad file (an id out of range, a scores
//! array of the wrong length) we refuse it with an error naming the key.

use std::collections::{BTreeSet, HashMap};

use crate::formats::gguf::{Array, Metadata, Value};

use super::roles::find_roles;
pub(crate) use super::roles::{Attr, SpecialIds};
use super::TokenizerError;

pub(crate) const KEY_MODEL: &str = "tokenizer.ggml.model";
pub(crate) const KEY_PRE: &str = "tokenizer.ggml.pre";
pub(crate) const KEY_TOKENS: &str = "tokenizer.ggml.tokens";
pub(crate) const KEY_TOKEN_TYPE: &str = "tokenizer.ggml.token_type";
pub(crate) const KEY_SCORES: &str = "tokenizer.ggml.scores";
pub(crate) const KEY_MERGES: &str = "tokenizer.ggml.merges";
const KEY_ADD_BOS: &str = "tokenizer.ggml.add_bos_token";
const KEY_ADD_EOS: &str = "tokenizer.ggml.add_eos_token";
const KEY_ADD_SPACE_PREFIX: &str = "tokenizer.ggml.add_space_prefix";
const KEY_BOS: &str = "tokenizer.ggml.bos_token_id";
const KEY_EOS: &str = "tokenizer.ggml.eos_token_id";
const KEY_EOT: &str = "tokenizer.ggml.eot_token_id";
const KEY_EOM: &str = "tokenizer.ggml.eom_token_id";
const KEY_UNK: &str = "tokenizer.ggml.unknown_token_id";
const KEY_PAD: &str = "tokenizer.ggml.padding_token_id";
const KEY_FIM_PRE: &str = "tokenizer.ggml.fim_pre_token_id";
const KEY_FIM_SUF: &str = "tokenizer.ggml.fim_suf_token_id";
const KEY_FIM_MID: &str = "tokenizer.ggml.fim_mid_token_id";
const KEY_FIM_PAD: &str = "tokenizer.ggml.fim_pad_token_id";
const KEY_FIM_REP: &str = "tokenizer.ggml.fim_rep_token_id";
const KEY_FIM_SEP: &str = "tokenizer.ggml.fim_sep_token_id";

/// The pre-tokenizer families we support, by the llama.cpp pre-type they
/// map to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PreTokenizerKind {
    /// `default` or no `tokenizer.ggml.pre`: llama.cpp's fallback split.
    Default,
    /// GPT-2's regex alone (`gpt-2`, `phi-2`, `mpt`, `olmo`, ...).
    Gpt2,
    /// Every digit on its own, then GPT-2's regex (`smollm`, `starcoder`, ...).
    DigitsThenGpt2 { clean_spaces: bool },
    /// Llama 3's regex (`llama3`, `llama-bpe`, `dbrx`, ...).
    Llama3 { llama3_flags: bool },
    /// Qwen 2's regex (`qwen2`, `stablelm2`, ...).
    Qwen2 { clean_spaces: bool },
}

impl PreTokenizerKind {
    pub const SUPPORTED: &'static str = "default, gpt-2 and its aliases, smollm, starcoder, \
        refact, command-r, codeshell, exaone, minerva-7b, llama3 and its aliases, dbrx, \
        smaug-bpe, qwen2, deepseek-r1-qwen, stablelm2, megrez";

    /// The family llama.cpp uses for a `tokenizer.ggml.pre` value.
    pub fn from_name(pre: &str) -> Option<PreTokenizerKind> {
        use PreTokenizerKind::*;
        Some(match pre {
            "" | "default" => Default,
            "gpt-2" | "phi-2" | "jina-es" | "jina-de" | "gigachat" | "jina-v2-es"
            | "jina-v2-de" | "a.x-4.0" | "mellum" | "modern-bert" | "mpt" | "olmo" | "jais"
            | "exaone4" => Gpt2,
            "starcoder" | "refact" | "codeshell" | "exaone" | "minerva-7b" => {
                DigitsThenGpt2 { clean_spaces: true }
            }
            "smollm" | "command-r" => DigitsThenGpt2 {
                clean_spaces: false,
            },
            "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral"
            | "midm-2.0" | "lfm2" | "jina-v5-nano" => Llama3 { llama3_flags: true },
            "dbrx" | "smaug-bpe" => Llama3 {
                llama3_flags: false,
            },
            "qwen2" | "deepseek-r1-qwen" | "kormo" | "f2llmv2" => Qwen2 {
                clean_spaces: false,
            },
            "stablelm2" | "megrez" => Qwen2 { clean_spaces: true },
            _ => return None,
        })
    }
}

/// The tokenizer algorithm `tokenizer.ggml.model` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Algorithm {
    /// `llama`: SentencePiece-style merges by score with byte fallback.
    Spm,
    /// `gpt2`: byte-level BPE with a pre-tokenizer regex.
    Bpe(PreTokenizerKind),
    /// A Hugging Face `tokenizer.json`, run by the `tokenizers` crate
    /// (`super::hf`).
    Hf,
}

/// A checked vocabulary.
pub(crate) struct Vocab {
    pub algorithm: Algorithm,
    /// Token texts by id (never empty strings).
    pub texts: Vec<String>,
    pub attrs: Vec<Attr>,
    /// SPM merge scores by id (zeros when the file has none).
    pub scores: Vec<f32>,
    pub text_to_id: HashMap<String, u32>,
    /// BPE merges in rank order (empty for SPM).
    pub merges: Vec<(String, String)>,
    pub special: SpecialIds,
    pub eog: BTreeSet<u32>,
    pub add_bos: bool,
    pub add_eos: bool,
    pub add_space_prefix: bool,
    /// BPE: the whole pre-token is looked up before merging.
    pub ignore_merges: bool,
    /// Decoding removes spaces before `?!.,` and some apostrophes.
    pub clean_spaces: bool,
}

impl Vocab {
    pub fn from_gguf(md: &Metadata) -> Result<Vocab, TokenizerError> {
        let model = get_str(md, KEY_MODEL)?.ok_or(TokenizerError::missing(KEY_MODEL))?;
        let pre = get_str(md, KEY_PRE)?.unwrap_or("");

        let texts = string_array(md, KEY_TOKENS)?.ok_or(TokenizerError::missing(KEY_TOKENS))?;
        let n = texts.len();
        if n == 0 {
            return Err(TokenizerError::new(KEY_TOKENS, "the vocabulary is empty"));
        }
        if u32::try_from(n).is_err() {
            return Err(TokenizerError::new(
                KEY_TOKENS,
                format!("{n} tokens do not fit u32 ids"),
            ));
        }

        let mut special = SpecialIds::default();
        let (algorithm, mut add_bos, mut add_space_prefix, ignore_merges, clean_spaces);
        match model {
            "llama" => {
                algorithm = Algorithm::Spm;
                special.bos = Some(1);
                special.eos = Some(2);
                special.unk = Some(0);
                add_bos = true;
                add_space_prefix = true;
                ignore_merges = false;
                clean_spaces = false;
            }
            "gpt2" => {
                let kind = PreTokenizerKind::from_name(pre).ok_or_else(|| {
                    TokenizerError::new(
                        KEY_PRE,
                        format!(
                            "unsupported pre-tokenizer '{pre}' (supported: {})",
                            PreTokenizerKind::SUPPORTED
                        ),
                    )
                })?;
                algorithm = Algorithm::Bpe(kind);
                special.bos = Some(11);
                special.eos = Some(11);
                add_bos = kind.adds_bos();
                add_space_prefix = false;
                ignore_merges = kind.ignores_merges();
                clean_spaces = kind.cleans_spaces();
            }
            other => {
                return Err(TokenizerError::new(
                    KEY_MODEL,
                    format!("unsupported tokenizer model '{other}' (supported: gpt2, llama)"),
                ))
            }
        }
        // Defaults that fall outside the vocabulary are dropped, as llama.cpp does.
        for id in [&mut special.bos, &mut special.eos, &mut special.unk] {
            if id.is_some_and(|i| i as usize >= n) {
                *id = None;
            }
        }
        if let Some(v) = get_bool(md, KEY_ADD_SPACE_PREFIX)? {
            add_space_prefix = v;
        }

        let mut texts = texts.to_vec();
        let mut text_to_id = HashMap::with_capacity(n);
        for (i, text) in texts.iter_mut().enumerate() {
            if text.is_empty() {
                *text = format!("[EMPTY_{i}]");
            }
            // `n` fits u32 (checked above).
            if let Some(first) = text_to_id.insert(text.clone(), i as u32) {
                return Err(TokenizerError::new(
                    KEY_TOKENS,
                    format!("tokens {first} and {i} have the same text {text:?}"),
                ));
            }
        }

        let scores = match md.get(KEY_SCORES) {
            None => vec![0.0; n],
            Some(Value::Array(Array::F32(v))) => v.clone(),
            Some(Value::Array(Array::I32(v))) => v.iter().map(|&s| s as f32).collect(),
            Some(v) => {
                return Err(TokenizerError::wrong_type(
                    KEY_SCORES,
                    "an f32 or i32 array",
                    v,
                ))
            }
        };
        check_len(KEY_SCORES, scores.len(), n)?;

        let mut attrs = match md.get(KEY_TOKEN_TYPE) {
            None => vec![Attr::NORMAL; n],
            Some(Value::Array(Array::I32(v))) => {
                v.iter().map(|&t| Attr::from_token_type(t)).collect()
            }
            Some(v) => {
                return Err(TokenizerError::wrong_type(
                    KEY_TOKEN_TYPE,
                    "an i32 array",
                    v,
                ))
            }
        };
        check_len(KEY_TOKEN_TYPE, attrs.len(), n)?;
        for (i, (text, attr)) in texts.iter().zip(&attrs).enumerate() {
            if attr.any(Attr::BYTE) && parse_byte_token(text).is_none() {
                return Err(TokenizerError::new(
                    KEY_TOKEN_TYPE,
                    format!("token {i} is typed as a byte but its text {text:?} is not <0xNN>"),
                ));
            }
        }

        let merges = match algorithm {
            Algorithm::Spm | Algorithm::Hf => Vec::new(),
            Algorithm::Bpe(_) => read_merges(md)?,
        };

        let ids = [
            (KEY_BOS, &mut special.bos),
            (KEY_EOS, &mut special.eos),
            (KEY_EOT, &mut special.eot),
            (KEY_EOM, &mut special.eom),
            (KEY_UNK, &mut special.unk),
            (KEY_PAD, &mut special.pad),
            (KEY_FIM_PRE, &mut special.fim_pre),
            (KEY_FIM_SUF, &mut special.fim_suf),
            (KEY_FIM_MID, &mut special.fim_mid),
            (KEY_FIM_PAD, &mut special.fim_pad),
            (KEY_FIM_REP, &mut special.fim_rep),
            (KEY_FIM_SEP, &mut special.fim_sep),
        ];
        for (key, slot) in ids {
            if let Some(id) = get_id(md, key, n)? {
                *slot = Some(id);
            }
        }

        if let Some(v) = get_bool(md, KEY_ADD_BOS)? {
            add_bos = v;
        }
        let add_eos = get_bool(md, KEY_ADD_EOS)?.unwrap_or(false);
        if add_bos && special.bos.is_none() {
            return Err(TokenizerError::new(
                KEY_BOS,
                "BOS is to be added but the vocabulary has no BOS token",
            ));
        }
        if add_eos && special.eos.is_none() {
            return Err(TokenizerError::new(
                KEY_EOS,
                "EOS is to be added but the vocabulary has no EOS token",
            ));
        }

        let eog = find_roles(&texts, &text_to_id, &mut attrs, &mut special);

        Ok(Vocab {
            algorithm,
            texts,
            attrs,
            scores,
            text_to_id,
            merges,
            special,
            eog,
            add_bos,
            add_eos,
            add_space_prefix,
            ignore_merges,
            clean_spaces,
        })
    }

    pub fn len(&self) -> usize {
        self.texts.len()
    }

    pub fn attr(&self, id: u32) -> Attr {
        self.attrs.get(id as usize).copied().unwrap_or_default()
    }

    pub fn id(&self, text: &str) -> Option<u32> {
        self.text_to_id.get(text).copied()
    }
}

/// The byte a `<0xNN>` token stands for.
pub(crate) fn parse_byte_token(text: &str) -> Option<u8> {
    let hex = text.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}

fn read_merges(md: &Metadata) -> Result<Vec<(String, String)>, TokenizerError> {
    let list = string_array(md, KEY_MERGES)?.ok_or(TokenizerError::missing(KEY_MERGES))?;
    let mut seen = std::collections::HashSet::with_capacity(list.len());
    let mut merges = Vec::with_capacity(list.len());
    for (index, text) in list.iter().enumerate() {
        // The separator is the first space after the first byte, so that a
        // left part may itself be a space.
        let split = text.bytes().skip(1).position(|b| b == b' ').map(|p| p + 1);
        let Some(pos) = split else {
            return Err(TokenizerError::new(
                KEY_MERGES,
                format!("entry {index} ({text:?}) is not two tokens separated by a space"),
            ));
        };
        let pair = (text[..pos].to_string(), text[pos + 1..].to_string());
        // The first occurrence of a pair sets its rank.
        if seen.insert(pair.clone()) {
            merges.push(pair);
        }
    }
    Ok(merges)
}

fn check_len(key: &'static str, len: usize, n: usize) -> Result<(), TokenizerError> {
    if len != n {
        return Err(TokenizerError::new(
            key,
            format!("has {len} entries but the vocabulary has {n} tokens"),
        ));
    }
    Ok(())
}

fn get_str<'a>(md: &'a Metadata, key: &'static str) -> Result<Option<&'a str>, TokenizerError> {
    match md.get(key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(v) => Err(TokenizerError::wrong_type(key, "a string", v)),
    }
}

fn get_bool(md: &Metadata, key: &'static str) -> Result<Option<bool>, TokenizerError> {
    match md.get(key) {
        None => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(v) => Err(TokenizerError::wrong_type(key, "a bool", v)),
    }
}

fn string_array<'a>(
    md: &'a Metadata,
    key: &'static str,
) -> Result<Option<&'a [String]>, TokenizerError> {
    match md.get(key) {
        None => Ok(None),
        Some(Value::Array(Array::String(v))) => Ok(Some(v)),
        Some(v) => Err(TokenizerError::wrong_type(key, "a string array", v)),
    }
}

/// A token id key: absent, or a non-negative integer below `n`.
fn get_id(md: &Metadata, key: &'static str, n: usize) -> Result<Option<u32>, TokenizerError> {
    let Some(v) = md.get(key) else {
        return Ok(None);
    };
    let id = v
        .as_u64()
        .ok_or_else(|| TokenizerError::wrong_type(key, "a non-negative integer", v))?;
    if id >= n as u64 {
        return Err(TokenizerError::new(
            key,
            format!("token id {id} is out of range (the vocabulary has {n} tokens)"),
        ));
    }
    // id < n <= u32::MAX + 1.
    Ok(Some(id as u32))
}
