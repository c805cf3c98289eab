//! The forward pass of a [`Decoder`]: token input, every block over the
//! rows of several sequences at once, and the output head.
//!
//! Per block, with `x` the residual stream of every row:
//! ```text
//! xn = attn_norm(x); q,k,v = qkv(xn) (+ biases); q,k = q_norm/k_norm per head;
//! q,k = rope(q,k); cache <- k,v; a = attention(q, cache); p = out(a);
//! x += post_attn_norm(p) or p
//! xn = ffn_norm(x); p = mlp(xn); x += post_ffn_norm(p) or p
//! ```
//! Reference: llama.cpp `src/models/*.cpp` over `llm_graph_context`'s
//! builders (`build_norm`, `build_attn`, `build_ffn`).

use std::ops::Range;

use ferrite_kernels::math::{activate, silu_mul};

use super::{BatchItem, Decoder, GatedAct, Mlp, Qkv, SeqRows};
use crate::dump::{begin_pass, dump_rows};
use crate::layers::activation::geglu_in_place;
use crate::layers::attention::{attention, AttnShape, Positions};
use crate::layers::norm::Norm;
use crate::models::decoder::{add_in_place, check_room, Logits, Workspace, MAX_CHUNK};
use crate::parallel::Threads;
use crate::tensor::{matmul_many, MatmulJob};
use crate::Error;

impl Decoder {
    /// Writes the token input of `tokens` (at positions `pos[t]`) into `x`.
    fn embed(&self, tokens: &[u32], pos: &[usize], ws: &mut Workspace) -> Result<(), Error> {
        let dim = self.shape.dim;
        let n = tokens.len();
        let x = &mut ws.x[..n * dim];
        for (t, &tok) in tokens.iter().enumerate() {
            let row = &mut x[t * dim..(t + 1) * dim];
            self.input.table.lookup(tok, row)?;
            if let Some(scale) = self.input.scale {
                for v in row.iter_mut() {
                    *v *= scale;
                }
            }
            if let Some(table) = &self.input.positions {
                let p = u32::try_from(pos[t]).unwrap_or(u32::MAX);
                let tmp = &mut ws.xn[..dim];
                table.lookup(p, tmp).map_err(|_| {
                    Error::Input(format!(
                        "position {} is past the {} positions {} learned",
                        pos[t], table.n_vocab, self.arch
                    ))
                })?;
                add_in_place(row, tmp);
            }
        }
        Ok(())
    }

    /// Runs the rows of `tokens` through every block: the first
    /// `seqs[0].n` rows belong to the first sequence, and so on. Leaves the
    /// final hidden states (before the output norm) in `ws.x`; stores keys
    /// and values in each sequence's cache but does not advance its length.
    pub fn forward_rows(
        &self,
        tokens: &[u32],
        seqs: &mut [SeqRows],
        ws: &mut Workspace,
        threads: &Threads,
    ) -> Result<(), Error> {
        let s = self.shape;
        let n = tokens.len();
        let (dim, hd, ffn) = (s.dim, s.head_dim, s.ffn_dim);
        let (q_dim, kv_dim) = (s.q_dim(), s.kv_dim());
        if n > MAX_CHUNK || seqs.iter().map(|q| q.n).sum::<usize>() != n {
            return Err(Error::Input(format!(
                "a forward pass takes at most {MAX_CHUNK} rows, each of one sequence"
            )));
        }
        // Each row's position.
        let mut row = 0;
        for seq in seqs.iter() {
            for i in 0..seq.n {
                ws.pos[row + i] = seq.cache.len + i;
            }
            row += seq.n;
        }
        let pos = std::mem::take(&mut ws.pos);
        let embedded = self.embed(tokens, &pos[..n], ws);
        ws.pos = pos;
        embedded?;
        // The tensor dump, if any: one branch per named point (names as
        // llama.cpp's graph callback gives them).
        let dump = ws.dump.clone();
        let dump = dump.as_deref();
        begin_pass(dump);
        dump_rows(dump, "inp_embd", None, &ws.x[..n * dim], n)?;
        // One table of RoPE angles, refilled when a block uses another
        // rotation than the previous one.
        let mut table_of = None;
        // The context size picks a LongRoPE model's rotation: one for the
        // whole batch.
        let n_ctx = seqs.first().map_or(0, |q| q.cache.n_ctx);
        let long = |n: usize| {
            self.ropes
                .iter()
                .any(|r| !std::ptr::eq(r.for_context(n), r))
        };
        if seqs.iter().any(|q| long(q.cache.n_ctx) != long(n_ctx)) {
            return Err(Error::Input(
                "a batch mixes contexts on both sides of the model's LongRoPE original context"
                    .into(),
            ));
        }

        for (l, block) in self.blocks.iter().enumerate() {
            let a = &block.attn;
            let x = &mut ws.x[..n * dim];
            let xn = &mut ws.xn[..n * dim];
            block.attn_norm.apply(x, xn);
            dump_rows(dump, "attn_norm", Some(l), xn, n)?;
            let (q, k, v) = (
                &mut ws.q[..n * q_dim],
                &mut ws.k[..n * kv_dim],
                &mut ws.v[..n * kv_dim],
            );
            match &a.qkv {
                Qkv::Split(split) => {
                    let [wq, wk, wv] = &**split;
                    let jobs = &mut [
                        MatmulJob::new(wq, &mut *q),
                        MatmulJob::new(wk, &mut *k),
                        MatmulJob::new(wv, &mut *v),
                    ];
                    matmul_many(jobs, xn, &mut ws.acts, threads)?;
                }
                Qkv::Fused(w) => {
                    let width = q_dim + 2 * kv_dim;
                    let qkv = &mut ws.qkv[..n * width];
                    w.matmul(xn, qkv, &mut ws.acts, threads)?;
                    for (t, r) in qkv.chunks_exact(width).enumerate() {
                        q[t * q_dim..(t + 1) * q_dim].copy_from_slice(&r[..q_dim]);
                        k[t * kv_dim..(t + 1) * kv_dim].copy_from_slice(&r[q_dim..q_dim + kv_dim]);
                        v[t * kv_dim..(t + 1) * kv_dim].copy_from_slice(&r[q_dim + kv_dim..]);
                    }
                }
            }
            if let Some(norm) = &a.q_norm {
                norm.apply_in_place(q);
            }
            if let Some(norm) = &a.k_norm {
                norm.apply_in_place(k);
            }
            let rope = a.rope.map(|i| self.ropes[i].for_context(n_ctx));
            if let (Some(i), Some(rope)) = (a.rope, rope) {
                if table_of != Some(i) {
                    ws.rope.fill_positions(rope, &ws.pos[..n]);
                    table_of = Some(i);
                }
            }
            // Rotate, store, attend: sequence by sequence.
            let att = &mut ws.att[..n * q_dim];
            let shape = AttnShape {
                n_heads: s.n_heads,
                n_kv_heads: s.n_kv_heads,
                head_dim: hd,
                scale: a.scale,
                window: a.window,
                softcap: a.softcap,
                sinks: a.sinks.as_deref(),
            };
            let mut r0 = 0;
            for seq in seqs.iter_mut() {
                let rows = r0..r0 + seq.n;
                r0 += seq.n;
                if rows.is_empty() {
                    continue;
                }
                let pos0 = seq.cache.len;
                let kv = &mut seq.cache.layers[l];
                for t in rows.clone() {
                    let q_t = &mut q[t * q_dim..(t + 1) * q_dim];
                    let k_t = &mut k[t * kv_dim..(t + 1) * kv_dim];
                    if let Some(rope) = rope {
                        let (cos, sin) = ws.rope.at(t);
                        rope.apply(q_t, hd, cos, sin);
                        rope.apply(k_t, hd, cos, sin);
                    }
                    kv.store(ws.pos[t], k_t, &v[t * kv_dim..(t + 1) * kv_dim]);
                }
                let at = Positions {
                    start: pos0,
                    n: rows.len(),
                };
                attention(
                    &q[rows.start * q_dim..rows.end * q_dim],
                    kv,
                    at,
                    &shape,
                    &mut ws.attn_scratch,
                    &mut att[rows.start * q_dim..rows.end * q_dim],
                    threads,
                );
            }
            dump_rows(dump, "Qcur", Some(l), q, n)?;
            dump_rows(dump, "Kcur", Some(l), k, n)?;
            dump_rows(dump, "Vcur", Some(l), v, n)?;
            dump_rows(dump, "kqv_out", Some(l), att, n)?;
            let proj = &mut ws.proj[..n * dim];
            a.out.matmul(att, proj, &mut ws.acts, threads)?;
            dump_rows(dump, "attn_out", Some(l), proj, n)?;
            residual_add(x, proj, block.post_attn_norm.as_ref(), xn);
            if block.post_attn_norm.is_some() {
                dump_rows(dump, "attn_post_norm", Some(l), xn, n)?;
            }
            dump_rows(dump, "ffn_inp", Some(l), x, n)?;

            block.ffn_norm.apply(x, xn);
            dump_rows(dump, "ffn_norm", Some(l), xn, n)?;
            let (gate, up) = (&mut ws.gate[..n * ffn], &mut ws.up[..n * ffn]);
            match &block.mlp {
                Mlp::Gated {
                    gate: wg,
                    up: wu,
                    down,
                    act,
                } => {
                    let jobs = &mut [MatmulJob::new(wg, &mut *gate), MatmulJob::new(wu, &mut *up)];
                    matmul_many(jobs, xn, &mut ws.acts, threads)?;
                    let hidden = match act {
                        // up = silu(gate) * up, with the kernels' vectorized SiLU.
                        GatedAct::Silu => {
                            silu_mul(gate, up);
                            &*up
                        }
                        GatedAct::GeluTanh => {
                            geglu_in_place(gate, up);
                            &*gate
                        }
                    };
                    down.matmul(hidden, proj, &mut ws.acts, threads)?;
                }
                Mlp::Plain { up: wu, down, act } => {
                    wu.matmul(xn, up, &mut ws.acts, threads)?;
                    activate(*act, up);
                    down.matmul(up, proj, &mut ws.acts, threads)?;
                }
                Mlp::Moe(moe) => moe.forward(xn, proj, gate, up, &mut ws.acts, threads)?,
            }
            dump_rows(dump, "ffn_out", Some(l), proj, n)?;
            residual_add(x, proj, block.post_ffn_norm.as_ref(), xn);
            if block.post_ffn_norm.is_some() {
                dump_rows(dump, "ffn_post_norm", Some(l), xn, n)?;
            }
            dump_rows(dump, "l_out", Some(l), x, n)?;
        }
        Ok(())
    }

    /// Final norm, output projection and soft-capping of the hidden states
    /// of rows `rows` of `ws.x`, into `out` (`n_vocab` per row).
    pub fn head_rows(
        &self,
        rows: Range<usize>,
        ws: &mut Workspace,
        threads: &Threads,
        out: &mut [f32],
    ) -> Result<(), Error> {
        let (dim, n) = (self.shape.dim, rows.len());
        self.head.norm.apply(
            &ws.x[rows.start * dim..rows.end * dim],
            &mut ws.xn[..n * dim],
        );
        self.head
            .output
            .matmul(&ws.xn[..n * dim], out, &mut ws.acts, threads)?;
        if let Some(cap) = self.head.softcap {
            let inv = 1.0 / cap;
            for v in out.iter_mut() {
                *v = (*v * inv).tanh() * cap;
            }
        }
        if let Some(dump) = ws.dump.as_deref() {
            dump.write("result_norm", None, &ws.xn[..n * dim], n)?;
            dump.write("result_output", None, out, n)?;
        }
        Ok(())
    }

    /// One forward pass over several sequences at once (continuous
    /// batching): each item's tokens go at the next positions of its cache,
    /// which advances. `logits` receives, item after item, `n_vocab` values
    /// for each row the item asked for. Every value is bit-identical to
    /// running that sequence alone. The items' tokens must total at most
    /// [`MAX_CHUNK`], and every cache must have room for its tokens.
    pub fn forward_batch(
        &self,
        items: &mut [BatchItem],
        ws: &mut Workspace,
        threads: &Threads,
        logits: &mut Vec<f32>,
    ) -> Result<(), Error> {
        let nv = self.shape.n_vocab;
        let mut tokens = Vec::with_capacity(MAX_CHUNK);
        for item in items.iter() {
            if item.tokens.is_empty() {
                return Err(Error::Input("a batch item has no tokens".into()));
            }
            check_room(item.cache, item.tokens.len())?;
            tokens.extend_from_slice(item.tokens);
        }
        if tokens.len() > MAX_CHUNK {
            return Err(Error::Input(format!(
                "a batch of {} tokens is larger than {MAX_CHUNK}",
                tokens.len()
            )));
        }
        let mut seqs: Vec<SeqRows> = items
            .iter_mut()
            .map(|it| SeqRows {
                n: it.tokens.len(),
                cache: &mut *it.cache,
            })
            .collect();
        self.forward_rows(&tokens, &mut seqs, ws, threads)?;
        drop(seqs);
        // Move the rows whose logits are wanted to the front of `ws.x`, in
        // order (each goes to an index no later than its own, so none is
        // overwritten before it is read), and run the head once over them:
        // one pass over the output matrix for the whole batch.
        let dim = self.shape.dim;
        let (mut r0, mut k) = (0, 0);
        for item in items.iter_mut() {
            let n = item.tokens.len();
            item.cache.len += n;
            let rows = match item.logits {
                Logits::All => r0..r0 + n,
                Logits::Last => r0 + n - 1..r0 + n,
            };
            for r in rows {
                if r != k {
                    ws.x.copy_within(r * dim..(r + 1) * dim, k * dim);
                }
                k += 1;
            }
            r0 += n;
        }
        logits.clear();
        logits.resize(k * nv, 0.0);
        self.head_rows(0..k, ws, threads, logits)
    }
}

/// `x += norm(y)` with a post-norm, else `x += y` (`tmp`: scratch rows).
fn residual_add(x: &mut [f32], y: &[f32], post_norm: Option<&Norm>, tmp: &mut [f32]) {
    match post_norm {
        Some(norm) => {
            norm.apply(y, tmp);
            add_in_place(x, tmp);
        }
        None => add_in_place(x, y),
    }
}
