//! The SentencePiece-style tokenizer of `tokenizer.ggml.model = "llama"`:
//! start from single characters, repeatedly merge the adjacent pair whose
//! concatenation is the highest-scoring token (leftmost on ties), then map
//! every piece that is not a token to its `<0xNN>` byte tokens.
//!
//! Mirrors `llm_tokenizer_spm_session` in llama.cpp's `src/llama-vocab.cpp`
//! (itself after SentencePiece's BPE model with byte fallback). The caller
//! has already replaced spaces with `▁` and added any space prefix.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use super::vocab::Vocab;

const NONE: usize = usize::MAX;

/// A piece of the text: `text[start..start + len]`, linked to its neighbours.
#[derive(Clone, Copy)]
struct Symbol {
    start: usize,
    len: usize,
    prev: usize,
    next: usize,
}

/// A candidate merge of symbols `left` and `right`, valid while their
/// lengths still add up to `size`.
struct Bigram {
    score: f32,
    left: usize,
    right: usize,
    size: usize,
}

impl Ord for Bigram {
    /// Highest score first, then leftmost.
    fn cmp(&self, other: &Self) -> Ordering {
        self.score
            .partial_cmp(&other.score)
            .unwrap_or(Ordering::Equal)
            .then_with(|| other.left.cmp(&self.left))
    }
}

impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Bigram {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Bigram {}

/// Appends the tokens of `text` to `out`.
pub(crate) fn encode_into(vocab: &Vocab, text: &str, out: &mut Vec<u32>) {
    let mut symbols: Vec<Symbol> = Vec::with_capacity(text.len());
    for (start, c) in text.char_indices() {
        let i = symbols.len();
        symbols.push(Symbol {
            start,
            len: c.len_utf8(),
            prev: if i == 0 { NONE } else { i - 1 },
            next: i + 1,
        });
    }
    let Some(last) = symbols.last_mut() else {
        return;
    };
    last.next = NONE;

    let mut queue = BinaryHeap::new();
    let try_add =
        |symbols: &[Symbol], queue: &mut BinaryHeap<Bigram>, left: usize, right: usize| {
            if left == NONE || right == NONE {
                return;
            }
            let (l, r) = (symbols[left], symbols[right]);
            let piece = &text[l.start..r.start + r.len];
            if let Some(id) = vocab.id(piece) {
                queue.push(Bigram {
                    score: vocab.scores[id as usize],
                    left,
                    right,
                    size: piece.len(),
                });
            }
        };
    for i in 1..symbols.len() {
        try_add(&symbols, &mut queue, i - 1, i);
    }

    while let Some(bigram) = queue.pop() {
        let (l, r) = (symbols[bigram.left], symbols[bigram.right]);
        if l.len == 0 || r.len == 0 || l.len + r.len != bigram.size {
            continue;
        }
        symbols[bigram.left].len += r.len;
        symbols[bigram.left].next = r.next;
        symbols[bigram.right].len = 0;
        if r.next != NONE {
            symbols[r.next].prev = bigram.left;
        }
        try_add(&symbols, &mut queue, l.prev, bigram.left);
        try_add(&symbols, &mut queue, bigram.left, r.next);
    }

    let mut i = 0;
    while i != NONE {
        let s = symbols[i];
        let piece = &text[s.start..s.start + s.len];
        match vocab.id(piece) {
            Some(id) => out.push(id),
            None => out.extend(piece.bytes().filter_map(|b| byte_token(vocab, b))),
        }
        i = s.next;
    }
}

/// The token for a raw byte: `<0xNN>`, else the one-byte text itself, else
/// (where llama.cpp would abort) the unknown token.
fn byte_token(vocab: &Vocab, b: u8) -> Option<u32> {
    vocab
        .id(&format!("<0x{b:02X}>"))
        .or_else(|| std::str::from_utf8(&[b]).ok().and_then(|s| vocab.id(s)))
        .or(vocab.special.unk)
}
