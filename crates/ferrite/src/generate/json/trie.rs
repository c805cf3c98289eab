//! A byte trie over a set of texts (an `enum`'s JSON values, a `const`, an
//! object's key, `true`/`false`): built once per grammar, walked one byte
//! at a time by a state that is one index. So following a text costs a
//! binary search among a node's children per byte, whatever the number of
//! texts: a 50,000-value `enum` masks tokens as fast as a 2-value one.

/// Index of a trie node.
pub type TrieNode = u32;

#[derive(Clone, Debug, PartialEq, Eq)]
struct Node {
    /// This node's children: `edges[first..first + len]`, by byte.
    first: u32,
    len: u32,
    /// A text ends here.
    terminal: bool,
    /// The index (in the input) of the text ending here, if one does.
    value: u32,
}

/// The texts, as a trie; the root is node 0.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trie {
    nodes: Vec<Node>,
    /// `(byte, child)`, sorted by byte within each node's run.
    edges: Vec<(u8, TrieNode)>,
    /// With [`Trie::indexed`]: for each node, the sorted input indices of
    /// the texts below it (`index[spans[n].0..spans[n].1]`).
    spans: Vec<(u32, u32)>,
    index: Vec<u32>,
}

impl Trie {
    /// The trie of `texts` (duplicates allowed: the first one's index is
    /// the text's [`Trie::value`]).
    pub fn new<S: AsRef<[u8]>>(texts: &[S]) -> Trie {
        Trie::build(texts, false)
    }

    /// [`Trie::new`], also recording which texts lie below each node, so
    /// that a walk may be kept to texts of some indices
    /// ([`Trie::below`]). Takes one more `u32` per text byte.
    pub fn indexed<S: AsRef<[u8]>>(texts: &[S]) -> Trie {
        Trie::build(texts, true)
    }

    fn build<S: AsRef<[u8]>>(texts: &[S], indexed: bool) -> Trie {
        let mut pairs: Vec<(&[u8], u32)> = texts
            .iter()
            .enumerate()
            .map(|(i, t)| (t.as_ref(), i as u32))
            .collect();
        pairs.sort_unstable();
        pairs.dedup_by_key(|p| p.0);
        let values: Vec<u32> = pairs.iter().map(|p| p.1).collect();
        let sorted: Vec<&[u8]> = pairs.iter().map(|p| p.0).collect();
        let empty = Node {
            first: 0,
            len: 0,
            terminal: false,
            value: u32::MAX,
        };
        let mut t = Trie {
            nodes: vec![empty.clone()],
            edges: Vec::new(),
            spans: Vec::new(),
            index: Vec::new(),
        };
        let mut ranges = vec![(0usize, 0usize); 1];
        // Each pending entry: a node and its texts (sorted, sharing the
        // first `depth` bytes).
        let mut pending = vec![(0u32, 0usize, 0usize, sorted.len())];
        while let Some((node, depth, lo, hi)) = pending.pop() {
            ranges[node as usize] = (lo, hi);
            let mut lo = lo;
            if lo < hi && sorted[lo].len() == depth {
                let n = &mut t.nodes[node as usize];
                n.terminal = true;
                n.value = values[lo];
                lo += 1;
            }
            let rest = &sorted[lo..hi];
            let first = t.edges.len();
            let mut i = 0;
            while i < rest.len() {
                let b = rest[i][depth];
                let j = i + rest[i..].partition_point(|s| s[depth] == b);
                let child = t.nodes.len() as TrieNode;
                t.nodes.push(empty.clone());
                ranges.push((0, 0));
                t.edges.push((b, child));
                pending.push((child, depth + 1, lo + i, lo + j));
                i = j;
            }
            let n = &mut t.nodes[node as usize];
            n.first = first as u32;
            n.len = (t.edges.len() - first) as u32;
        }
        if indexed {
            for &(lo, hi) in &ranges {
                let start = t.index.len();
                t.index.extend_from_slice(&values[lo..hi]);
                t.index[start..].sort_unstable();
                t.spans.push((start as u32, t.index.len() as u32));
            }
        }
        t
    }

    /// Nodes in the trie (its size, for budgets).
    pub fn size(&self) -> usize {
        self.nodes.len() + self.index.len()
    }

    /// Where in [`Trie::indices`] the input indices in `lo..=hi` of the
    /// texts at or below `node` are (an [`Trie::indexed`] trie; empty for
    /// any other).
    pub fn below(&self, node: TrieNode, lo: usize, hi: usize) -> std::ops::Range<usize> {
        let Some(&(a, b)) = self.spans.get(node as usize) else {
            return 0..0;
        };
        let run = &self.index[a as usize..b as usize];
        let start = run.partition_point(|&v| (v as usize) < lo);
        let end = run.partition_point(|&v| (v as usize) <= hi).max(start);
        a as usize + start..a as usize + end
    }

    /// An [`Trie::indexed`] trie's input indices, node by node (each
    /// node's run sorted).
    pub fn indices(&self) -> &[u32] {
        &self.index
    }

    /// The child of `node` by byte `b`.
    pub fn step(&self, node: TrieNode, b: u8) -> Option<TrieNode> {
        let n = &self.nodes[node as usize];
        let run = &self.edges[n.first as usize..(n.first + n.len) as usize];
        run.binary_search_by_key(&b, |&(e, _)| e)
            .ok()
            .map(|i| run[i].1)
    }

    /// Whether a text ends at `node`.
    pub fn is_terminal(&self, node: TrieNode) -> bool {
        self.nodes[node as usize].terminal
    }

    /// The index of the text that ends at `node`, if one does.
    pub fn value(&self, node: TrieNode) -> Option<usize> {
        let n = &self.nodes[node as usize];
        n.terminal.then_some(n.value as usize)
    }

    /// Whether no text goes on past `node`.
    pub fn is_leaf(&self, node: TrieNode) -> bool {
        self.nodes[node as usize].len == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn walk(t: &Trie, s: &str) -> Option<TrieNode> {
        s.bytes().try_fold(0, |n, b| t.step(n, b))
    }

    #[test]
    fn follows_exactly_the_texts() {
        let t = Trie::new(&["\"cat\"", "\"cattle\"", "\"dog\"", "\"cat\"", "1"]);
        for s in ["\"cat\"", "\"cattle\"", "\"dog\"", "1"] {
            let n = walk(&t, s).unwrap();
            assert!(t.is_terminal(n), "{s}");
        }
        assert!(t.is_leaf(walk(&t, "\"dog\"").unwrap()));
        assert!(!t.is_terminal(walk(&t, "\"ca").unwrap()));
        assert!(walk(&t, "\"cow").is_none());
        assert!(walk(&t, "2").is_none());
        assert_eq!(t.value(walk(&t, "\"dog\"").unwrap()), Some(2));
        assert_eq!(t.value(walk(&t, "\"cat\"").unwrap()), Some(0));
        // A text that is a prefix of another is terminal, not a leaf.
        let t = Trie::new(&["1", "12"]);
        let n = walk(&t, "1").unwrap();
        assert!(t.is_terminal(n) && !t.is_leaf(n));
        assert_eq!(Trie::new(&[""; 0]).size(), 1);
    }

    fn reaches(t: &Trie, node: TrieNode, lo: usize, hi: usize) -> bool {
        !t.below(node, lo, hi).is_empty()
    }

    #[test]
    fn indexed_walks_know_which_texts_lie_below() {
        let t = Trie::indexed(&["\"b\"", "\"a\"", "\"ab\"", "\"c\""]);
        let a = walk(&t, "\"a").unwrap();
        assert!(reaches(&t, a, 1, 1) && reaches(&t, a, 2, 3) && !reaches(&t, a, 3, 3));
        assert!(reaches(&t, 0, 3, 3) && !reaches(&t, 0, 4, 9));
        assert!(!reaches(&t, walk(&t, "\"b").unwrap(), 1, 3));
        assert_eq!(t.value(walk(&t, "\"ab\"").unwrap()), Some(2));
        assert_eq!(t.below(0, 0, 3).len(), 4);
        assert!(Trie::new(&["x"]).below(0, 0, 5).is_empty());
    }
}
