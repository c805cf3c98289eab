//! The encoder's forward pass: the packed batch through every layer
//! (matrix products over all tokens, attention per sequence and head), and
//! the scratch buffers it reuses across calls (see the parent module for
//! why the output is bit-identical in any batch and for any thread count).

use std::ops::Range;
use std::sync::{Arc, Mutex};

use ferrite_kernels::gemm::{gemm_panels, Acts, OutPtr, PackedWeights, NR};
use ferrite_kernels::math::{self, Activation};

use super::weights::{self, Dense};
use super::{record_max, Encoder, EncoderLayer, InputRanges, Mlp, Norm, Positions, RelativeBias};
use crate::dump::{begin_pass, dump_rows, TensorDump};
use crate::layers::rope::{self, Rope};
use crate::parallel::{DisjointSlice, Threads};
use crate::Error;

/// Buffers reused across calls.
#[derive(Default)]
pub struct Workspace {
    x: Vec<f32>,
    qkv: Vec<f32>,
    attn: Vec<f32>,
    proj: Vec<f32>,
    up: Vec<f32>,
    gate: Vec<f32>,
    scratch: Vec<Mutex<AttnScratch>>,
    /// Where the passes write their named intermediates (`None`: nowhere).
    pub(crate) dump: Option<Arc<TensorDump>>,
}

/// One thread's attention buffers.
#[derive(Default)]
struct AttnScratch {
    scores: Vec<f32>,
    keys: PackedWeights,
    values: PackedWeights,
    cos: Vec<f32>,
    sin: Vec<f32>,
    /// The sequence length `cos` / `sin` were made for (the tables depend
    /// on nothing else), so the heads of a sequence share them.
    rope_len: Option<usize>,
    /// The rotation those tables are for.
    rope: Option<Rope>,
    /// One head's rotated queries, `(len, head_dim)`.
    q_rot: Vec<f32>,
    /// Relative bias buckets of distances `-(len - 1)..len`, for the
    /// sequence length `buckets_len`.
    buckets: Vec<u8>,
    buckets_len: Option<usize>,
    /// One head's bias by distance, `(2 * len - 1,)`.
    head_bias: Vec<f32>,
}

/// Makes `v` exactly `n` long; old contents are kept (every user
/// overwrites the whole buffer), new room is zeroed once.
fn resize(v: &mut Vec<f32>, n: usize) {
    v.resize(n, 0.0);
}

impl Encoder {
    /// The last hidden state of every token of `seqs`, sequences one after
    /// another: `(sum of lengths, dim)`, in the workspace (whose buffers the
    /// next call reuses, so the pages are not faulted in again).
    pub fn forward<'w>(
        &self,
        seqs: &[&[u32]],
        threads: &Threads,
        ws: &'w mut Workspace,
    ) -> Result<&'w [f32], Error> {
        self.forward_recording(seqs, None, threads, ws, None)
    }

    /// As [`Encoder::forward`], with each token's type (`types[s][t]` for
    /// token `t` of sequence `s`; a cross-encoder's pair is types 0 then
    /// 1). A type outside the model's table is an error. With every type 0
    /// the result is [`Encoder::forward`]'s, bit for bit.
    pub fn forward_typed<'w>(
        &self,
        seqs: &[&[u32]],
        types: &[&[u32]],
        threads: &Threads,
        ws: &'w mut Workspace,
    ) -> Result<&'w [f32], Error> {
        self.forward_recording(seqs, Some(types), threads, ws, None)
    }

    /// [`Encoder::forward`] (with token types if given), also recording
    /// the products' input ranges layer by layer if asked.
    pub(super) fn forward_recording<'w>(
        &self,
        seqs: &[&[u32]],
        types: Option<&[&[u32]]>,
        threads: &Threads,
        ws: &'w mut Workspace,
        mut ranges: Option<&mut [InputRanges]>,
    ) -> Result<&'w [f32], Error> {
        let c = &self.config;
        let dim = c.dim;
        let mut starts = Vec::with_capacity(seqs.len() + 1);
        let mut total = 0usize;
        for s in seqs {
            if s.len() > c.max_positions {
                return Err(Error::Input(format!(
                    "input of {} tokens is longer than the model's {} positions",
                    s.len(),
                    c.max_positions
                )));
            }
            starts.push(total);
            total += s.len();
        }
        starts.push(total);
        if ws.scratch.len() < threads.count() {
            ws.scratch.resize_with(threads.count(), Default::default);
        }

        resize(&mut ws.x, total * dim);
        self.embed_tokens(seqs, types, &starts, &mut ws.x, threads)?;
        // The tensor dump, if any (names as llama.cpp's BERT graph).
        let dump = ws.dump.clone();
        let dump = dump.as_deref();
        begin_pass(dump);
        dump_rows(dump, "inp_norm", None, &ws.x, total)?;
        for (i, layer) in self.layers.iter().enumerate() {
            let r = ranges.as_deref_mut().map(|r| &mut r[i]);
            self.layer(layer, &starts, total, threads, ws, r);
            if let Some(dump) = dump {
                dump_layer(dump, i, ws, total)?;
            }
        }
        Ok(&ws.x)
    }

    /// Token (+ type, + position) embeddings, normalized; the sequences
    /// split across the threads.
    fn embed_tokens(
        &self,
        seqs: &[&[u32]],
        types: Option<&[&[u32]]>,
        starts: &[usize],
        x: &mut [f32],
        threads: &Threads,
    ) -> Result<(), Error> {
        let (dim, n_vocab) = (self.config.dim, self.config.n_vocab);
        if let Some(&tok) = seqs
            .iter()
            .flat_map(|s| s.iter())
            .find(|&&t| t as usize >= n_vocab)
        {
            return Err(Error::Input(format!(
                "token id {tok} is outside the vocabulary of {n_vocab}"
            )));
        }
        if let Some(types) = types {
            let n_types = self.token_types.as_ref().map_or(1, |t| t.len() / dim);
            if types.len() != seqs.len() || types.iter().zip(seqs).any(|(t, s)| t.len() != s.len())
            {
                return Err(Error::Input(
                    "token types do not match the sequences' lengths".into(),
                ));
            }
            if let Some(&t) = types.iter().flat_map(|t| t.iter()).find(|&&t| t as usize >= n_types) {
                return Err(Error::Input(format!(
                    "token type {t} is outside the model's {n_types} types"
                )));
            }
        }
        let target = DisjointSlice::new(x);
        threads.split(seqs.len(), |range| {
            for s in range {
                // SAFETY: sequence s's rows are this thread's alone, and
                // inside `x` (which holds a row per token).
                let rows = unsafe { target.segment(starts[s] * dim, seqs[s].len() * dim) };
                for (pos, (row, &tok)) in rows.chunks_exact_mut(dim).zip(seqs[s]).enumerate() {
                    let t = tok as usize;
                    row.copy_from_slice(&self.token_embd[t * dim..(t + 1) * dim]);
                    if let Some(table) = &self.token_types {
                        let ty = types.map_or(0, |t| t[s][pos] as usize);
                        let tt = &table[ty * dim..(ty + 1) * dim];
                        row.iter_mut().zip(tt).for_each(|(v, &e)| *v += e);
                    }
                    if let Positions::Learned { table, first, .. } = &self.positions {
                        let p = &table[(first + pos) * dim..(first + pos + 1) * dim];
                        row.iter_mut().zip(p).for_each(|(v, &e)| *v += e);
                    }
                    self.embd_norm.apply_in_place(row);
                }
            }
        });
        Ok(())
    }

    fn layer(
        &self,
        l: &EncoderLayer,
        starts: &[usize],
        total: usize,
        threads: &Threads,
        ws: &mut Workspace,
        mut ranges: Option<&mut InputRanges>,
    ) {
        let c = &self.config;
        let dim = c.dim;
        let mut record = |which: fn(&mut InputRanges) -> &mut Vec<f32>, x: &[f32]| {
            if let Some(r) = ranges.as_deref_mut() {
                record_max(which(r), x);
            }
        };
        record(|r| &mut r.qkv, &ws.x);
        resize(&mut ws.qkv, total * 3 * dim);
        dense(&l.qkv, &ws.x, total, &mut ws.qkv, None, threads);
        resize(&mut ws.attn, total * dim);
        self.attention(starts, threads, ws);
        resize(&mut ws.proj, total * dim);
        record(|r| &mut r.out, &ws.attn);
        dense_add_norm(
            &l.out,
            &ws.attn,
            &mut ws.proj,
            &mut ws.x,
            &l.attn_norm,
            threads,
        );

        record(|r| &mut r.up, &ws.x);
        match &l.mlp {
            Mlp::Plain { up, act, .. } => {
                resize(&mut ws.up, total * c.ffn);
                dense(up, &ws.x, total, &mut ws.up, Some(*act), threads);
            }
            Mlp::SwiGlu { gate, up, .. } => {
                resize(&mut ws.up, total * c.ffn);
                resize(&mut ws.gate, total * c.ffn);
                swiglu(gate, up, &ws.x, total, &mut ws.gate, &mut ws.up, threads);
            }
        }
        let down = match &l.mlp {
            Mlp::Plain { down, .. } | Mlp::SwiGlu { down, .. } => down,
        };
        record(|r| &mut r.down, &ws.up);
        dense_add_norm(down, &ws.up, &mut ws.proj, &mut ws.x, &l.out_norm, threads);
    }

    /// Softmax attention of each sequence's tokens over themselves, head by
    /// head, from `ws.qkv` into `ws.attn`.
    fn attention(&self, starts: &[usize], threads: &Threads, ws: &mut Workspace) {
        let c = &self.config;
        let (dim, hd, n_heads) = (c.dim, c.head_dim, c.n_heads);
        let n_seqs = starts.len() - 1;
        let scale = 1.0 / (hd as f32).sqrt();
        let qkv = &ws.qkv[..];
        let out = DisjointSlice::new(&mut ws.attn[..]);
        let scratch = &ws.scratch;
        let ld = 3 * dim;
        threads.split_indexed(n_seqs * n_heads, |thread, items| {
            // Each thread has its own scratch; the lock is never contended.
            let mut s = scratch[thread].lock().unwrap_or_else(|e| e.into_inner());
            let s = &mut *s;
            for item in items {
                let (seq, h) = (item / n_heads, item % n_heads);
                let (start, len) = (starts[seq], starts[seq + 1] - starts[seq]);
                if len == 0 {
                    continue;
                }
                let q_off = start * ld + h * hd;
                let (k_off, v_off) = (q_off + dim, q_off + 2 * dim);
                // Rotary: rotated copies of this head's Q (kept in
                // `scores` temporarily) and K.
                let (q_rows, q_lda): (&[f32], usize) = match &self.positions {
                    Positions::Rotary { base, ntk } => {
                        if s.rope_len != Some(len) {
                            let rope = rope::encoder_rope(*base, *ntk, hd, len);
                            rope.tables(0..len, &mut s.cos, &mut s.sin);
                            s.rope = Some(rope);
                            s.rope_len = Some(len);
                        }
                        let (rope, half) = (s.rope.as_ref().expect("made above"), hd / 2);
                        let (cos, sin) = (&s.cos, &s.sin);
                        resize(&mut s.q_rot, len * hd);
                        for t in 0..len {
                            let dst = &mut s.q_rot[t * hd..(t + 1) * hd];
                            dst.copy_from_slice(&qkv[q_off + t * ld..q_off + t * ld + hd]);
                            rope.apply(dst, hd, &cos[t * half..], &sin[t * half..]);
                        }
                        s.keys.repack(len, hd, |t, row| {
                            row.copy_from_slice(&qkv[k_off + t * ld..k_off + t * ld + hd]);
                            rope.apply(row, hd, &cos[t * half..], &sin[t * half..]);
                        });
                        (&s.q_rot, hd)
                    }
                    Positions::Learned { .. } => {
                        s.keys.repack_rows(&qkv[k_off..], ld, len, hd);
                        (&qkv[q_off..], ld)
                    }
                };
                // scores = Q Kᵀ * scale, softmax over each row.
                resize(&mut s.scores, len * len);
                let acts = Acts {
                    a: q_rows,
                    lda: q_lda,
                    m: len,
                };
                let scores = OutPtr::plain(s.scores.as_mut_ptr(), len);
                // SAFETY: `scores` holds len x len values and is this
                // thread's own buffer.
                unsafe { gemm_panels(acts, &s.keys, 0..s.keys.n_panels(), scores) };
                if let Some(rb) = &self.relative_bias {
                    relative_bias_of_head(rb, h, n_heads, len, s);
                }
                for (i, row) in s.scores.chunks_exact_mut(len).enumerate() {
                    row.iter_mut().for_each(|v| *v *= scale);
                    if self.relative_bias.is_some() {
                        // Key j of query i is at distance j - i: entries
                        // len - 1 - i .. of the head's bias by distance.
                        let bias = &s.head_bias[len - 1 - i..2 * len - 1 - i];
                        row.iter_mut().zip(bias).for_each(|(v, &b)| *v += b);
                    }
                    math::softmax(row);
                }
                // out = P V.
                s.values.repack_transposed(&qkv[v_off..], ld, len, hd);
                let acts = Acts {
                    a: &s.scores,
                    lda: len,
                    m: len,
                };
                // SAFETY: this (sequence, head) pair is this thread's only:
                // it writes rows start..start+len, columns h*hd..(h+1)*hd
                // of `attn`, which no other item touches; in bounds because
                // `attn` is total x dim.
                unsafe {
                    debug_assert!((start + len) * dim <= out.len());
                    let target = OutPtr::plain(out.as_mut_ptr().add(start * dim + h * hd), dim);
                    gemm_panels(acts, &s.values, 0..s.values.n_panels(), target);
                }
            }
        });
    }
}

/// A tensor dump's points of layer `l`, from what the layer left in the
/// workspace: the heads' outputs (before the output projection), the
/// feed-forward block's output (before the residual add and norm) and the
/// layer's output.
fn dump_layer(dump: &TensorDump, l: usize, ws: &Workspace, rows: usize) -> Result<(), Error> {
    let d = Some(dump);
    dump_rows(d, "kqv_out", Some(l), &ws.attn, rows)?;
    dump_rows(d, "ffn_out", Some(l), &ws.proj, rows)?;
    dump_rows(d, "l_out", Some(l), &ws.x, rows)
}

/// Head `h`'s bias for each distance `-(len - 1)..len` into
/// `s.head_bias`, the buckets of a sequence of `len` tokens computed once.
fn relative_bias_of_head(
    rb: &RelativeBias,
    h: usize,
    n_heads: usize,
    len: usize,
    s: &mut AttnScratch,
) {
    if s.buckets_len != Some(len) {
        let max = len as i64 - 1;
        s.buckets.clear();
        // A bucket is below n_buckets, which the loader keeps under 256.
        s.buckets
            .extend((-max..=max).map(|rel| rb.bucket(rel) as u8));
        s.buckets_len = Some(len);
    }
    s.head_bias.clear();
    s.head_bias.extend(
        s.buckets
            .iter()
            .map(|&b| rb.table[b as usize * n_heads + h]),
    );
}

/// Rows per thread from which [`dense`] gives each thread its own rows
/// (every output feature) instead of its own output features (every row)
/// for f32 weights: the GEMM copies the rows it multiplies into a small
/// buffer, so splitting the features made every thread copy every row
/// (~4% of mpnet's samples at two threads). The weights, read by both, are
/// shared in the L3 cache. F16 weights keep the feature split (each
/// thread converts only its own panels).
const ROWS_PER_THREAD_TO_SPLIT_ROWS: usize = 96;

/// Whether [`dense`] splits the rows of this product across the threads
/// (else the output features).
fn splits_rows(d: &Dense, m: usize, threads: &Threads) -> bool {
    matches!(
        d.w,
        weights::Matrix::F32(_) | weights::Matrix::Bf16(_) | weights::Matrix::Int8(_)
    ) && threads.count() > 1
        && m >= threads.count() * ROWS_PER_THREAD_TO_SPLIT_ROWS
}

/// `out = act(x · Wᵀ + b)` for the rows `rows` of `x` (`k` wide), every
/// output feature.
///
/// # Safety
/// Rows `rows` of `out` (`n` wide, where `rows.end` rows fit) are the
/// caller's alone during the call.
unsafe fn dense_rows(
    d: &Dense,
    x: &[f32],
    rows: Range<usize>,
    out: &DisjointSlice<f32>,
    act: Option<Activation>,
) {
    let (n, k) = (d.w.n(), d.w.k());
    debug_assert!(rows.end * n <= out.len());
    let target = OutPtr {
        // SAFETY: rows.start < rows.end: inside the output.
        ptr: unsafe { out.as_mut_ptr().add(rows.start * n) },
        ld: n,
        bias: d.bias.as_deref(),
        act,
    };
    let a = Acts {
        a: &x[rows.start * k..],
        lda: k,
        m: rows.len(),
    };
    // SAFETY: these rows of the output, every column, are the caller's.
    unsafe { d.gemm_panels(a, 0..d.w.n_panels(), target) };
}

/// `out = act(x · Wᵀ + b)`, `m` rows; threads split the output features
/// by panels (or, for many rows of f32 weights, the rows), bias and
/// activation applied as each tile is stored. Each value is the same chain
/// whichever the split.
pub(crate) fn dense(
    d: &Dense,
    x: &[f32],
    m: usize,
    out: &mut [f32],
    act: Option<Activation>,
    threads: &Threads,
) {
    let n = d.w.n();
    debug_assert_eq!(out.len(), m * n);
    let k = d.w.k();
    let target = DisjointSlice::new(out);
    if splits_rows(d, m, threads) {
        // SAFETY: each thread's rows are its own.
        threads.split(m, |rows| unsafe { dense_rows(d, x, rows, &target, act) });
        return;
    }
    threads.split(d.w.n_panels(), |panels| {
        let out = OutPtr {
            ptr: target.as_mut_ptr(),
            ld: n,
            bias: d.bias.as_deref(),
            act,
        };
        // SAFETY: the panels of this range are this thread's alone, so are
        // their output columns in every row; `out` is m x n.
        unsafe { d.gemm_panels(Acts { a: x, lda: k, m }, panels, out) };
    });
}

/// `x = LN(x + input · Wᵀ + b)` row by row, `proj` holding the product.
/// When the threads split the product's rows, each normalizes its own
/// rows right after multiplying them (one pass less over the threads, the
/// rows still in its cache); the operations on a row are the same either
/// way.
fn dense_add_norm(
    d: &Dense,
    input: &[f32],
    proj: &mut [f32],
    x: &mut [f32],
    norm: &Norm,
    threads: &Threads,
) {
    let dim = d.w.n();
    let m = x.len() / dim;
    if !splits_rows(d, m, threads) {
        dense(d, input, m, proj, None, threads);
        add_and_norm(x, proj, norm, dim, threads);
        return;
    }
    debug_assert_eq!(proj.len(), m * dim);
    let (p, xs) = (DisjointSlice::new(proj), DisjointSlice::new(x));
    threads.split(m, |rows| {
        // SAFETY: rows `rows` of `proj` and `x` are this thread's alone.
        unsafe {
            dense_rows(d, input, rows.clone(), &p, None);
            for r in rows {
                norm.add_then_apply(xs.segment(r * dim, dim), p.segment(r * dim, dim));
            }
        }
    });
}

/// `up = silu(x · Gᵀ) * (x · Uᵀ)`, with `gate` as scratch.
fn swiglu(
    gate_w: &Dense,
    up_w: &Dense,
    x: &[f32],
    m: usize,
    gate: &mut [f32],
    up: &mut [f32],
    threads: &Threads,
) {
    let n = up_w.w.n();
    let k = up_w.w.k();
    let (g, u) = (DisjointSlice::new(gate), DisjointSlice::new(up));
    threads.split(up_w.w.n_panels(), |panels| {
        let (j0, j1) = (panels.start * NR, (panels.end * NR).min(n));
        // SAFETY: as in `dense`: columns j0..j1 of both outputs are this
        // thread's alone; both are m x n.
        unsafe {
            let gp = g.as_mut_ptr();
            let up_ptr = u.as_mut_ptr();
            let acts = Acts { a: x, lda: k, m };
            let gate_out = OutPtr {
                bias: gate_w.bias.as_deref(),
                ..OutPtr::plain(gp, n)
            };
            let up_out = OutPtr {
                bias: up_w.bias.as_deref(),
                ..OutPtr::plain(up_ptr, n)
            };
            gate_w.gemm_panels(acts, panels.clone(), gate_out);
            up_w.gemm_panels(acts, panels, up_out);
            for i in 0..m {
                let gr = std::slice::from_raw_parts(gp.add(i * n + j0), j1 - j0);
                let ur = std::slice::from_raw_parts_mut(up_ptr.add(i * n + j0), j1 - j0);
                math::silu_mul(gr, ur);
            }
        }
    });
}

/// `x = LN(x + y)` row by row, rows split across threads.
fn add_and_norm(x: &mut [f32], y: &[f32], norm: &Norm, dim: usize, threads: &Threads) {
    let rows = x.len() / dim;
    let target = DisjointSlice::new(x);
    threads.split(rows, |range| {
        for r in range {
            // SAFETY: row r is this thread's alone.
            let row = unsafe { target.segment(r * dim, dim) };
            norm.add_then_apply(row, &y[r * dim..(r + 1) * dim]);
        }
    });
}
