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

    /// Whether `text` holds the text of a control (or unknown) token, one
    /// that only `parse_special` turns into that token.
    pub fn has_control_text(&self, vocab: &Vocab, text: &str) -> bool {
        let Some(finder) = &self.finder else {
            return false;
        };
        finder.find_overlapping_iter(text).any(|m| {
            let id = self.order[m.pattern().as_usize()];
            vocab.attr(id).any(Attr::CONTROL | Attr::UNKNOWN)
        })
    }

    /// Splits `text` into fragments; with `parse_special`, control-token
    /// texts become tokens except where they overlap a `protected` range
    /// (there they stay text, as without `parse_special`).
    pub fn partition(
        &self,
        vocab: &Vocab,
        text: &str,
        parse_special: bool,
        protected: &[Range<usize>],
    ) -> Vec<Fragment> {
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
            let guarded =
                !protected.is_empty() && vocab.attr(id).any(Attr::CONTROL | Attr::UNKNOWN);
            let mut next = Vec::with_capacity(fragments.len() + 2);
            for fragment in fragments {
                let Fragment::Text(range) = fragment else {
                    next.push(fragment);
                    continue;
                };
                // `start`: where the current text piece begins; `from`:
                // where to look for the next occurrence.
                let mut start = range.start;
                let mut from = range.start;
                while let Some(offset) = text[from..range.end].find(needle) {
                    let at = from + offset;
                    let end = at + needle.len();
                    if guarded && protected.iter().any(|p| p.start < end && at < p.end) {
                        from = at + needle.chars().next().map_or(1, char::len_utf8);
                        continue;
                    }
                    if at > start {
                        next.push(Fragment::Text(start..at));
                    }
                    next.push(Fragment::Token(id));
                    start = end;
                    from = end;
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
