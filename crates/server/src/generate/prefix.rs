//! The prefix cache: keys and values of prompt prefixes already computed,
//! kept as the KV cache's own blocks of [`BLOCK`] positions (shared, not
//! copied: a block stays in memory once however many sequences and cache
//! entries hold it) so that a request whose prompt starts with the same
//! tokens (a system prompt, few-shot examples, the earlier turns of a
//! chat) starts from them instead of running them again.
//!
//! Blocks form a tree: a block is found by its parent block and its own
//! tokens (compared exactly, never by hash alone), so a block stands for
//! the whole prefix up to its end. Each block counts its children and the
//! requests that hold it (from admission to the end of their prefill);
//! only a block nobody holds and with no children may be evicted, least
//! recently used first, whenever the blocks' bytes would pass the budget.
//!
//! A prefix taken from here gives the same bits as computing it: the
//! blocks are the ones the forward pass stored into (a sequence that
//! stores into a shared block copies it first), and the decoder's prefill
//! is bit-identical however it is split into chunks.

use std::collections::HashMap;

use ferrite::serving::{KvCache, KvPrefixBlock, KV_BLOCK};

/// Positions per block.
pub const BLOCK: usize = KV_BLOCK;

type Id = u64;

/// The parent of the first block of every prompt.
const ROOT: Id = 0;

struct Node {
    parent: Id,
    tokens: Vec<u32>,
    /// Every layer's block of these positions, shared with the caches
    /// that ran or reuse them.
    blocks: KvPrefixBlock,
    /// Their bytes.
    bytes: usize,
    children: usize,
    holders: usize,
    last_used: u64,
}

/// What [`PrefixCache::lookup`] found.
pub struct Hit {
    /// Prompt positions copied into the cache.
    pub positions: usize,
    /// The block held for the request (the last one copied), to pass to
    /// [`PrefixCache::insert`] or [`PrefixCache::release`].
    pub held: Option<Id>,
}

/// Counters for `/metrics`.
#[derive(Default, Clone, Copy, Debug)]
pub struct Stats {
    pub bytes: usize,
    pub evicted_blocks: u64,
}

pub struct PrefixCache {
    budget: usize,
    nodes: HashMap<Id, Node>,
    index: HashMap<(Id, Vec<u32>), Id>,
    next_id: Id,
    clock: u64,
    pub stats: Stats,
}

impl PrefixCache {
    /// An empty cache whose blocks may take `budget` bytes (0: off).
    pub fn new(budget: usize) -> PrefixCache {
        PrefixCache {
            budget,
            nodes: HashMap::new(),
            index: HashMap::new(),
            next_id: ROOT + 1,
            clock: 0,
            stats: Stats::default(),
        }
    }

    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    /// Whether `cache` can take blocks from here: every layer must keep
    /// every position (no ring of a sliding window shorter than the
    /// cache), so that a block's positions are all still held when the
    /// prompt has run.
    fn usable(&self, cache: &KvCache) -> bool {
        self.budget > 0 && cache.keeps_every_position()
    }

    /// Shares the longest cached prefix of `prompt` (whole blocks, leaving
    /// at least its last token to run, whose logits are needed) into the
    /// empty `cache`, sets its length, and holds the last block shared.
    pub fn lookup(&mut self, prompt: &[u32], cache: &mut KvCache) -> Hit {
        let mut hit = Hit {
            positions: 0,
            held: None,
        };
        if !self.usable(cache) || !cache.is_empty() {
            return hit;
        }
        let mut parent = ROOT;
        let mut chain = Vec::new();
        for block in prompt[..prompt.len().saturating_sub(1)].chunks_exact(BLOCK) {
            // Looking up needs an owned key; blocks are 16 tokens.
            match self.index.get(&(parent, block.to_vec())) {
                Some(&id) => {
                    chain.push(id);
                    parent = id;
                }
                None => break,
            }
        }
        let mut blocks = Vec::with_capacity(chain.len());
        for id in &chain {
            let now = self.tick();
            let node = self.nodes.get_mut(id).expect("indexed blocks exist");
            node.last_used = now;
            blocks.push(node.blocks.clone());
        }
        if let Some(&last) = chain.last() {
            hit.positions = cache.share_prefix(&blocks);
            if hit.positions > 0 {
                self.nodes.get_mut(&last).expect("held").holders += 1;
                hit.held = Some(last);
            }
        }
        hit
    }

    /// Lets go of a block [`PrefixCache::lookup`] held.
    pub fn release(&mut self, held: Option<Id>) {
        if let Some(node) = held.and_then(|id| self.nodes.get_mut(&id)) {
            node.holders -= 1;
        }
    }

    /// After `prompt` has run into `cache`: stores its whole blocks that
    /// are not cached yet (while the budget allows, evicting the least
    /// recently used blocks nobody holds), and lets go of `held`.
    pub fn insert(&mut self, prompt: &[u32], cache: &KvCache, held: Option<Id>) {
        self.insert_blocks(prompt, cache);
        self.release(held);
    }

    fn insert_blocks(&mut self, prompt: &[u32], cache: &KvCache) {
        if !self.usable(cache) {
            return;
        }
        let block_bytes = cache.prefix_block_bytes();
        let mut parent = ROOT;
        for (b, block) in prompt.chunks_exact(BLOCK).enumerate() {
            if (b + 1) * BLOCK > cache.len() {
                return;
            }
            let key = (parent, block.to_vec());
            if let Some(&id) = self.index.get(&key) {
                let now = self.tick();
                if let Some(n) = self.nodes.get_mut(&id) {
                    n.last_used = now;
                }
                parent = id;
                continue;
            }
            // The parent is used now: it must not be evicted to make room.
            if let Some(n) = self.nodes.get_mut(&parent) {
                n.holders += 1;
            }
            let room = self.make_room(block_bytes);
            if let Some(n) = self.nodes.get_mut(&parent) {
                n.holders -= 1;
            }
            if !room {
                return;
            }
            let Some(blocks) = cache.prefix_block(b) else {
                return;
            };
            let id = self.next_id;
            self.next_id += 1;
            if let Some(n) = self.nodes.get_mut(&parent) {
                n.children += 1;
            }
            let now = self.tick();
            self.nodes.insert(
                id,
                Node {
                    parent,
                    tokens: key.1.clone(),
                    blocks,
                    bytes: block_bytes,
                    children: 0,
                    holders: 0,
                    last_used: now,
                },
            );
            self.index.insert(key, id);
            self.stats.bytes += block_bytes;
            parent = id;
        }
    }

    /// Evicts unheld leaf blocks, least recently used first, until `bytes`
    /// more fit in the budget; false when they cannot.
    fn make_room(&mut self, bytes: usize) -> bool {
        if bytes > self.budget {
            return false;
        }
        while self.stats.bytes + bytes > self.budget {
            let victim = self
                .nodes
                .iter()
                .filter(|(_, n)| n.children == 0 && n.holders == 0)
                .min_by_key(|(_, n)| n.last_used)
                .map(|(&id, _)| id);
            let Some(id) = victim else {
                return false;
            };
            let node = self.nodes.remove(&id).expect("found above");
            self.index.remove(&(node.parent, node.tokens));
            if let Some(p) = self.nodes.get_mut(&node.parent) {
                p.children -= 1;
            }
            self.stats.bytes -= node.bytes;
            self.stats.evicted_blocks += 1;
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A one-layer cache with position `p`'s key and value all `p`.
    fn filled(n: usize, ctx: usize) -> KvCache {
        let mut c = KvCache::new(2, ctx, &[ctx]);
        for p in 0..n {
            c.push(&[(&[p as f32; 2], &[-(p as f32); 2])]);
        }
        c
    }

    const BLOCK_BYTES: usize = BLOCK * 2 * 4;

    #[test]
    fn reuses_whole_blocks_and_evicts_unheld_leaves_first() {
        let prompt: Vec<u32> = (0..40).collect();
        let mut pc = PrefixCache::new(3 * BLOCK_BYTES);
        let mut empty = KvCache::new(2, 64, &[64]);
        assert_eq!(pc.lookup(&prompt, &mut empty).positions, 0);
        pc.insert(&prompt, &filled(40, 64), None);
        assert_eq!(pc.stats.bytes, 2 * BLOCK_BYTES);

        // 32 positions come back, bit for bit; the last token is left.
        let mut c = KvCache::new(2, 64, &[64]);
        let hit = pc.lookup(&prompt[..33], &mut c);
        assert_eq!((hit.positions, c.len()), (32, 32));
        let full = filled(40, 64);
        for p in 0..32 {
            assert_eq!(c.stored_rows(0, p), full.stored_rows(0, p));
        }
        // A prompt of exactly 32 tokens reuses 16: its last must run.
        let mut c2 = KvCache::new(2, 64, &[64]);
        let h2 = pc.lookup(&prompt[..32], &mut c2);
        assert_eq!(h2.positions, 16);
        pc.release(h2.held);

        // Another prefix: its first block fits; its second does not, as
        // the held chain (blocks 0 and 1) and its own parent cannot go.
        let other: Vec<u32> = (100..140).collect();
        pc.insert(&other, &filled(40, 64), None);
        assert_eq!(
            (pc.stats.bytes, pc.stats.evicted_blocks),
            (3 * BLOCK_BYTES, 0)
        );
        // Released, the prompt's last block is the least recently used leaf.
        pc.release(hit.held);
        pc.insert(&other, &filled(40, 64), None);
        assert_eq!(
            (pc.stats.bytes, pc.stats.evicted_blocks),
            (3 * BLOCK_BYTES, 1)
        );
        let mut c3 = KvCache::new(2, 64, &[64]);
        assert_eq!(pc.lookup(&prompt, &mut c3).positions, 16);
        assert_eq!(
            pc.lookup(&other, &mut KvCache::new(2, 64, &[64])).positions,
            32
        );

        // A tiny budget stores nothing, and nothing breaks.
        let mut tiny = PrefixCache::new(BLOCK_BYTES - 1);
        tiny.insert(&prompt, &filled(40, 64), None);
        assert_eq!(tiny.stats.bytes, 0);
        // A ring cache (sliding window shorter than the context) is left alone.
        let mut ring = KvCache::new(2, 64, &[8]);
        assert_eq!(pc.lookup(&prompt, &mut ring).positions, 0);
    }
}
