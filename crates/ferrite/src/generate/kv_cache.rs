//! The KV cache: keys and values of every past position, per layer, stored
//! as f16 like llama.cpp's default cache (half the memory of f32, and the
//! same rounding llama.cpp applies), preallocated for the whole context so
//! that decoding allocates nothing (pages are touched only as positions
//! fill up).
//!
//! A layer's cache may hold fewer slots than the context (sliding-window
//! layers): position `p` lives in slot `p % capacity`.

use ferrite_kernels::quant::f16_bits_from_f32;

/// Keys and values of one layer: `capacity` slots of `kv_dim` values each.
pub struct LayerKv {
    kv_dim: usize,
    capacity: usize,
    k: Vec<u16>, // (capacity, kv_dim) f16 bits
    v: Vec<u16>, // (capacity, kv_dim) f16 bits
}

impl LayerKv {
    pub fn new(kv_dim: usize, capacity: usize) -> LayerKv {
        LayerKv {
            kv_dim,
            capacity,
            k: vec![0; kv_dim * capacity],
            v: vec![0; kv_dim * capacity],
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
        for (d, &x) in self.k[slot.clone()].iter_mut().zip(k) {
            *d = f16_bits_from_f32(x);
        }
        for (d, &x) in self.v[slot].iter_mut().zip(v) {
            *d = f16_bits_from_f32(x);
        }
    }

    /// The key of position `pos`: `kv_dim` little-endian f16 values.
    pub fn key(&self, pos: usize) -> &[u8] {
        u16_bytes(&self.k[self.slot(pos)])
    }

    /// The value of position `pos`: `kv_dim` little-endian f16 values.
    pub fn value(&self, pos: usize) -> &[u8] {
        u16_bytes(&self.v[self.slot(pos)])
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

/// The bytes of a u16 slice (little-endian: ferrite builds only for
/// little-endian targets, see lib.rs).
fn u16_bytes(x: &[u16]) -> &[u8] {
    // SAFETY: u16 has no padding and every byte may be read as u8; same
    // memory, length in bytes, lifetime tied to the input borrow.
    unsafe { std::slice::from_raw_parts(x.as_ptr().cast::<u8>(), std::mem::size_of_val(x)) }
}
