//! Tiled (flash-style) attention over a decoder's [`LayerKv`]: a tile of
//! query rows (some positions of one sequence times the query heads of
//! one KV group) against blocks of [`KEY_BLOCK`] keys, each block read
//! from the cache and converted to f32 once for the whole tile, with an
//! online softmax (a running maximum and sum per row, rescaled as the
//! maximum grows). No score row longer than a block is ever held.
//!
//! # One order per row
//!
//! A row's result depends only on its query, its position and the cache,
//! never on the other rows of its tile, the chunk of the prompt it came
//! in, the thread count or the kernel set, because its operations are
//! fixed by absolute positions:
//!
//! 1. Positions are cut into chunks of [`SPLIT_CHUNK`] and each chunk into
//!    blocks of [`KEY_BLOCK`], at multiples of those sizes. A row reads
//!    the positions it sees (`first..=pos`: causal, or the last `window`)
//!    of each block, in order.
//! 2. Per chunk, a state `(m, l, acc)` starts empty (`-inf, 0, 0`); per
//!    block: the scores `dot(q, k_j) * scale` (the kernels':
//!    `ferrite_kernels::attend_tile`'s chains of fused multiply-adds over
//!    segments of 16 values, added pairwise), the
//!    soft-cap if any, `m' = max(m, max_j s_j)`, `alpha = exp(m - m')`,
//!    `p_j = exp(s_j - m')`, `l = l * alpha + sum_j p_j` (the kernels'
//!    `exp_shifted_sum`), `acc = acc * alpha + sum_j p_j v_j` (one fused
//!    multiply-add per row `j`, in order).
//! 3. The chunks' states are merged in chunk order into a total that
//!    starts as `(sink, 1, 0)` with a sink logit (gpt-oss) or empty
//!    without: an empty total takes the chunk's state as it is, else
//!    `M = max(m, m_c)`, `a = exp(m - M)`, `b = exp(m_c - M)`,
//!    `l = l * a + l_c * b`, `acc = acc * a + acc_c * b`.
//! 4. `out = acc / l`.
//!
//! Prefill runs tiles of [`queries_per_tile`] positions, threads over
//! (KV head, tile), each tile walking its chunks in order. A decode step
//! (few rows, a long cache) splits the chunks across threads instead
//! (split-K): each (KV head, chunk) item leaves its chunk's states, and
//! they are merged afterwards in chunk order, the same step 3.

use std::ops::Range;

use ferrite_kernels::attend::F16Rows;
use ferrite_kernels::attend_tile::{
    accumulate_tile, f16_keys_to_block, f16_rows_to_f32, scores_tile, KEY_BLOCK,
};
use ferrite_kernels::math::{exp, exp_shifted_sum, max_value};

use super::{AttnShape, Positions};
use crate::kv_cache::LayerKv;
use crate::parallel::{DisjointSlice, Threads};

/// Positions per chunk of step 1: the unit of split-K, a multiple of
/// [`KEY_BLOCK`].
pub const SPLIT_CHUNK: usize = 16 * KEY_BLOCK;

/// Rows (positions times the heads of a group) a tile aims at.
const TILE_ROWS: usize = 128;

/// Positions per prefill tile for a group of `group` query heads.
pub fn queries_per_tile(group: usize) -> usize {
    (TILE_ROWS / group.max(1)).max(1)
}

/// Scratch values one thread needs (independent of the context length):
/// a block of keys and of values, the tile's queries, scores and two
/// states per row.
pub fn attention_scratch_len(head_dim: usize, group: usize) -> usize {
    let rows = queries_per_tile(group) * group.max(1);
    2 * KEY_BLOCK * head_dim + rows * (head_dim + KEY_BLOCK + 2 * (head_dim + 2))
}

/// Online-softmax states of a tile's rows: the running maximum, sum and
/// weighted values of each.
struct States<'a> {
    m: &'a mut [f32],
    l: &'a mut [f32],
    acc: &'a mut [f32],
}

impl<'a> States<'a> {
    /// States of `rows` rows of `hd` values carved from the front of `buf`.
    fn carve(buf: &'a mut [f32], rows: usize, hd: usize) -> (States<'a>, &'a mut [f32]) {
        let (m, rest) = buf.split_at_mut(rows);
        let (l, rest) = rest.split_at_mut(rows);
        let (acc, rest) = rest.split_at_mut(rows * hd);
        (States { m, l, acc }, rest)
    }
}

/// One thread's scratch, cut into its parts.
struct Tile<'a> {
    /// A block's keys, transposed: `kt[d * KEY_BLOCK + j]`.
    kt: &'a mut [f32],
    /// A block's values, row after row.
    vb: &'a mut [f32],
    /// The tile's queries, row after row.
    q: &'a mut [f32],
    /// The tile's scores, [`KEY_BLOCK`] per row.
    s: &'a mut [f32],
    chunk: States<'a>,
    total: States<'a>,
}

impl<'a> Tile<'a> {
    fn carve(buf: &'a mut [f32], rows: usize, hd: usize) -> Tile<'a> {
        let (kt, rest) = buf.split_at_mut(KEY_BLOCK * hd);
        let (vb, rest) = rest.split_at_mut(KEY_BLOCK * hd);
        let (q, rest) = rest.split_at_mut(rows * hd);
        let (s, rest) = rest.split_at_mut(rows * KEY_BLOCK);
        let (chunk, rest) = States::carve(rest, rows, hd);
        let (total, _) = States::carve(rest, rows, hd);
        Tile {
            kt,
            vb,
            q,
            s,
            chunk,
            total,
        }
    }
}

/// What a tile's rows are: positions `pos0..pos0 + n` of one KV group.
#[derive(Clone, Copy)]
struct Rows<'s> {
    pos0: usize,
    n: usize,
    group: usize,
    head_dim: usize,
    kv_off: usize,
    shape: &'s AttnShape<'s>,
}

impl Rows<'_> {
    /// The first position the query at `pos` sees.
    fn first(&self, pos: usize) -> usize {
        match self.shape.window {
            Some(w) => (pos + 1).saturating_sub(w),
            None => 0,
        }
    }

    /// All the positions some row of the tile sees.
    fn seen(&self) -> Range<usize> {
        self.first(self.pos0)..self.pos0 + self.n
    }

    /// The positions of `range` the query at `pos` sees.
    fn span(&self, pos: usize, range: &Range<usize>) -> Range<usize> {
        range.start.max(self.first(pos))..range.end.min(pos + 1)
    }
}

/// `out[t][h]` = softmax over the positions query `t` sees of
/// `q[t][h] . k`, times `v`: see the module notes for the order.
///
/// `q`: (n_tokens, n_heads * head_dim); `out`: the same shape. The cache
/// must already hold keys and values for every position up to the last
/// token. `scratch` holds `threads.count()` segments of
/// [`attention_scratch_len`] values.
pub fn attention(
    q: &[f32],
    cache: &LayerKv,
    at: Positions,
    shape: &AttnShape,
    scratch: &mut [f32],
    out: &mut [f32],
    threads: &Threads,
) {
    if at.n == 0 {
        return;
    }
    let hd = shape.head_dim;
    let group = shape.n_heads / shape.n_kv_heads;
    let per_tile = queries_per_tile(group);
    let n_tiles = at.n.div_ceil(per_tile);
    let per_thread = scratch.len() / threads.count();
    let rows_of = |g: usize, tile: usize| {
        let t0 = tile * per_tile;
        let rows = Rows {
            pos0: at.start + t0,
            n: per_tile.min(at.n - t0),
            group,
            head_dim: hd,
            kv_off: g * hd,
            shape,
        };
        (t0, rows)
    };
    // Few tiles over a long cache (a decode step): split the chunks.
    let last = at.start + at.n - 1;
    let chunks = rows_of(0, 0).1.first(at.start) / SPLIT_CHUNK..last / SPLIT_CHUNK + 1;
    if n_tiles == 1 && chunks.len() > 1 && shape.n_kv_heads < 2 * threads.count() {
        return split_k(q, cache, rows_of(0, 0).1, chunks, scratch, out, threads);
    }
    let scratch = DisjointSlice::new(scratch);
    let out = DisjointSlice::new(out);
    let n_items = n_tiles * shape.n_kv_heads;
    threads.split_indexed(n_items, |thread, items| {
        // SAFETY: thread indices are distinct, so each thread owns its own
        // segment of the scratch space.
        let buf = unsafe { scratch.segment(thread * per_thread, per_thread) };
        let mut tile = Tile::carve(buf, per_tile * group, hd);
        let mut runs = Vec::new();
        for item in items {
            // Tiles run from both ends in turn (0, last, 1, last - 1, ...):
            // a causal tile's cost grows with its position, so each
            // thread's contiguous range of items gets a fair mix.
            let (u, g) = (item / shape.n_kv_heads, item % shape.n_kv_heads);
            let tile_i = if u % 2 == 0 { u / 2 } else { n_tiles - 1 - u / 2 };
            let (t0, rows) = rows_of(g, tile_i);
            gather_queries(q, &rows, t0, tile.q);
            start_totals(&rows, &mut tile.total);
            let seen = rows.seen();
            for c in seen.start / SPLIT_CHUNK..(seen.end - 1) / SPLIT_CHUNK + 1 {
                let range = c * SPLIT_CHUNK..(c + 1) * SPLIT_CHUNK;
                chunk_states(cache, &rows, &range, &mut tile, &mut runs);
                for r in 0..rows.n * group {
                    if !rows.span(rows.pos0 + r / group, &range).is_empty() {
                        merge(&mut tile.total, r, &tile.chunk, r, hd);
                    }
                }
            }
            for t in 0..rows.n {
                let at_out = (t0 + t) * shape.n_heads * hd + g * group * hd;
                // SAFETY: each (tile, KV head) item writes the output of
                // its own rows only, and items are split across threads.
                let o = unsafe { out.segment(at_out, group * hd) };
                finish(&tile.total, t * group..(t + 1) * group, hd, o);
            }
        }
    });
}

/// The decode path: one tile of rows, its chunks split across threads by
/// (KV head, chunk), their states merged in chunk order afterwards.
fn split_k(
    q: &[f32],
    cache: &LayerKv,
    rows0: Rows,
    chunks: Range<usize>,
    scratch: &mut [f32],
    out: &mut [f32],
    threads: &Threads,
) {
    let (hd, group, n_kv) = (rows0.head_dim, rows0.group, rows0.shape.n_kv_heads);
    let rows = rows0.n * group;
    let state_len = rows * (hd + 2);
    let n_items = n_kv * chunks.len();
    let mut partials = vec![0f32; n_items * state_len];
    let per_thread = scratch.len() / threads.count();
    let scratch = DisjointSlice::new(scratch);
    let parts = DisjointSlice::new(&mut partials);
    let kv_rows = |g: usize| Rows {
        kv_off: g * hd,
        ..rows0
    };
    threads.split_indexed(n_items, |thread, items| {
        // SAFETY: thread indices are distinct, so each thread owns its own
        // segment of the scratch space.
        let buf = unsafe { scratch.segment(thread * per_thread, per_thread) };
        let mut tile = Tile::carve(buf, rows, hd);
        let mut runs = Vec::new();
        for item in items {
            let (g, c) = (item / chunks.len(), chunks.start + item % chunks.len());
            let rows_g = kv_rows(g);
            gather_queries(q, &rows_g, 0, tile.q);
            let range = c * SPLIT_CHUNK..(c + 1) * SPLIT_CHUNK;
            chunk_states(cache, &rows_g, &range, &mut tile, &mut runs);
            // SAFETY: each item writes its own slot of the partials.
            let slot = unsafe { parts.segment(item * state_len, state_len) };
            let (m, rest) = slot.split_at_mut(rows);
            let (l, acc) = rest.split_at_mut(rows);
            m.copy_from_slice(tile.chunk.m);
            l.copy_from_slice(tile.chunk.l);
            acc.copy_from_slice(tile.chunk.acc);
        }
    });
    let mut buf = vec![0f32; state_len];
    for g in 0..n_kv {
        let rows_g = kv_rows(g);
        let (mut total, _) = States::carve(&mut buf, rows, hd);
        start_totals(&rows_g, &mut total);
        for (i, c) in chunks.clone().enumerate() {
            let range = c * SPLIT_CHUNK..(c + 1) * SPLIT_CHUNK;
            let slot = &mut partials[(g * chunks.len() + i) * state_len..][..state_len];
            let (part, _) = States::carve(slot, rows, hd);
            for r in 0..rows {
                if !rows_g.span(rows_g.pos0 + r / group, &range).is_empty() {
                    merge(&mut total, r, &part, r, hd);
                }
            }
        }
        let q_dim = rows0.shape.n_heads * hd;
        for t in 0..rows0.n {
            let o = &mut out[t * q_dim + g * group * hd..][..group * hd];
            finish(&total, t * group..(t + 1) * group, hd, o);
        }
    }
}

/// Copies the tile's query rows (position-major, then the group's heads)
/// into `dst`: token `t0` of the call is the tile's first.
fn gather_queries(q: &[f32], rows: &Rows, t0: usize, dst: &mut [f32]) {
    let (hd, group) = (rows.head_dim, rows.group);
    let q_dim = rows.shape.n_heads * hd;
    let head0 = rows.kv_off / hd * group;
    for t in 0..rows.n {
        let src = &q[(t0 + t) * q_dim + head0 * hd..][..group * hd];
        dst[t * group * hd..(t + 1) * group * hd].copy_from_slice(src);
    }
}

/// Step 3's starting totals: `(sink, 1, 0)` or empty.
fn start_totals(rows: &Rows, total: &mut States) {
    let group = rows.group;
    let head0 = rows.kv_off / rows.head_dim * group;
    for r in 0..rows.n * group {
        let sink = rows.shape.sinks.map(|s| s[head0 + r % group]);
        total.m[r] = sink.unwrap_or(f32::NEG_INFINITY);
        total.l[r] = if sink.is_some() { 1.0 } else { 0.0 };
    }
    total.acc[..rows.n * group * rows.head_dim].fill(0.0);
}

/// Step 2 for every row of the tile over the positions of `chunk`: the
/// chunk's states, left in `tile.chunk` (a row that sees none of the
/// chunk keeps the empty state).
fn chunk_states<'c>(
    cache: &'c LayerKv,
    rows: &Rows,
    chunk: &Range<usize>,
    tile: &mut Tile,
    runs: &mut Vec<F16Rows<'c>>,
) {
    let (hd, group) = (rows.head_dim, rows.group);
    let n_rows = rows.n * group;
    tile.chunk.m[..n_rows].fill(f32::NEG_INFINITY);
    tile.chunk.l[..n_rows].fill(0.0);
    tile.chunk.acc[..n_rows * hd].fill(0.0);
    let seen = rows.seen();
    let (lo, hi) = (chunk.start.max(seen.start), chunk.end.min(seen.end));
    if lo >= hi {
        return;
    }
    let mut spans = vec![(0u32, 0u32); n_rows];
    let mut alpha = vec![0f32; n_rows];
    for b in lo / KEY_BLOCK..(hi - 1) / KEY_BLOCK + 1 {
        let block = b * KEY_BLOCK..(b + 1) * KEY_BLOCK;
        let load = block.start.max(lo)..block.end.min(hi);
        load_block(cache, rows, &load, block.start, tile, runs);
        // The positions that see some of this block: a contiguous run.
        let see = |t: &usize| !rows.span(rows.pos0 + t, &block).is_empty();
        let Some(t_lo) = (0..rows.n).find(see) else {
            continue;
        };
        let t_hi = (t_lo..rows.n).take_while(see).count() + t_lo;
        let (r_lo, r_hi) = (t_lo * group, t_hi * group);
        let s = &mut tile.s[r_lo * KEY_BLOCK..r_hi * KEY_BLOCK];
        scores_tile(&tile.q[r_lo * hd..r_hi * hd], hd, tile.kt, rows.shape.scale, s);
        for r in r_lo..r_hi {
            let span = rows.span(rows.pos0 + r / group, &block);
            let (a, z) = (span.start - block.start, span.end - block.start);
            spans[r] = (a as u32, z as u32);
            let s = &mut tile.s[r * KEY_BLOCK + a..r * KEY_BLOCK + z];
            if let Some(cap) = rows.shape.softcap {
                // transformers divides, takes the tanh, multiplies, in f32.
                s.iter_mut().for_each(|x| *x = (*x / cap).tanh() * cap);
            }
            let m = tile.chunk.m[r];
            let m_new = m.max(max_value(s));
            alpha[r] = exp(m - m_new);
            let sum = exp_shifted_sum(s, m_new);
            tile.chunk.l[r] = tile.chunk.l[r] * alpha[r] + sum;
            tile.chunk.m[r] = m_new;
        }
        accumulate_tile(
            &tile.s[r_lo * KEY_BLOCK..r_hi * KEY_BLOCK],
            &spans[r_lo..r_hi],
            &alpha[r_lo..r_hi],
            tile.vb,
            &mut tile.chunk.acc[r_lo * hd..r_hi * hd],
        );
    }
}

/// Reads positions `load` of the KV head of `rows` into the tile's
/// block buffers, position `p` at lane `p - base` (the other lanes keep
/// old values, which no row reads).
fn load_block<'c>(
    cache: &'c LayerKv,
    rows: &Rows,
    load: &Range<usize>,
    base: usize,
    tile: &mut Tile,
    runs: &mut Vec<F16Rows<'c>>,
) {
    let (hd, off) = (rows.head_dim, rows.kv_off);
    let lane0 = load.start - base;
    let mut put_key = |lane: usize, k: &[f32]| {
        for (d, &x) in k.iter().enumerate() {
            tile.kt[d * KEY_BLOCK + lane] = x;
        }
    };
    if cache.is_f32() {
        for (i, p) in load.clone().enumerate() {
            put_key(lane0 + i, &cache.key_f32(p)[off..off + hd]);
            tile.vb[(lane0 + i) * hd..(lane0 + i + 1) * hd]
                .copy_from_slice(&cache.value_f32(p)[off..off + hd]);
        }
        return;
    }
    // Each run's rows converted (and the keys transposed) in one call.
    runs.clear();
    cache.key_runs(load.clone(), off, runs);
    let mut lane = lane0;
    for run in runs.iter() {
        f16_keys_to_block(run.bytes, run.stride, run.n, hd, tile.kt, lane);
        lane += run.n;
    }
    runs.clear();
    cache.value_runs(load.clone(), off, runs);
    let mut lane = lane0;
    for run in runs.iter() {
        f16_rows_to_f32(run.bytes, run.stride, run.n, hd, &mut tile.vb[lane * hd..]);
        lane += run.n;
    }
}

/// Step 3 for row `r` of `total` and row `rc` of `chunk`.
fn merge(total: &mut States, r: usize, chunk: &States, rc: usize, hd: usize) {
    let acc = &mut total.acc[r * hd..(r + 1) * hd];
    let acc_c = &chunk.acc[rc * hd..(rc + 1) * hd];
    let (m, m_c) = (total.m[r], chunk.m[rc]);
    if m == f32::NEG_INFINITY && total.l[r] == 0.0 {
        total.m[r] = m_c;
        total.l[r] = chunk.l[rc];
        acc.copy_from_slice(acc_c);
        return;
    }
    let m_new = m.max(m_c);
    let (a, b) = (exp(m - m_new), exp(m_c - m_new));
    total.m[r] = m_new;
    total.l[r] = total.l[r] * a + chunk.l[rc] * b;
    for (x, &y) in acc.iter_mut().zip(acc_c) {
        *x = *x * a + y * b;
    }
}

/// Step 4 for rows `rows` of `total` into `out` (`head_dim` values each).
fn finish(total: &States, rows: Range<usize>, hd: usize, out: &mut [f32]) {
    for (i, r) in rows.enumerate() {
        let l = total.l[r];
        let acc = &total.acc[r * hd..(r + 1) * hd];
        for (o, &x) in out[i * hd..(i + 1) * hd].iter_mut().zip(acc) {
            *o = x / l;
        }
    }
}
