//! Byte-level BPE (`tokenizer.ggml.model = "gpt2"`) on the HF `tokenizers`
//! crate: the pre-tokenizer regexes llama.cpp uses for each
//! `tokenizer.ggml.pre`, applied one after another (each splits every piece
//! the previous one left, keeping matches and the text between them), then
//! the GPT-2 byte-to-character mapping, then BPE merges by rank.
//!
//! Mirrors `llm_tokenizer_bpe` in llama.cpp's `src/llama-vocab.cpp` and the
//! splitters in `src/unicode.cpp`. Those run llama.cpp's own category tables
//! (Unicode 15.1); the `regex` crate here may be on a newer Unicode version,
//! so a letter or digit assigned after 15.1 can split differently.

use tokenizers::models::bpe::{Vocab as HfVocab, BPE};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{
    Model, OffsetReferential, OffsetType, PreTokenizedString, PreTokenizer, PreTokenizerWrapper,
    SplitDelimiterBehavior,
};

use super::vocab::{PreTokenizerKind, Vocab, KEY_MERGES, KEY_PRE};
use super::TokenizerError;

/// GPT-2's pattern.
const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+";
/// Llama 3's pattern (numbers in groups of up to three).
const LLAMA3: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen 2's pattern (single digits).
const QWEN2: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

impl PreTokenizerKind {
    /// The regexes, applied in order.
    fn patterns(self) -> &'static [&'static str] {
        match self {
            PreTokenizerKind::Default => &[
                r"[\p{P}\$\+<=>\^~\|]+",
                r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)",
                r"\p{N}+",
                r"[0-9][0-9][0-9]",
            ],
            PreTokenizerKind::Gpt2 => &[GPT2],
            PreTokenizerKind::DigitsThenGpt2 { .. } => &[r"\p{N}", GPT2],
            PreTokenizerKind::Llama3 { .. } => &[LLAMA3],
            PreTokenizerKind::Qwen2 { .. } => &[QWEN2],
        }
    }

    /// Whether BOS is added by default (llama.cpp: the Llama 3 family).
    pub fn adds_bos(self) -> bool {
        matches!(self, PreTokenizerKind::Llama3 { llama3_flags: true })
    }

    /// Whether a pre-token found whole in the vocabulary skips the merges.
    pub fn ignores_merges(self) -> bool {
        self.adds_bos()
    }

    /// Whether decoding cleans up spaces before punctuation.
    pub fn cleans_spaces(self) -> bool {
        match self {
            PreTokenizerKind::DigitsThenGpt2 { clean_spaces }
            | PreTokenizerKind::Qwen2 { clean_spaces } => clean_spaces,
            _ => true,
        }
    }
}

/// A byte-level BPE tokenizer for text without special tokens.
pub(crate) struct BpeTokenizer {
    pre: Sequence,
    model: BPE,
    /// The token of each byte's GPT-2 character, for the (unreachable in
    /// practice) case where the `tokenizers` crate reports an error.
    byte_tokens: Vec<Option<u32>>,
}

impl BpeTokenizer {
    pub fn new(vocab: &Vocab, kind: PreTokenizerKind) -> Result<BpeTokenizer, TokenizerError> {
        let mut steps: Vec<PreTokenizerWrapper> = Vec::new();
        for pattern in kind.patterns() {
            let split = Split::new(
                SplitPattern::Regex((*pattern).to_string()),
                SplitDelimiterBehavior::Isolated,
                false,
            )
            .map_err(|e| TokenizerError::new(KEY_PRE, format!("pre-tokenizer regex: {e}")))?;
            steps.push(split.into());
        }
        steps.push(ByteLevel::new(false, false, false).into());

        let hf_vocab: HfVocab = vocab
            .texts
            .iter()
            .enumerate()
            .map(|(i, t)| (t.clone(), i as u32))
            .collect();
        // The `tokenizers` crate rejects merges whose parts or result are not
        // tokens; such a merge can never yield a token, so we leave it out.
        let merges = vocab
            .merges
            .iter()
            .filter(|(a, b)| {
                vocab.id(a).is_some()
                    && vocab.id(b).is_some()
                    && vocab.id(&format!("{a}{b}")).is_some()
            })
            .cloned()
            .collect();
        let model = BPE::builder()
            .vocab_and_merges(hf_vocab, merges)
            .ignore_merges(vocab.ignore_merges)
            .build()
            .map_err(|e| TokenizerError::new(KEY_MERGES, format!("building the BPE model: {e}")))?;

        let byte_tokens = (0..=255u8)
            .map(|b| vocab.id(&byte_level_char(b).to_string()))
            .collect();
        Ok(BpeTokenizer {
            pre: Sequence::new(steps),
            model,
            byte_tokens,
        })
    }

    /// Appends the tokens of `text` (no special-token handling).
    pub fn encode_into(&self, text: &str, out: &mut Vec<u32>) {
        if text.is_empty() {
            return;
        }
        let start = out.len();
        if self.try_encode(text, out).is_err() {
            out.truncate(start);
            out.extend(text.bytes().filter_map(|b| self.byte_tokens[b as usize]));
        }
    }

    fn try_encode(&self, text: &str, out: &mut Vec<u32>) -> tokenizers::Result<()> {
        let mut pretok = PreTokenizedString::from(text);
        self.pre.pre_tokenize(&mut pretok)?;
        for (piece, _, _) in pretok.get_splits(OffsetReferential::Original, OffsetType::None) {
            out.extend(self.model.tokenize(piece)?.into_iter().map(|t| t.id));
        }
        Ok(())
    }
}

/// GPT-2's printable stand-in for a byte: printable Latin-1 bytes stand for
/// themselves, the other 68 map in order to U+0100 and up.
pub(crate) fn byte_level_char(b: u8) -> char {
    let printable = |c: u8| matches!(c, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
    if printable(b) {
        return char::from(b);
    }
    let rank = (0..b).filter(|&c| !printable(c)).count() as u32;
    // 0x100 + rank < 0x100 + 68 is a valid scalar value.
    char::from_u32(0x100 + rank).unwrap_or(char::REPLACEMENT_CHARACTER)
}

/// The inverse of [`byte_level_char`], indexed by code point (all stand-ins
/// are below U+0144).
pub(crate) fn char_to_byte_table() -> Vec<Option<u8>> {
    let mut table = vec![None; 0x144];
    for b in 0..=255u8 {
        let c = byte_level_char(b) as usize;
        if let Some(slot) = table.get_mut(c) {
            *slot = Some(b);
        }
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_level_mapping_matches_gpt2() {
        assert_eq!(byte_level_char(b' '), 'Ġ');
        assert_eq!(byte_level_char(b'\n'), 'Ċ');
        assert_eq!(byte_level_char(0), 'Ā');
        assert_eq!(byte_level_char(0xAD), 'Ń');
        assert_eq!(byte_level_char(b'a'), 'a');
        assert_eq!(byte_level_char(0xFF), 'ÿ');
        let table = char_to_byte_table();
        for b in 0..=255u8 {
            assert_eq!(table[byte_level_char(b) as usize], Some(b));
        }
        assert_eq!(table.iter().flatten().count(), 256);
    }

    #[test]
    fn pre_tokenizer_names() {
        assert_eq!(
            PreTokenizerKind::from_name("smollm"),
            Some(PreTokenizerKind::DigitsThenGpt2 {
                clean_spaces: false
            })
        );
        assert!(PreTokenizerKind::from_name("llama-bpe").is_some_and(|k| k.adds_bos()));
        assert_eq!(
            PreTokenizerKind::from_name(""),
            Some(PreTokenizerKind::Default)
        );
        assert_eq!(PreTokenizerKind::from_name("tekken"), None);
    }
}
