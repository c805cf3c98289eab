//! A vocabulary's tokens arranged for [`mask_logits`](super::mask_logits):
//! built once per tokenizer (at the first constrained request), so that a
//! mask walks the tokens as a byte trie. Tokens that share a prefix share
//! the work of feeding it to the machine, and a byte the machine refuses
//! rules out at once every token that goes through it: a step's mask
//! costs about the number of trie nodes whose prefix the constraint still
//! allows, not the vocabulary's size times a token's length.
//!
//! Inside a string, most tokens are plain text; those are kept apart,
//! sorted by length, since there any of them fits that is short enough.

use crate::tokenize::Tokenizer;

/// A trie node: its children are `edges[first..first + len]` (sorted by
/// byte), the tokens whose bytes end here `ids[id_first..id_end]`.
#[derive(Clone, Copy, Debug)]
struct Node {
    first: u32,
    len: u32,
    id_first: u32,
    id_end: u32,
}

/// A byte trie over some tokens' bytes; the root (node 0) is the empty
/// prefix.
#[derive(Debug, Default)]
pub struct ByteTrie {
    nodes: Vec<Node>,
    edges: Vec<(u8, u32)>,
    ids: Vec<u32>,
}

impl ByteTrie {
    /// The trie of `tokens` (id and non-empty bytes).
    fn new(mut tokens: Vec<(&[u8], u32)>) -> ByteTrie {
        tokens.sort_unstable();
        let mut t = ByteTrie::default();
        let empty = Node {
            first: 0,
            len: 0,
            id_first: 0,
            id_end: 0,
        };
        t.nodes.push(empty);
        // Each pending entry: a node and its tokens (sorted, sharing the
        // first `depth` bytes).
        let mut pending = vec![(0u32, 0usize, 0usize, tokens.len())];
        while let Some((node, depth, lo, hi)) = pending.pop() {
            let mut lo = lo;
            let id_first = t.ids.len() as u32;
            while lo < hi && tokens[lo].0.len() == depth {
                t.ids.push(tokens[lo].1);
                lo += 1;
            }
            let first = t.edges.len();
            let mut i = lo;
            while i < hi {
                let b = tokens[i].0[depth];
                let j = i + tokens[i..hi].partition_point(|s| s.0[depth] == b);
                let child = t.nodes.len() as u32;
                t.nodes.push(empty);
                t.edges.push((b, child));
                pending.push((child, depth + 1, i, j));
                i = j;
            }
            let n = &mut t.nodes[node as usize];
            n.id_first = id_first;
            n.id_end = t.ids.len() as u32;
            n.first = first as u32;
            n.len = (t.edges.len() - first) as u32;
        }
        t
    }

    /// The children of `node`: `(byte, child)`.
    pub fn children(&self, node: u32) -> &[(u8, u32)] {
        let n = &self.nodes[node as usize];
        &self.edges[n.first as usize..(n.first + n.len) as usize]
    }

    /// The tokens whose bytes end at `node`.
    pub fn ids(&self, node: u32) -> &[u32] {
        let n = &self.nodes[node as usize];
        &self.ids[n.id_first as usize..n.id_end as usize]
    }
}

/// Whether `bytes` are plain text a JSON string holds as they are: whole
/// UTF-8 characters, none a control character, `"` or `\`.
pub fn is_plain(bytes: &[u8]) -> bool {
    bytes.iter().all(|&b| b >= 0x20 && b != b'"' && b != b'\\') && std::str::from_utf8(bytes).is_ok()
}

/// A tokenizer's tokens, arranged for masks (see the module's notes).
#[derive(Debug)]
pub struct VocabIndex {
    /// Every token that is not a control token and has bytes.
    pub all: ByteTrie,
    /// Those of them that are not plain text ([`is_plain`]).
    pub rest: ByteTrie,
    /// The plain ones, `(length in bytes, id)`, shortest first.
    pub plain: Vec<(u32, u32)>,
    /// The plain ones as a bit set (bit `id % 64` of word `id / 64`).
    pub plain_bits: Vec<u64>,
    /// Control tokens (allowed only as a grammar's markers).
    pub control: Vec<u32>,
}

impl VocabIndex {
    /// The index of `tok`'s vocabulary.
    pub fn new(tok: &Tokenizer) -> VocabIndex {
        let n = tok.vocab_size() as u32;
        let mut all = Vec::with_capacity(n as usize);
        let mut rest = Vec::new();
        let mut plain = Vec::new();
        let mut control = Vec::new();
        for id in 0..n {
            let bytes = tok.token_bytes(id);
            if tok.is_control(id) {
                control.push(id);
                continue;
            }
            if bytes.is_empty() {
                continue;
            }
            all.push((bytes, id));
            if is_plain(bytes) {
                plain.push((bytes.len() as u32, id));
            } else {
                rest.push((bytes, id));
            }
        }
        plain.sort_unstable();
        let mut plain_bits = vec![0u64; (n as usize).div_ceil(64)];
        for &(_, id) in &plain {
            plain_bits[id as usize / 64] |= 1 << (id % 64);
        }
        VocabIndex {
            plain_bits,
            all: ByteTrie::new(all),
            rest: ByteTrie::new(rest),
            plain,
            control,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_trie_holds_each_token_once() {
        let toks: Vec<(&[u8], u32)> = vec![
            (b"ab", 0),
            (b"a", 1),
            (b"abc", 2),
            (b"b", 3),
            (b"a", 4),
        ];
        let t = ByteTrie::new(toks);
        let walk = |s: &[u8]| {
            s.iter().try_fold(0u32, |n, &b| {
                t.children(n).iter().find(|e| e.0 == b).map(|e| e.1)
            })
        };
        assert_eq!(t.ids(walk(b"a").unwrap()), &[1, 4]);
        assert_eq!(t.ids(walk(b"abc").unwrap()), &[2]);
        assert_eq!(t.ids(walk(b"b").unwrap()), &[3]);
        assert!(walk(b"c").is_none());
        assert!(t.ids(0).is_empty());
        assert_eq!(t.nodes.len(), 5);
        assert!(is_plain("é x".as_bytes()) && !is_plain(b"a\"") && !is_plain(&[0xc3]));
    }
}
