//! Splitting text around the texts of special tokens before tokenizing.
//!
//! Mirrors `tokenizer_st_partition` in llama.cpp's `src/llama-vocab.cpp`:
//! control, user-defined and unknown tokens are taken longest text first,
//! and each one cuts every occurrence out of all the text pieces left by the
//! longer ones. Without `parse_special` only user-defined tokens are cut
//! (as the HF tokenizers do for added tokens that are not special). Tokens
//! of equal length are taken by id (llama.cpp's order there is unspecified);
//! the lstrip/rstrip attributes llama.cpp sets for a few models by name are
//! not modelled.

use std::ops::Range;

use aho_corasick::{AhoCorasick, MatchKind};

use super::vocab::{Attr, Vocab};

/// A piece of the input: raw text to tokenize, or a special token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Fragment {
    Text(Range<usize>),
    Token(u32),
}

pub(crate) struct SpecialTokens {
    /// Special token ids, longest text first.
    order: Vec<u32>,
    /// Finds which of `order` (same indices) occur in a text at all.
    finder: Option<AhoCorasick>,
}

impl SpecialTokens {
    pub fn new(vocab: &Vocab) -> SpecialTokens {
        let special = Attr::CONTROL | Attr::USER_DEFINED | Attr::UNKNOWN;
        let mut order: Vec<u32> = (0..vocab.len() as u32)
            .filter(|&id| vocab.attr(id).any(special))
            .collect();
        order.sort_by_key(|&id| std::cmp::Reverse(vocab.texts[id as usize].len()));
        let finder = AhoCorasick::builder()
            .match_kind(MatchKind::Standard)
            .build(order.iter().map(|&id| &vocab.texts[id as usize]))
            .ok();
        SpecialTokens { order, finder }
    }

    /// Splits `text` into fragments.
    pub fn partition(&self, vocab: &Vocab, text: &str, parse_special: bool) -> Vec<Fragment> {
        let mut fragments = Vec::new();
        if text.is_empty() {
            return fragments;
        }
        fragments.push(Fragment::Text(0..text.len()));

        // Which special texts occur anywhere (a fragment is a substring, so
        // nothing else can occur in one).
        let mut present = vec![self.finder.is_none(); self.order.len()];
        if let Some(finder) = &self.finder {
            for m in finder.find_overlapping_iter(text) {
                present[m.pattern().as_usize()] = true;
            }
        }

        for (i, &id) in self.order.iter().enumerate() {
            if !present[i] || (!parse_special && vocab.attr(id).any(Attr::CONTROL | Attr::UNKNOWN))
            {
                continue;
            }
            let needle = vocab.texts[id as usize].as_str();
            let mut next = Vec::with_capacity(fragments.len() + 2);
            for fragment in fragments {
                let Fragment::Text(range) = fragment else {
                    next.push(fragment);
                    continue;
                };
                let mut start = range.start;
                while let Some(offset) = text[start..range.end].find(needle) {
                    if offset > 0 {
                        next.push(Fragment::Text(start..start + offset));
                    }
                    next.push(Fragment::Token(id));
                    start += offset + needle.len();
                }
                if start < range.end {
                    next.push(Fragment::Text(start..range.end));
                }
            }
            fragments = next;
        }
        fragments
    }
}
