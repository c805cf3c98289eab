//! The KV cache: keys and values of every past position, per layer, stored
//! as f16 (as llama.cpp's default cache does), preallocated for the whole
//! context so that decoding allocates nothing.
//!
//! A layer's cache may hold fewer slots than the context (sliding-window
//! layers): position `p` lives in slot `p % capacity`.

use half::f16;

/// Keys and values of one layer: `capacity` slots of `kv_dim` values each.
pub struct LayerKv {
    kv_dim: usize,
    capacity: usize,
    k: Vec<f16>, // (capacity, kv_dim)
    v: Vec<f16>, // (capacity, kv_dim)
}

impl LayerKv {
    pub fn new(kv_dim: usize, capacity: usize) -> LayerKv {
        LayerKv {
            kv_dim,
            capacity,
            k: vec![f16::ZERO; kv_dim * capacity],
            v: vec![f16::ZERO; kv_dim * capacity],
        }
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    fn slot(&self, pos: usize) -> std::ops::Range<usize> {
        let s = pos % self.capacity;
        s * self.kv_dim..(s + 1) * self.kv_dim
    }

    /// Stores the key and value of position `pos` (`kv_dim` values each).
    pub fn store(&mut self, pos: usize, k: &[f32], v: &[f32]) {
        let slot = self.slot(pos);
        for (d, &s) in self.k[slot.clone()].iter_mut().zip(k) {
            *d = f16::from_f32(s);
        }
        for (d, &s) in self.v[slot].iter_mut().zip(v) {
            *d = f16::from_f32(s);
        }
    }

    /// The key of position `pos`.
    pub fn key(&self, pos: usize) -> &[f16] {
        &self.k[self.slot(pos)]
    }

    /// The value of position `pos`.
    pub fn value(&self, pos: usize) -> &[f16] {
        &self.v[self.slot(pos)]
    }
}

/// The cache of every layer, and how many positions it holds.
pub struct KvCache {
    pub layers: Vec<LayerKv>,
    /// Positions the model may attend to at most (the context size).
    pub n_ctx: usize,
    /// Positions filled so far: the next token goes at position `len`.
    pub len: usize,
}

impl KvCache {
    /// A cache for `n_ctx` positions; `capacities[l]` slots for layer `l`.
    pub fn new(kv_dim: usize, n_ctx: usize, capacities: &[usize]) -> KvCache {
        KvCache {
            layers: capacities
                .iter()
                .map(|&c| LayerKv::new(kv_dim, c))
                .collect(),
            n_ctx,
            len: 0,
        }
    }

    /// Forgets positions from `len` on (keeps the first `len`).
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }
}
