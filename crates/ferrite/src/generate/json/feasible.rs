//! Which values can still be finished, so that a [`JsonState`] never
//! takes a byte after which no text is complete (a dead end).
//!
//! A value's nesting is bounded (objects may not open [`MAX_REF_DEPTH`]
//! containers deep, and arrays there stay empty), so whether a value of
//! a node can be written to its end depends on how deep it starts: an
//! object whose required property is an object needs one more level, a
//! required self-reference needs infinitely many. [`depth_limits`]
//! computes, once per grammar, for each node the depth below which its
//! values can be finished; the machine then only opens what it can close:
//! a union member, an array item, a declared property (through
//! [`KeyLimits`]) or an additional one only where its value fits.
//!
//! [`JsonState`]: super::JsonState

use std::ops::Range;

use super::grammar::{Grammar, Node, NodeId, MAX_REF_DEPTH};
use super::trie::{Trie, TrieNode};

/// A depth limit meaning "at any depth".
pub const ANY_DEPTH: u8 = u8::MAX;

/// The deepest an object may open, as a depth limit.
const OBJECT_LIMIT: u8 = MAX_REF_DEPTH as u8;

/// One level less room: a value inside a container needs the
/// container's depth plus one.
fn inner(limit: u8) -> u8 {
    if limit == ANY_DEPTH {
        ANY_DEPTH
    } else {
        limit.saturating_sub(1)
    }
}

/// `resolved[i]`: the node `i` stands for through `$ref`s (`None`: a
/// `$ref` cycle with nothing between, which [`Grammar::node`] reads as
/// any value).
fn resolve_all(nodes: &[Node]) -> Vec<Option<NodeId>> {
    (0..nodes.len())
        .map(|mut id| {
            for _ in 0..=nodes.len() {
                match nodes.get(id)? {
                    Node::Ref(to) => id = *to,
                    _ => return Some(id),
                }
            }
            None
        })
        .collect()
}

/// For each node, the depth limit of its values: a value of node `i` can
/// start `d` containers deep and be finished iff `d < limits[i]`
/// ([`ANY_DEPTH`]: at any depth; 0: nowhere, e.g. a required
/// self-reference). Scalars can always be finished; an object needs its
/// required properties to fit one level deeper; an array needs its item
/// to when it needs at least one; a union needs one member to.
///
/// Computed as the least fixed point from "nowhere", node by node
/// through a work list, so recursive schemas settle: a limit only grows,
/// at most `MAX_REF_DEPTH + 2` times, and each growth revisits the
/// node's users once.
pub fn depth_limits(nodes: &[Node]) -> Vec<u8> {
    let resolved = resolve_all(nodes);
    // `users[c]`: the nodes whose limit depends on node `c`'s.
    let mut users: Vec<Vec<NodeId>> = vec![Vec::new(); nodes.len()];
    let children = |n: &Node| -> Vec<NodeId> {
        match n {
            Node::Object(o) => o
                .props
                .iter()
                .filter(|p| p.required)
                .map(|p| p.node)
                .collect(),
            Node::Array { item, .. } => vec![*item],
            Node::Union(members) => members.clone(),
            _ => Vec::new(),
        }
    };
    for (id, n) in nodes.iter().enumerate() {
        for c in children(n) {
            if let Some(Some(r)) = resolved.get(c) {
                users[*r].push(id);
            }
        }
    }
    let mut limits = vec![0u8; nodes.len()];
    let limit_of = |limits: &[u8], c: NodeId| -> u8 {
        match resolved.get(c) {
            Some(Some(r)) => limits[*r],
            // A `$ref` cycle (any value), or no node (any value).
            _ => ANY_DEPTH,
        }
    };
    let mut work: Vec<NodeId> = (0..nodes.len()).rev().collect();
    let mut queued = vec![true; nodes.len()];
    while let Some(id) = work.pop() {
        queued[id] = false;
        let new = match &nodes[id] {
            Node::Object(o) => o
                .props
                .iter()
                .filter(|p| p.required)
                .map(|p| inner(limit_of(&limits, p.node)))
                .fold(OBJECT_LIMIT, u8::min),
            Node::AnyObject => OBJECT_LIMIT,
            Node::Array { item, min, .. } => {
                if *min == 0 {
                    ANY_DEPTH
                } else {
                    inner(limit_of(&limits, *item)).min(OBJECT_LIMIT)
                }
            }
            Node::Union(members) => members
                .iter()
                .map(|&m| limit_of(&limits, m))
                .max()
                .unwrap_or(0),
            // Settled below, from what they point to.
            Node::Ref(_) => continue,
            _ => ANY_DEPTH,
        };
        if new > limits[id] {
            limits[id] = new;
            for &u in &users[id] {
                if !queued[u] {
                    queued[u] = true;
                    work.push(u);
                }
            }
        }
    }
    for (id, n) in nodes.iter().enumerate() {
        if matches!(n, Node::Ref(_)) {
            limits[id] = limit_of(&limits, id);
        }
    }
    limits
}

/// The most of a sequence of depth limits over ranges of it (a segment
/// tree): built for an object's keys trie when some declared property
/// cannot be written at every depth, so that "is some key below this trie
/// node usable here" costs a logarithm, not a scan of the keys.
#[derive(Clone, Debug)]
pub struct RangeMax {
    n: usize,
    /// `tree[n + i]` is item `i`; `tree[i]` the most of its two children.
    tree: Vec<u8>,
}

impl RangeMax {
    pub fn new(items: &[u8]) -> RangeMax {
        let n = items.len();
        let mut tree = vec![0u8; 2 * n];
        tree[n..].copy_from_slice(items);
        for i in (1..n).rev() {
            tree[i] = tree[2 * i].max(tree[2 * i + 1]);
        }
        RangeMax { n, tree }
    }

    /// The most of the items in `r` (0 when it is empty).
    pub fn max(&self, r: Range<usize>) -> u8 {
        let (mut lo, mut hi) = (r.start + self.n, r.end.min(self.n) + self.n);
        let mut best = 0;
        while lo < hi {
            if lo & 1 == 1 {
                best = best.max(self.tree[lo]);
                lo += 1;
            }
            if hi & 1 == 1 {
                hi -= 1;
                best = best.max(self.tree[hi]);
            }
            lo /= 2;
            hi /= 2;
        }
        best
    }
}

/// For each trie of `g` that is an object's keys: the depth limits of its
/// texts' values in the trie's index order, when some are limited (`None`
/// otherwise: every key can always be written).
pub fn key_limits(g: &Grammar) -> Vec<Option<RangeMax>> {
    let mut out: Vec<Option<RangeMax>> = vec![None; g.tries.len()];
    for n in &g.nodes {
        let Node::Object(o) = n else { continue };
        let Some(t) = g.tries.get(o.keys) else {
            continue;
        };
        let lims: Vec<u8> = o.props.iter().map(|p| g.limit(p.node)).collect();
        if lims.iter().all(|&l| l == ANY_DEPTH) {
            continue;
        }
        let items: Vec<u8> = t.indices().iter().map(|&i| lims[i as usize]).collect();
        out[o.keys] = Some(RangeMax::new(&items));
    }
    out
}

impl Grammar {
    /// The depth limit of node `id`'s values (see `depth_limits`);
    /// `NodeId::MAX` (any value) has none.
    pub fn limit(&self, id: NodeId) -> u8 {
        self.limits.get(id).copied().unwrap_or(ANY_DEPTH)
    }

    /// Whether nodes `a` and `b` are the same through `$ref`s.
    fn same(&self, a: NodeId, b: NodeId) -> bool {
        std::ptr::eq(self.node(a), self.node(b))
    }

    /// Whether a value of node `id` that starts `depth` containers deep
    /// can be finished.
    pub fn fits(&self, id: NodeId, depth: usize) -> bool {
        let l = self.limit(id);
        l == ANY_DEPTH || depth < usize::from(l)
    }

    /// Whether keys trie `trie` (of object keys) holds, at or below `node`,
    /// the key of a property of index in `lo..=hi` whose value fits
    /// `depth` containers deep.
    pub(crate) fn key_fits(
        &self,
        trie: usize,
        node: TrieNode,
        lo: usize,
        hi: usize,
        depth: usize,
    ) -> bool {
        let t: &Trie = &self.tries[trie];
        let below = t.below(node, lo, hi);
        if below.is_empty() {
            return false;
        }
        match self.key_limits.get(trie) {
            Some(Some(m)) => {
                let l = m.max(below);
                l == ANY_DEPTH || depth < usize::from(l)
            }
            _ => true,
        }
    }

    /// Where the root (or, in function calls, a function's arguments)
    /// cannot be finished: the path of the first required part that
    /// cannot, for the error that refuses the schema.
    pub fn dead_path(&self, root: NodeId, depth: usize) -> Option<String> {
        if self.fits(root, depth) {
            return None;
        }
        let mut path = String::new();
        let (mut id, mut depth) = (root, depth);
        let mut seen = vec![id];
        // Each step goes one level deeper: the walk is short.
        for _ in 0..=MAX_REF_DEPTH {
            let next = match self.node(id) {
                Node::Object(o) => o
                    .props
                    .iter()
                    .find(|p| p.required && !self.fits(p.node, depth + 1))
                    .map(|p| {
                        path.push('/');
                        path.push_str(&p.name);
                        p.node
                    }),
                Node::Array { item, .. } => {
                    path.push_str("/items");
                    Some(*item)
                }
                _ => None,
            };
            match next {
                // Back where it was: the value nests itself without end.
                Some(n) if seen.iter().any(|&s| self.same(s, n)) => break,
                Some(n) => {
                    seen.push(n);
                    id = n;
                    depth += 1;
                }
                None => break,
            }
        }
        if path.is_empty() {
            path.push('/');
        }
        Some(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_max_matches_a_scan() {
        let items: Vec<u8> = (0..37u32).map(|i| ((i * 7919) % 13) as u8).collect();
        let m = RangeMax::new(&items);
        for a in 0..=items.len() {
            for b in a..=items.len() {
                let want = items[a..b].iter().copied().max().unwrap_or(0);
                assert_eq!(m.max(a..b), want, "{a}..{b}");
            }
        }
        assert_eq!(RangeMax::new(&[]).max(0..0), 0);
    }
}
