//! The KV cache: keys and values of every past position, per layer, stored
//! as f16 like llama.cpp's default cache (half the memory of f32, and the
//! same rounding llama.cpp applies).
//!
//! Paged: a layer's slots live in blocks of [`KV_BLOCK`] positions (the
//! decoders'; one position for the encoder-decoders' beam hypotheses,
//! [`KvCache::rows`]), each allocated when its first position is stored
//! and counted in a [`KvPool`]. Blocks are reference-counted and copied on
//! write: cloning a cache (a fork: `n > 1` choices, beam hypotheses)
//! shares every block, and a block is copied only when one of its holders
//! stores a position in it; the server's prefix cache holds the same
//! blocks. A block's memory is freed when its last holder drops it.
//! Attention reads a layer as runs of rows, one per block, in position
//! order (f16), or row by row (f32): the kernels sum over the rows in that
//! order whatever the runs, so paging changes no bits.
//!
//! The block size is what a fork copies: a hypothesis forked mid-block
//! copies that block at its next store. Decoders fork rarely (a prompt's
//! `n > 1` choices) and read runs of 16 rows; a beam search forks several
//! hypotheses every step, so its caches use one-position blocks: a fork
//! shares every row and never copies one.
//!
//! A layer's cache may hold fewer slots than the context (sliding-window
//! layers): position `p` lives in slot `p % capacity`. Such a ring can only
//! be rewound a little: going back to position `L` needs keys before `L`
//! that later positions may have overwritten, so [`KvCache::truncate`] keeps
//! nothing when asked to rewind further than [`KvCache::set_max_rewind`]
//! allows.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use ferrite_kernels::attend::F16Rows;
use ferrite_kernels::quant::f16_bits_from_f32;

/// Positions per block of a decoder's cache.
pub const KV_BLOCK: usize = 16;

/// How a cache stores keys and values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvType {
    /// f16, as llama.cpp's default cache: half the memory.
    F16,
    /// f32, exact: for models whose attention weights are f32, where the
    /// f16 rounding (~1e-3 on the logits) would be the largest error.
    F32,
}

/// Where the blocks of some caches count their bytes: every block made
/// for a cache of the pool (new, or a copy on write) adds its bytes, and
/// takes them back when it is freed.
#[derive(Clone, Default, Debug)]
pub struct KvPool(Arc<AtomicUsize>);

impl KvPool {
    /// A pool that has counted no bytes yet.
    pub fn new() -> KvPool {
        KvPool::default()
    }

    /// Bytes of the pool's blocks alive now.
    pub fn bytes(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }
}

/// The positions of one block of a layer (the layer's block size, e.g.
/// [`KV_BLOCK`]): their keys then their values (`kv_dim` values each), in
/// f16 bits (`f16`) or f32 (`f32`; the other one empty).
#[derive(Debug)]
pub struct KvBlock {
    f16: Vec<u16>,
    f32: Vec<f32>,
    pool: KvPool,
}

impl KvBlock {
    fn new(kv_dim: usize, rows: usize, ty: KvType, pool: &KvPool) -> KvBlock {
        let n = 2 * rows * kv_dim;
        let (n16, n32) = match ty {
            KvType::F16 => (n, 0),
            KvType::F32 => (0, n),
        };
        KvBlock::counted(vec![0; n16], vec![0.0; n32], pool.clone())
    }

    fn counted(f16: Vec<u16>, f32: Vec<f32>, pool: KvPool) -> KvBlock {
        let b = KvBlock { f16, f32, pool };
        b.pool.0.fetch_add(b.bytes(), Ordering::Relaxed);
        b
    }

    /// Bytes of keys and values the block holds.
    pub fn bytes(&self) -> usize {
        std::mem::size_of_val(&self.f16[..]) + std::mem::size_of_val(&self.f32[..])
    }
}

/// A copy on write: counted in the same pool.
impl Clone for KvBlock {
    fn clone(&self) -> KvBlock {
        KvBlock::counted(self.f16.clone(), self.f32.clone(), self.pool.clone())
    }
}

impl Drop for KvBlock {
    fn drop(&mut self) {
        self.pool.0.fetch_sub(self.bytes(), Ordering::Relaxed);
    }
}

/// Keys and values of one layer: `capacity` slots of `kv_dim` values each,
/// in blocks of `1 << shift` slots (`None`, or past the end of `blocks`,
/// until a slot of it is stored).
#[derive(Clone)]
pub struct LayerKv {
    kv_dim: usize,
    capacity: usize,
    ty: KvType,
    pool: KvPool,
    shift: u32,
    blocks: Vec<Option<Arc<KvBlock>>>,
}

impl LayerKv {
    #[cfg(any(test, feature = "internals"))]
    pub fn new(kv_dim: usize, capacity: usize) -> LayerKv {
        LayerKv::with_type(kv_dim, capacity, KvType::F16)
    }

    #[cfg(any(test, feature = "internals"))]
    pub fn with_type(kv_dim: usize, capacity: usize, ty: KvType) -> LayerKv {
        LayerKv::in_pool(kv_dim, capacity, ty, &KvPool::new())
    }

    /// As [`LayerKv::with_type`], its blocks counted in `pool`.
    pub fn in_pool(kv_dim: usize, capacity: usize, ty: KvType, pool: &KvPool) -> LayerKv {
        LayerKv::blocks_of(KV_BLOCK, kv_dim, capacity, ty, pool)
    }

    /// As [`LayerKv::in_pool`], in blocks of `rows` positions (a power of
    /// two).
    fn blocks_of(
        rows: usize,
        kv_dim: usize,
        capacity: usize,
        ty: KvType,
        pool: &KvPool,
    ) -> LayerKv {
        assert!(rows.is_power_of_two(), "blocks of a power of two rows");
        LayerKv {
            kv_dim,
            capacity,
            ty,
            pool: pool.clone(),
            shift: rows.trailing_zeros(),
            blocks: Vec::new(),
        }
    }

    /// Positions per block.
    fn block_rows(&self) -> usize {
        1 << self.shift
    }

    /// Whether keys and values are kept in f32 (read them with
    /// [`LayerKv::key_f32`] / [`LayerKv::value_f32`]).
    pub fn is_f32(&self) -> bool {
        self.ty == KvType::F32
    }

    /// The key of position `pos` in an f32 cache (`kv_dim` values).
    pub fn key_f32(&self, pos: usize) -> &[f32] {
        let (b, r) = self.locate(pos);
        &self.stored(b).f32[r * self.kv_dim..(r + 1) * self.kv_dim]
    }

    /// The value of position `pos` in an f32 cache (`kv_dim` values).
    pub fn value_f32(&self, pos: usize) -> &[f32] {
        let (b, r) = self.locate(pos);
        let r = self.block_rows() + r;
        &self.stored(b).f32[r * self.kv_dim..(r + 1) * self.kv_dim]
    }

    #[cfg(any(test, feature = "internals"))]
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The block and row within it of position `pos`'s slot.
    fn locate(&self, pos: usize) -> (usize, usize) {
        let s = if pos < self.capacity {
            pos
        } else {
            pos % self.capacity
        };
        (s >> self.shift, s & (self.block_rows() - 1))
    }

    /// Block `b`, which must hold a stored position (attention reads only
    /// positions stored before).
    fn stored(&self, b: usize) -> &KvBlock {
        self.blocks
            .get(b)
            .and_then(Option::as_deref)
            .expect("KV cache read of a position never stored")
    }

    /// The block holding position `pos`, ready to be written (allocated on
    /// first use, copied first when other caches share it), with the
    /// offsets of its key row and value row.
    fn writable(&mut self, pos: usize) -> (&mut KvBlock, usize, usize) {
        let (kv_dim, ty, rows) = (self.kv_dim, self.ty, self.block_rows());
        let (b, r) = self.locate(pos);
        let LayerKv { blocks, pool, .. } = self;
        if b >= blocks.len() {
            blocks.resize(b + 1, None);
        }
        let block =
            blocks[b].get_or_insert_with(|| Arc::new(KvBlock::new(kv_dim, rows, ty, pool)));
        (Arc::make_mut(block), r * kv_dim, (rows + r) * kv_dim)
    }

    /// The table entry of block `b`, the table grown to hold it.
    fn slot(&mut self, b: usize) -> &mut Option<Arc<KvBlock>> {
        if b >= self.blocks.len() {
            self.blocks.resize(b + 1, None);
        }
        &mut self.blocks[b]
    }

    /// Stores the key and value of position `pos` (`kv_dim` values each),
    /// allocating its block, or copying it first when other caches share
    /// it.
    pub fn store(&mut self, pos: usize, k: &[f32], v: &[f32]) {
        let (kv_dim, ty) = (self.kv_dim, self.ty);
        if self.shift == 0 && ty == KvType::F32 {
            // A one-position block is made from the row itself (no zeroed
            // block to overwrite).
            let (b, _) = self.locate(pos);
            if self.blocks.get(b).is_none_or(Option::is_none) {
                let mut f32 = Vec::with_capacity(2 * kv_dim);
                f32.extend_from_slice(&k[..kv_dim]);
                f32.extend_from_slice(&v[..kv_dim]);
                let block = KvBlock::counted(Vec::new(), f32, self.pool.clone());
                *self.slot(b) = Some(Arc::new(block));
                return;
            }
        }
        let (block, kr, vr) = self.writable(pos);
        if ty == KvType::F32 {
            block.f32[kr..kr + kv_dim].copy_from_slice(&k[..kv_dim]);
            block.f32[vr..vr + kv_dim].copy_from_slice(&v[..kv_dim]);
            return;
        }
        for (d, &x) in block.f16[kr..kr + kv_dim].iter_mut().zip(k) {
            *d = f16_bits_from_f32(x);
        }
        for (d, &x) in block.f16[vr..vr + kv_dim].iter_mut().zip(v) {
            *d = f16_bits_from_f32(x);
        }
    }

    /// Appends to `out` the keys of positions `positions` (at most
    /// `capacity` of them), from value `offset` of each on: one run of rows
    /// per block they span, in position order (wrapping around a ring).
    pub fn key_runs<'a>(
        &'a self,
        positions: std::ops::Range<usize>,
        offset: usize,
        out: &mut Vec<F16Rows<'a>>,
    ) {
        self.runs(0, positions, offset, out)
    }

    /// As [`LayerKv::key_runs`], for the values.
    pub fn value_runs<'a>(
        &'a self,
        positions: std::ops::Range<usize>,
        offset: usize,
        out: &mut Vec<F16Rows<'a>>,
    ) {
        self.runs(self.block_rows(), positions, offset, out)
    }

    /// Runs of the rows from row `half` of each block (0: keys,
    /// the block size: values).
    fn runs<'a>(
        &'a self,
        half: usize,
        positions: std::ops::Range<usize>,
        offset: usize,
        out: &mut Vec<F16Rows<'a>>,
    ) {
        let (stride, rows) = (2 * self.kv_dim, self.block_rows());
        let mut left = positions.len().min(self.capacity);
        let mut slot = positions.start % self.capacity.max(1);
        while left > 0 {
            let (b, r) = (slot >> self.shift, slot & (rows - 1));
            let n = left.min(rows - r).min(self.capacity - slot);
            let bytes = u16_bytes(&self.stored(b).f16);
            out.push(F16Rows {
                bytes: bytes
                    .get((half + r) * stride + 2 * offset..)
                    .unwrap_or_default(),
                stride,
                n,
                cold: false,
            });
            left -= n;
            slot = (slot + n) % self.capacity;
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
        let (b, r) = self.locate(pos);
        let block = self.stored(b);
        let (k, v) = (r * self.kv_dim, (self.block_rows() + r) * self.kv_dim);
        let n = self.kv_dim;
        if self.is_f32() {
            (
                f32_bytes(&block.f32[k..k + n]),
                f32_bytes(&block.f32[v..v + n]),
            )
        } else {
            (
                u16_bytes(&block.f16[k..k + n]),
                u16_bytes(&block.f16[v..v + n]),
            )
        }
    }

    /// Stores position `pos` from bytes [`KvCache::stored_rows`] returned
    /// (of a cache of the same model): a bit-exact copy, no conversion.
    /// Panics unless `k` and `v` are [`LayerKv::row_bytes`] long.
    #[cfg(any(test, feature = "internals"))]
    pub fn store_raw(&mut self, pos: usize, k: &[u8], v: &[u8]) {
        let (kv_dim, ty) = (self.kv_dim, self.ty);
        let (block, kr, vr) = self.writable(pos);
        if ty == KvType::F32 {
            f32_bytes_mut(&mut block.f32[kr..kr + kv_dim]).copy_from_slice(k);
            f32_bytes_mut(&mut block.f32[vr..vr + kv_dim]).copy_from_slice(v);
        } else {
            u16_bytes_mut(&mut block.f16[kr..kr + kv_dim]).copy_from_slice(k);
            u16_bytes_mut(&mut block.f16[vr..vr + kv_dim]).copy_from_slice(v);
        }
    }

    /// The key of position `pos`: `kv_dim` little-endian f16 values.
    #[cfg(any(test, feature = "internals"))]
    pub fn key(&self, pos: usize) -> &[u8] {
        self.raw(pos).0
    }

    /// The value of position `pos`: `kv_dim` little-endian f16 values.
    #[cfg(any(test, feature = "internals"))]
    pub fn value(&self, pos: usize) -> &[u8] {
        self.raw(pos).1
    }

    /// Block `b` (slots `b * KV_BLOCK..` in a decoder's cache), shared:
    /// what a prefix cache keeps. `None` when none of its slots was stored.
    pub fn block(&self, b: usize) -> Option<Arc<KvBlock>> {
        self.blocks.get(b)?.clone()
    }

    /// Makes `block` (another cache's [`LayerKv::block`] `b`, of the same
    /// model) this layer's block `b`, shared: its positions read as they
    /// were stored there, and storing into it copies it first. Ignored
    /// when `b` is past the layer's slots or `block` has another shape.
    pub fn share_block(&mut self, b: usize, block: Arc<KvBlock>) {
        let rows = self.block_rows();
        let n = 2 * rows * self.kv_dim;
        let fits = match self.ty {
            KvType::F16 => block.f16.len() == n,
            KvType::F32 => block.f32.len() == n,
        };
        if fits && b < self.capacity.div_ceil(rows) {
            *self.slot(b) = Some(block);
        }
    }
}

/// The cache of every layer, and how many positions it holds. Cloning it
/// forks the sequence (beam search, a shared prompt prefix), sharing the
/// blocks until either side stores into them.
#[derive(Clone)]
pub struct KvCache {
    /// One cache per layer, in layer order.
    pub(crate) layers: Vec<LayerKv>,
    /// Positions the model may attend to at most (the context size).
    pub(crate) n_ctx: usize,
    /// Positions filled so far: the next token goes at position `len`.
    pub(crate) len: usize,
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
        KvCache::in_pool(kv_dim, n_ctx, capacities, ty, &KvPool::new())
    }

    /// As [`KvCache::with_type`], its blocks counted in `pool`.
    pub fn in_pool(
        kv_dim: usize,
        n_ctx: usize,
        capacities: &[usize],
        ty: KvType,
        pool: &KvPool,
    ) -> KvCache {
        KvCache {
            layers: capacities
                .iter()
                .map(|&c| LayerKv::in_pool(kv_dim, c, ty, pool))
                .collect(),
            n_ctx,
            len: 0,
            max_rewind: usize::MAX,
            written: 0,
        }
    }

    /// A cache of `layers` layers for an encoder-decoder's beam search:
    /// f32 keys and values (`kv_dim` each) in one-position blocks, as many
    /// positions as are stored (the model checks its own limit). A fork
    /// (a clone) shares every position; storing the next position adds a
    /// block and copies nothing.
    pub fn rows(kv_dim: usize, layers: usize) -> KvCache {
        let pool = KvPool::new();
        KvCache {
            layers: (0..layers)
                .map(|_| LayerKv::blocks_of(1, kv_dim, usize::MAX, KvType::F32, &pool))
                .collect(),
            n_ctx: usize::MAX,
            len: 0,
            max_rewind: usize::MAX,
            written: 0,
        }
    }

    /// A fork of the sequence (what the server's `n > 1` choices start
    /// from): the same as `clone`, which shares every block copy-on-write.
    pub fn fork(&self) -> KvCache {
        self.clone()
    }

    /// Positions filled so far: the next token goes at position `len()`.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no position is filled yet.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Positions the model may attend to at most (the context size).
    pub fn n_ctx(&self) -> usize {
        self.n_ctx
    }

    /// Whether every layer keeps every position of the context (no ring of
    /// a sliding window shorter than it): only then does a block, once
    /// written, keep its positions for the rest of the sequence, so that it
    /// can be shared with later sequences ([`KvCache::prefix_block`]).
    pub fn keeps_every_position(&self) -> bool {
        self.layers.iter().all(|l| l.capacity >= self.n_ctx)
    }

    /// Bytes one [`KvPrefixBlock`] of this cache holds (every layer's keys
    /// and values of [`KV_BLOCK`] positions).
    pub fn prefix_block_bytes(&self) -> usize {
        self.layers
            .iter()
            .map(|l| l.block_rows() * 2 * l.row_bytes())
            .sum()
    }

    /// Block `b` of every layer (positions `b * KV_BLOCK ..`), shared, not
    /// copied; `None` if the cache does not keep every position, has not
    /// filled the whole block yet, or any layer has not written it.
    pub fn prefix_block(&self, b: usize) -> Option<KvPrefixBlock> {
        if !self.keeps_every_position() || (b + 1).saturating_mul(KV_BLOCK) > self.len {
            return None;
        }
        let blocks = self
            .layers
            .iter()
            .map(|l| (l.block_rows() == KV_BLOCK).then(|| l.block(b)).flatten())
            .collect::<Option<Vec<_>>>()?;
        Some(KvPrefixBlock(blocks))
    }

    /// Starts an empty cache from `prefix`, blocks taken from caches of the
    /// same model ([`KvCache::prefix_block`] `0, 1, ...` of one prompt):
    /// they are shared, not copied, and the cache then holds
    /// `prefix.len() * KV_BLOCK` positions, the same bits running those
    /// tokens would have stored. Returns how many positions it holds: 0 if
    /// the cache was not empty, does not keep every position, or the
    /// blocks do not fit it (nothing is shared then).
    pub fn share_prefix(&mut self, prefix: &[KvPrefixBlock]) -> usize {
        let positions = prefix.len().saturating_mul(KV_BLOCK);
        let fits = self.len == 0
            && self.keeps_every_position()
            && positions <= self.n_ctx
            && prefix.iter().all(|p| {
                p.0.len() == self.layers.len()
                    && self
                        .layers
                        .iter()
                        .zip(&p.0)
                        .all(|(l, b)| {
                            l.block_rows() == KV_BLOCK
                                && b.bytes() == KV_BLOCK * 2 * l.row_bytes()
                        })
            });
        if !fits {
            return 0;
        }
        for (b, blocks) in prefix.iter().enumerate() {
            for (layer, block) in self.layers.iter_mut().zip(&blocks.0) {
                layer.share_block(b, block.clone());
            }
        }
        self.len = positions;
        positions
    }

    /// Stores one more position: `rows[l]` is layer `l`'s key and value
    /// (`kv_dim` floats each, rounded as the cache stores them). For a
    /// program that fills a cache itself (a test, a cache restored from
    /// elsewhere); the model's forward pass stores its own.
    pub fn push(&mut self, rows: &[(&[f32], &[f32])]) {
        assert_eq!(rows.len(), self.layers.len(), "one key/value pair per layer");
        assert!(self.len < self.n_ctx, "the cache is full");
        let pos = self.len;
        for (layer, (k, v)) in self.layers.iter_mut().zip(rows) {
            layer.store(pos, k, v);
        }
        self.len += 1;
    }

    /// The layers' caches (the library's own tests look inside).
    #[cfg(feature = "internals")]
    #[doc(hidden)]
    pub fn layers(&self) -> &[LayerKv] {
        &self.layers
    }

    /// The layers' caches, writable (the library's own tests).
    #[cfg(feature = "internals")]
    #[doc(hidden)]
    pub fn layers_mut(&mut self) -> &mut [LayerKv] {
        &mut self.layers
    }

    /// Sets how many positions are filled (the library's own tests, after
    /// storing rows through [`KvCache::layers_mut`]).
    #[cfg(feature = "internals")]
    #[doc(hidden)]
    pub fn set_len(&mut self, len: usize) {
        self.len = len;
    }

    /// The key and value bytes (f16 or f32 as stored) of position `pos`
    /// in layer `layer`, or `None` when the cache does not hold them: not
    /// written yet, or overwritten in a ring layer. Copying positions
    /// `0..n` of every layer into an empty cache of the same model with
    /// `LayerKv::store_raw`, in position order, then setting `len = n`,
    /// gives the cache that running those `n` tokens would (what the
    /// server's prefix cache does).
    pub fn stored_rows(&self, layer: usize, pos: usize) -> Option<(&[u8], &[u8])> {
        let l = self.layers.get(layer)?;
        let end = self.written.max(self.len);
        (pos < end && pos.saturating_add(l.capacity) >= end).then(|| l.raw(pos))
    }

    /// Limits how far back [`KvCache::truncate`] may go, counted from the
    /// furthest position written: a model whose ring layers keep `c` slots
    /// for a window of `w` positions can rewind `c - w + 1`.
    pub fn set_max_rewind(&mut self, n: usize) {
        self.max_rewind = n;
    }

    /// How far back [`KvCache::truncate`] may go from the furthest position
    /// written and keep the positions before (`usize::MAX` when no ring
    /// layer limits it).
    pub fn max_rewind(&self) -> usize {
        self.max_rewind
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

/// Every layer's block of the same [`KV_BLOCK`] positions of one sequence,
/// shared (a handle: cloning it copies no row). What the server's prefix
/// cache keeps; [`KvCache::share_prefix`] starts a new sequence from them.
#[derive(Clone)]
pub struct KvPrefixBlock(Vec<Arc<KvBlock>>);

impl KvPrefixBlock {
    /// Bytes the blocks hold (counted once however many caches share them).
    pub fn bytes(&self) -> usize {
        self.0.iter().map(|b| b.bytes()).sum()
    }
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
#[cfg(any(test, feature = "internals"))]
fn u16_bytes_mut(x: &mut [u16]) -> &mut [u8] {
    // SAFETY: every byte pattern is a valid u16, u8 has alignment 1; same
    // memory, length in bytes, exclusive borrow carried over.
    unsafe { std::slice::from_raw_parts_mut(x.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(x)) }
}

/// The bytes of an f32 slice, writable.
#[cfg(any(test, feature = "internals"))]
fn f32_bytes_mut(x: &mut [f32]) -> &mut [u8] {
    // SAFETY: every byte pattern is a valid f32, u8 has alignment 1; same
    // memory, length in bytes, exclusive borrow carried over.
    unsafe { std::slice::from_raw_parts_mut(x.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(x)) }
}

#[cfg(test)]
mod tests;
