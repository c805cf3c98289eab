//! The decoder side of [`Seq2Seq`]: [`Seq2Seq::step`] feeds one token to
//! each of many hypotheses at once (rows of one product), each with its own
//! self-attention cache (a [`KvCache`] of one-position blocks, which a
//! fork shares) and its input's cross-attention keys and values (from
//! [`Seq2Seq::encode`]), and turns the last hidden states into logits, whole
//! or tile by tile ([`Head`]). See `forward.rs` for why every row's values
//! are the same bits in any batch.

use ferrite_kernels::columns::store_columns;

use super::forward::{attend_rows, resize, Head, Keys, Points, StepRow, TileFn, Workspace};
use super::weights::apply;
use super::{AttnWeights, Proj, Seq2Seq};
use crate::dump::{begin_pass, dump_rows};
use crate::kv_cache::{KvCache, LayerKv};
use crate::parallel::Threads;
use crate::tensor::TILE_ROWS;
use crate::Error;

/// A decoder layer's three residual halves, named as llama.cpp's T5
/// decoder graph names them (`attn_norm_cross`, `cross_inp`), the cross
/// half's output `cross_attn_out` (llama.cpp reuses `kqv_out`).
const DEC_SELF: Points = Points {
    norm: "attn_norm",
    out: "attn_out",
    sum: "cross_inp",
};
const DEC_CROSS: Points = Points {
    norm: "attn_norm_cross",
    out: "cross_attn_out",
    sum: "ffn_inp",
};
const DEC_FFN: Points = Points {
    norm: "ffn_norm",
    out: "ffn_out",
    sum: "l_out",
};

impl Seq2Seq {
    /// A new, empty hypothesis cache: every decoder layer's self-attention
    /// keys and values, one position per block ([`KvCache::rows`]), so
    /// that beam search forks it (a clone) without copying a row.
    pub fn new_cache(&self) -> KvCache {
        KvCache::rows(self.qdim(), self.decoder.len())
    }

    /// Feeds one token to each row and writes the next-token logits,
    /// `(rows, n_vocab)`, into `logits` (the library's own tests; beam
    /// search runs [`Seq2Seq::step_unbiased`]).
    #[cfg(any(test, feature = "internals"))]
    pub fn step(
        &self,
        rows: &mut [StepRow],
        threads: &Threads,
        ws: &mut Workspace,
        logits: &mut Vec<f32>,
    ) -> Result<(), Error> {
        self.step_unbiased(rows, threads, ws, Head::Logits(logits))?;
        if let Some(b) = &self.logits_bias {
            super::weights::each_row(logits, self.config.n_vocab, threads, |row| {
                super::forward::add_logits_bias(row, b)
            });
        }
        Ok(())
    }

    /// As [`Seq2Seq::step`], without the logits bias (`logits_bias`): the
    /// caller adds it with [`add_logits_bias`], e.g. row by row together
    /// with its own work on the row while the row is in cache (beam
    /// search), rather than in a pass of its own over every row.
    /// `head` says what becomes of the logits: stored, or handed over tile
    /// by tile ([`Head`]). Afterwards [`Seq2Seq::last_hidden`] holds the
    /// rows' final hidden states, from which [`Seq2Seq::logits_of`] gives
    /// any rows' logits again.
    pub fn step_unbiased(
        &self,
        rows: &mut [StepRow],
        threads: &Threads,
        ws: &mut Workspace,
        head: Head,
    ) -> Result<(), Error> {
        let (dim, m) = (self.dim(), rows.len());
        let c = &self.config;
        let mut x = std::mem::take(&mut ws.x);
        resize(&mut x, m * dim);
        for (r, row) in rows.iter().enumerate() {
            if let Some(max) = c.max_positions {
                if row.cache.len >= max {
                    return Err(Error::Input(format!(
                        "output reached the model's {max} positions"
                    )));
                }
            }
            self.embed_row(row.token, row.cache.len, &mut x[r * dim..(r + 1) * dim])?;
        }
        // A cache of this model: f32 rows of its width, one per layer.
        let fits = |l: &LayerKv| l.is_f32() && l.row_bytes() == 4 * self.qdim();
        for row in rows.iter() {
            if row.cache.layers.len() != self.decoder.len() || !row.cache.layers.iter().all(fits) {
                return Err(Error::Input(
                    "a decoder cache of another model (Seq2Seq::new_cache makes one)".into(),
                ));
            }
        }
        let dump = ws.dump.clone();
        let dump = dump.as_deref();
        let result = (|| {
            begin_pass(dump);
            dump_rows(dump, "inp_embd", None, &x, m)?;
            for (l, layer) in self.decoder.iter().enumerate() {
                let at = (l, &DEC_SELF);
                self.residual(&mut x, &layer.self_norm, at, ws, threads, |this, h, ws| {
                    this.cached_attention(l, &layer.self_attn, h, rows, threads, ws)?;
                    dump_rows(ws.dump.as_deref(), "kqv_out", Some(l), &ws.attn, m)
                })?;
                let at = (l, &DEC_CROSS);
                self.residual(&mut x, &layer.cross_norm, at, ws, threads, |this, h, ws| {
                    this.cross_attention(l, &layer.cross_attn, h, rows, threads, ws)?;
                    dump_rows(ws.dump.as_deref(), "kqv_out_cross", Some(l), &ws.attn, m)
                })?;
                let at = (l, &DEC_FFN);
                self.residual(&mut x, &layer.ffn_norm, at, ws, threads, |this, h, ws| {
                    this.ffn(&layer.ffn, h, m, threads, ws)
                })?;
            }
            for row in rows.iter_mut() {
                row.cache.len += 1;
            }
            if let Some(norm) = &self.decoder_norm {
                x.chunks_exact_mut(dim).for_each(|r| norm.apply_in_place(r));
            }
            if c.output_scale != 1.0 {
                x.iter_mut().for_each(|v| *v *= c.output_scale);
            }
            if let Some(dump) = dump {
                self.dump_head(dump, &x, m, threads, ws)?;
            }
            match head {
                Head::Logits(logits) => self.logits_of(&x, m, logits, threads, ws),
                Head::Tiles(f) => self.logit_tiles(&x, m, f, threads, ws),
            }
        })();
        ws.x = x;
        result
    }

    /// A tensor dump's `result_norm` (the hidden states the output layer
    /// takes) and `result_output` (the logits, with the logits bias): the
    /// logits computed once more for the dump, whatever the step does
    /// with its own (tiles are never all stored).
    fn dump_head(
        &self,
        dump: &crate::dump::TensorDump,
        x: &[f32],
        m: usize,
        threads: &Threads,
        ws: &mut Workspace,
    ) -> Result<(), Error> {
        dump.write("result_norm", None, x, m)?;
        if dump.wants("result_output") {
            let mut logits = Vec::new();
            self.logits_of(x, m, &mut logits, threads, ws)?;
            if let Some(b) = &self.logits_bias {
                for row in logits.chunks_exact_mut(self.config.n_vocab) {
                    super::forward::add_logits_bias(row, b);
                }
            }
            dump.write("result_output", None, &logits, m)?;
        }
        Ok(())
    }

    /// The final hidden states (`(rows, dim)`, normalized and scaled as the
    /// output layer takes them) of the last [`Seq2Seq::step_unbiased`].
    pub fn last_hidden<'w>(&self, ws: &'w Workspace) -> &'w [f32] {
        &ws.x
    }

    /// The logits (without the logits bias) of `m` rows of final hidden
    /// states `hidden`, `(m, n_vocab)`, into `logits`.
    pub fn logits_of(
        &self,
        hidden: &[f32],
        m: usize,
        logits: &mut Vec<f32>,
        threads: &Threads,
        ws: &mut Workspace,
    ) -> Result<(), Error> {
        resize(logits, m * self.config.n_vocab);
        apply(
            &self.lm_head,
            hidden,
            m,
            logits,
            None,
            &mut ws.acts,
            threads,
        )
    }

    /// The logits of the `m` rows of `hidden` handed to `f` by tiles, as
    /// [`Head::Tiles`] says. A quantized output layer computes them tile by
    /// tile ([`Linear::matmul_tiles`]); an f32 one computes them all, then
    /// copies each tile out.
    fn logit_tiles(
        &self,
        hidden: &[f32],
        m: usize,
        f: &TileFn,
        threads: &Threads,
        ws: &mut Workspace,
    ) -> Result<(), Error> {
        match &self.lm_head {
            Proj::Quant(w) => w.matmul_tiles(&hidden[..m * w.cols], &mut ws.acts, threads, f),
            Proj::F32(_) => {
                let mut all = std::mem::take(&mut ws.up);
                let result = self.logits_of(hidden, m, &mut all, threads, ws);
                if result.is_ok() {
                    let (n, all) = (self.config.n_vocab, &all[..]);
                    threads.split_indexed(n.div_ceil(TILE_ROWS), |thread, tiles| {
                        let mut buf = vec![0f32; TILE_ROWS * m];
                        let mut part = [[0f32; 16]; 16];
                        for i in tiles {
                            let rows = i * TILE_ROWS..((i + 1) * TILE_ROWS).min(n);
                            let tile = &mut buf[..rows.len() * m];
                            // Sixteen tokens' values of these rows at a
                            // time, transposed into the tile.
                            for t0 in (0..m).step_by(16) {
                                let part = &mut part[..(m - t0).min(16)];
                                for (t, p) in part.iter_mut().enumerate() {
                                    let from = (t0 + t) * n + rows.start;
                                    p[..rows.len()].copy_from_slice(&all[from..from + rows.len()]);
                                }
                                store_columns(part, rows.len(), tile, m, t0);
                            }
                            f(thread, rows, tile);
                        }
                    });
                }
                ws.up = all;
                result
            }
        }
    }

    /// Decoder self-attention of each row over its cache (after storing
    /// this token's key and value), into `ws.proj`.
    fn cached_attention(
        &self,
        l: usize,
        w: &AttnWeights,
        h: &[f32],
        rows: &mut [StepRow],
        threads: &Threads,
        ws: &mut Workspace,
    ) -> Result<(), Error> {
        let (qd, m) = (self.qdim(), rows.len());
        let rel = self.relative();
        self.project_qkv(w, h, m, threads, ws)?;
        // This step's key and value of each row, at its next position.
        for (r, row) in rows.iter_mut().enumerate() {
            let (k, v) = (&ws.k[r * qd..(r + 1) * qd], &ws.v[r * qd..(r + 1) * qd]);
            row.cache.layers[l].store(row.cache.len, k, v);
        }
        let c = &self.config;
        let rows = &*rows;
        attend_rows(c, &ws.q, m, &mut ws.attn, threads, |r, bias| {
            // The row's positions, this one last.
            let pos = rows[r].cache.len;
            if let Some(rb) = rel {
                bias.clear();
                for h in 0..c.n_heads {
                    for j in 0..=pos {
                        let rel_pos = j as i64 - pos as i64;
                        let b =
                            super::relative_bucket(rel_pos, false, rb.n_buckets, rb.max_distance);
                        bias.push(rb.decoder[b * c.n_heads + h]);
                    }
                }
            }
            (Keys::Cache(&rows[r].cache.layers[l]), pos + 1, rel.is_some())
        });
        apply(&w.o, &ws.attn, m, &mut ws.proj, None, &mut ws.acts, threads)
    }

    /// Cross-attention of each row over its input's encoder keys and
    /// values, into `ws.proj`.
    fn cross_attention(
        &self,
        l: usize,
        w: &AttnWeights,
        h: &[f32],
        rows: &[StepRow],
        threads: &Threads,
        ws: &mut Workspace,
    ) -> Result<(), Error> {
        let (dim, qd, m) = (self.dim(), self.qdim(), rows.len());
        for buf in [&mut ws.q, &mut ws.attn] {
            resize(buf, m * qd);
        }
        resize(&mut ws.proj, m * dim);
        apply(&w.q, h, m, &mut ws.q, None, &mut ws.acts, threads)?;
        let c = &self.config;
        attend_rows(c, &ws.q, m, &mut ws.attn, threads, |r, _| {
            let src = rows[r].source;
            let (keys, values) = &src.cross[l];
            (Keys::Matrix(keys, values), src.len, false)
        });
        apply(&w.o, &ws.attn, m, &mut ws.proj, None, &mut ws.acts, threads)
    }
}
