//! The KV cache: keys and values of every past position, per layer, stored
//! as f16 like llama.cpp's default cache (half the memory of f32, and the
//! same rounding llama.cpp applies), preallocated for the whole context so
//! that decoding allocates nothing (pages are touched only as positions
//! fill up).
//!
//! A layer's cache may hold fewer slots than the context (sliding-window
//! layers): position `p` lives in slot `p % capacity`. Such a ring can only
//! be rewound a little: going back to position `L` needs keys before `L`
//! that later positions may have overwritten, so [`KvCache::truncate`] keeps
//! nothing when asked to rewind further than [`KvCache::set_max_rewind`]
//! allows.

use ferrite_kernels::attend::F16Rows;
use ferrite_kernels::quant::f16_bits_from_f32;

/// How a cache stores keys and values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvType {
    /// f16, as llama.cpp's default cache: half the memory.
    F16,
    /// f32, exact: for models whose attention weights are f32, where the
    /// f16 rounding (~1e-3 on the logits) would be the largest error.
    F32,
}

/// Keys and values of one layer: `capacity` slots of `kv_dim` values each,
/// in f16 (`k`, `v`) or in f32 (`k32`, `v32`; the others then empty).
#[derive(Clone)]
pub struct LayerKv {
    kv_dim: usize,
    capacity: usize,
    k: Vec<u16>,   // (capacity, kv_dim) f16 bits
    v: Vec<u16>,   // (capacity, kv_dim) f16 bits
    k32: Vec<f32>, // (capacity, kv_dim)
    v32: Vec<f32>, // (capacity, kv_dim)
}

impl LayerKv {
    pub fn new(kv_dim: usize, capacity: usize) -> LayerKv {
        LayerKv::with_type(kv_dim, capacity, KvType::F16)
    }

    pub fn with_type(kv_dim: usize, capacity: usize, ty: KvType) -> LayerKv {
        let (n16, n32) = match ty {
            KvType::F16 => (kv_dim * capacity, 0),
            KvType::F32 => (0, kv_dim * capacity),
        };
        LayerKv {
            kv_dim,
            capacity,
            k: vec![0; n16],
            v: vec![0; n16],
            k32: vec![0.0; n32],
            v32: vec![0.0; n32],
        }
    }

    /// Whether keys and values are kept in f32 (read them with
    /// [`LayerKv::key_f32`] / [`LayerKv::value_f32`]).
    pub fn is_f32(&self) -> bool {
        self.k.is_empty() && !self.k32.is_empty()
    }

    /// The key of position `pos` in an f32 cache (`kv_dim` values).
    pub fn key_f32(&self, pos: usize) -> &[f32] {
        &self.k32[self.slot(pos)]
    }

    /// The value of position `pos` in an f32 cache (`kv_dim` values).
    pub fn value_f32(&self, pos: usize) -> &[f32] {
        &self.v32[self.slot(pos)]
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
        if self.is_f32() {
            self.k32[slot.clone()].copy_from_slice(&k[..self.kv_dim]);
            self.v32[slot].copy_from_slice(&v[..self.kv_dim]);
            return;
        }
        for (d, &x) in self.k[slot.clone()].iter_mut().zip(k) {
            *d = f16_bits_from_f32(x);
        }
        for (d, &x) in self.v[slot].iter_mut().zip(v) {
            *d = f16_bits_from_f32(x);
        }
    }

    /// The keys of positions `positions` (at most `capacity` of them), from
    /// value `offset` of each on: one run of rows, or two where the ring
    /// wraps, in position order.
    pub fn key_runs(&self, positions: std::ops::Range<usize>, offset: usize) -> [F16Rows<'_>; 2] {
        self.runs(&self.k, positions, offset)
    }

    /// As [`LayerKv::key_runs`], for the values.
    pub fn value_runs(&self, positions: std::ops::Range<usize>, offset: usize) -> [F16Rows<'_>; 2] {
        self.runs(&self.v, positions, offset)
    }

    fn runs<'a>(
        &self,
        table: &'a [u16],
        positions: std::ops::Range<usize>,
        offset: usize,
    ) -> [F16Rows<'a>; 2] {
        let n = positions.len().min(self.capacity);
        let first = positions.start % self.capacity;
        let head = n.min(self.capacity - first);
        let bytes = u16_bytes(table);
        let stride = 2 * self.kv_dim;
        let run = |slot: usize, n: usize| F16Rows {
            bytes: bytes.get(slot * stride + 2 * offset..).unwrap_or_default(),
            stride,
            n,
        };
        [run(first, head), run(0, n - head)]
    }

    /// A copy holding the first `n` positions' slots (the rest zero, in
    /// fresh memory the system maps only when written).
    fn fork(&self, n: usize) -> LayerKv {
        let used = n.min(self.capacity) * self.kv_dim;
        LayerKv {
            kv_dim: self.kv_dim,
            capacity: self.capacity,
            k: prefix_copy(&self.k, used),
            v: prefix_copy(&self.v, used),
            k32: prefix_copy(&self.k32, used),
            v32: prefix_copy(&self.v32, used),
        }
    }

    /// Bytes one position's key (or value) takes as stored: `kv_dim`
    /// values in f16 or f32.
    pub fn row_bytes(&self) -> usize {
        self.kv_dim * if self.is_f32() { 4 } else { 2 }
    }

    /// The key and value bytes stored in the slot of position `pos`, as
    /// they are (f16 or f32, little-endian); whether that slot still holds
    /// `pos` is [`KvCache::stored_rows`]'s to say.
    fn raw(&self, pos: usize) -> (&[u8], &[u8]) {
        let slot = self.slot(pos);
        if self.is_f32() {
            (
                f32_bytes(&self.k32[slot.clone()]),
                f32_bytes(&self.v32[slot]),
            )
        } else {
            (u16_bytes(&self.k[slot.clone()]), u16_bytes(&self.v[slot]))
        }
    }

    /// Stores position `pos` from bytes [`KvCache::stored_rows`] returned
    /// (of a cache of the same model): a bit-exact copy, no conversion.
    /// Panics unless `k` and `v` are [`LayerKv::row_bytes`] long.
    pub fn store_raw(&mut self, pos: usize, k: &[u8], v: &[u8]) {
        let slot = self.slot(pos);
        if self.is_f32() {
            f32_bytes_mut(&mut self.k32[slot.clone()]).copy_from_slice(k);
            f32_bytes_mut(&mut self.v32[slot]).copy_from_slice(v);
        } else {
            u16_bytes_mut(&mut self.k[slot.clone()]).copy_from_slice(k);
            u16_bytes_mut(&mut self.v[slot]).copy_from_slice(v);
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

/// The cache of every layer, and how many positions it holds. Cloning it
/// forks the sequence (beam search, a shared prompt prefix).
#[derive(Clone)]
pub struct KvCache {
    pub layers: Vec<LayerKv>,
    /// Positions the model may attend to at most (the context size).
    pub n_ctx: usize,
    /// Positions filled so far: the next token goes at position `len`.
    pub len: usize,
    /// Most positions [`KvCache::truncate`] may drop and still keep the rest.
    max_rewind: usize,
    /// Positions written since the cache last started over (at least `len`
    /// after a truncation: slots past `len` may still hold later positions).
    written: usize,
}

/// An empty cache with no room (a placeholder a search's spare slots start
/// from; it is replaced by a clone before use).
impl Default for KvCache {
    fn default() -> Self {
        KvCache::new(0, 0, &[])
    }
}

impl KvCache {
    /// A cache for `n_ctx` positions; `capacities[l]` slots for layer `l`.
    pub fn new(kv_dim: usize, n_ctx: usize, capacities: &[usize]) -> KvCache {
        KvCache::with_type(kv_dim, n_ctx, capacities, KvType::F16)
    }

    /// As [`KvCache::new`], storing keys and values as `ty`.
    pub fn with_type(kv_dim: usize, n_ctx: usize, capacities: &[usize], ty: KvType) -> KvCache {
        KvCache {
            layers: capacities
                .iter()
                .map(|&c| LayerKv::with_type(kv_dim, c, ty))
                .collect(),
            n_ctx,
            len: 0,
            max_rewind: usize::MAX,
            written: 0,
        }
    }

    /// A fork of the sequence as `clone` makes, but copying only the
    /// positions written (`clone` copies, and so commits, the whole
    /// context's memory): what the server's `n > 1` choices start from.
    pub fn fork(&self) -> KvCache {
        let n = self.written.max(self.len);
        KvCache {
            layers: self.layers.iter().map(|l| l.fork(n)).collect(),
            n_ctx: self.n_ctx,
            len: self.len,
            max_rewind: self.max_rewind,
            written: self.written,
        }
    }

    /// The key and value bytes (f16 or f32 as stored) of position `pos`
    /// in layer `layer`, or `None` when the cache does not hold them: not
    /// written yet, or overwritten in a ring layer. Copying positions
    /// `0..n` of every layer into an empty cache of the same model with
    /// [`LayerKv::store_raw`], in position order, then setting `len = n`,
    /// gives the cache that running those `n` tokens would (what the
    /// server's prefix cache does).
    pub fn stored_rows(&self, layer: usize, pos: usize) -> Option<(&[u8], &[u8])> {
        let l = self.layers.get(layer)?;
        let end = self.written.max(self.len);
        (pos < end && pos + l.capacity >= end).then(|| l.raw(pos))
    }

    /// Limits how far back [`KvCache::truncate`] may go, counted from the
    /// furthest position written: a model whose ring layers keep `c` slots
    /// for a window of `w` positions can rewind `c - w + 1`.
    pub fn set_max_rewind(&mut self, n: usize) {
        self.max_rewind = n;
    }

    /// Forgets positions from `len` on and returns how many it keeps: the
    /// first `len`, or none when a ring layer may have overwritten keys that
    /// the positions after `len` would attend to (then the caller must
    /// recompute from position 0).
    pub fn truncate(&mut self, len: usize) -> usize {
        self.written = self.written.max(self.len);
        if self.written - len.min(self.written) > self.max_rewind {
            self.written = 0;
            self.len = 0;
        } else {
            self.len = self.len.min(len);
        }
        self.len
    }
}

/// A zeroed vector as long as `src` (allocated zeroed, so its pages stay
/// unmapped until written) with `src`'s first `used` values.
fn prefix_copy<T: Copy + Default>(src: &[T], used: usize) -> Vec<T> {
    let mut d = vec![T::default(); src.len()];
    let used = used.min(src.len());
    d[..used].copy_from_slice(&src[..used]);
    d
}

/// The bytes of a u16 slice (little-endian: ferrite builds only for
/// little-endian targets, see lib.rs).
fn u16_bytes(x: &[u16]) -> &[u8] {
    // SAFETY: u16 has no padding and every byte may be read as u8; same
    // memory, length in bytes, lifetime tied to the input borrow.
    unsafe { std::slice::from_raw_parts(x.as_ptr().cast::<u8>(), std::mem::size_of_val(x)) }
}

/// The bytes of an f32 slice (little-endian, as `u16_bytes`).
fn f32_bytes(x: &[f32]) -> &[u8] {
    // SAFETY: f32 has no padding and every byte may be read as u8; same
    // memory, length in bytes, lifetime tied to the input borrow.
    unsafe { std::slice::from_raw_parts(x.as_ptr().cast::<u8>(), std::mem::size_of_val(x)) }
}

/// The bytes of a u16 slice, writable.
fn u16_bytes_mut(x: &mut [u16]) -> &mut [u8] {
    // SAFETY: every byte pattern is a valid u16, u8 has alignment 1; same
    // memory, length in bytes, exclusive borrow carried over.
    unsafe { std::slice::from_raw_parts_mut(x.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(x)) }
}

/// The bytes of an f32 slice, writable.
fn f32_bytes_mut(x: &mut [f32]) -> &mut [u8] {
    // SAFETY: every byte pattern is a valid f32, u8 has alignment 1; same
    // memory, length in bytes, exclusive borrow carried over.
    unsafe { std::slice::from_raw_parts_mut(x.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(x)) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_keeps_nothing_past_the_rewind_limit() {
        let mut cache = KvCache::new(4, 100, &[100, 10]);
        cache.set_max_rewind(5);
        cache.len = 40;
        assert_eq!(cache.truncate(50), 40);
        assert_eq!(cache.truncate(36), 36);
        cache.len = 38;
        // 40 positions were written: going back to 35 drops 5, to 34 six.
        assert_eq!(cache.truncate(35), 35);
        assert_eq!(cache.truncate(34), 0);
        cache.len = 20;
        assert_eq!(cache.truncate(15), 15);
        let mut unlimited = KvCache::new(4, 100, &[100]);
        unlimited.layers[0].store(3, &[1.0; 4], &[2.0; 4]);
        unlimited.len = 4;
        let f = unlimited.fork();
        assert_eq!(f.layers[0].key(3), unlimited.layers[0].key(3));
        assert_eq!(f.layers[0].value(3), unlimited.layers[0].value(3));
        assert_eq!(f.layers[0].k.len(), unlimited.layers[0].k.len());
        assert_eq!(f.len, 4);
        unlimited.len = 90;
        assert_eq!(unlimited.truncate(1), 1);
    }

    #[test]
    fn stored_rows_copy_bit_exactly_and_only_what_is_held() {
        for ty in [KvType::F16, KvType::F32] {
            // Layer 1 is a ring of 4 slots.
            let mut a = KvCache::with_type(3, 8, &[8, 4], ty);
            for p in 0..6 {
                let k = [p as f32 + 0.1, -1e-9, 65504.0 * 2.0];
                let v = [f32::MIN_POSITIVE, p as f32, -0.0];
                for l in &mut a.layers {
                    l.store(p, &k, &v);
                }
            }
            assert!(
                a.stored_rows(0, 0).is_none(),
                "nothing counted as written yet"
            );
            a.len = 6;
            assert!(a.stored_rows(0, 6).is_none());
            assert!(a.stored_rows(2, 0).is_none());
            // The ring holds positions 2..6 only.
            assert!(a.stored_rows(1, 1).is_none());
            assert!(a.stored_rows(1, 2).is_some());
            let mut b = KvCache::with_type(3, 8, &[8, 8], ty);
            for p in 0..6 {
                let l = if p < 2 { 0 } else { 1 };
                for layer in 0..=l {
                    let (k, v) = a.stored_rows(layer, p).unwrap();
                    assert_eq!(k.len(), b.layers[layer].row_bytes());
                    let (k, v) = (k.to_vec(), v.to_vec());
                    b.layers[layer].store_raw(p, &k, &v);
                }
            }
            b.len = 6;
            for p in 0..6 {
                assert_eq!(b.stored_rows(0, p), a.stored_rows(0, p));
            }
            for p in 2..6 {
                assert_eq!(b.stored_rows(1, p), a.stored_rows(1, p));
            }
        }
    }
}
