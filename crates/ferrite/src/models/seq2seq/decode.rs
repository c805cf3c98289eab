//! The decoder side of [`Seq2Seq`]: [`Seq2Seq::step`] feeds one token to
//! each of many hypotheses at once (rows of one product), each with its own
//! self-attention cache ([`HypCache`], rows of the workspace's
//! [`KvArena`]) and its input's cross-attention keys and values (from
//! [`Seq2Seq::encode`]), and turns the last hidden states into logits, whole
//! or tile by tile ([`Head`]). See `forward.rs` for why every row's values
//! are the same bits in any batch.

use ferrite_kernels::columns::store_columns;

use super::forward::{attend_rows, resize, Head, HypCache, StepRow, TileFn, Workspace};
use super::weights::apply;
use super::{AttnWeights, Proj, Seq2Seq};
use crate::parallel::Threads;
use crate::tensor::TILE_ROWS;
use crate::Error;

impl Seq2Seq {
    /// A new, empty hypothesis cache.
    pub fn new_cache(&self) -> HypCache {
        HypCache::default()
    }

    /// Starts a new search in `ws`: empties its arena of keys and values
    /// (caches made before are refused from now on) and makes room for
    /// `rows` rows per layer (the hypotheses a search will run, summed
    /// over its steps; a hint), keeping at most twice that from earlier
    /// searches.
    pub fn start_search(&self, ws: &mut Workspace, rows: usize) {
        let kv = &mut ws.kv;
        kv.search += 1;
        kv.rows = 0;
        let want = rows.saturating_mul(self.qdim());
        for layers in [&mut kv.keys, &mut kv.values] {
            layers.resize_with(self.decoder.len(), Vec::new);
            for l in layers.iter_mut() {
                l.clear();
                if l.capacity() / 2 > want {
                    *l = Vec::new();
                }
                // Room is only a hint: if it cannot be had (an absurd
                // max_length), the rows grow as steps make them.
                let _ = l.try_reserve(want);
            }
        }
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
            if row.cache.len > 0 && row.cache.search != ws.kv.search {
                return Err(Error::Input(
                    "a decoder cache from an earlier search (Seq2Seq::start_search \
                     has emptied the arena since)"
                        .into(),
                ));
            }
            self.embed_row(row.token, row.cache.len, &mut x[r * dim..(r + 1) * dim])?;
        }
        // Each row's keys and values go to arena row base + r, every layer.
        let base = ws.kv.rows;
        if base + m > u32::MAX as usize {
            return Err(Error::Input(
                "too many decoder positions in one search".into(),
            ));
        }
        for layers in [&mut ws.kv.keys, &mut ws.kv.values] {
            layers.resize_with(self.decoder.len(), Vec::new);
        }
        for (r, row) in rows.iter_mut().enumerate() {
            let cache = &mut *row.cache;
            cache.search = ws.kv.search;
            cache.rows.truncate(cache.len);
            cache.rows.push((base + r) as u32);
        }
        ws.kv.rows += m;
        let result = (|| {
            for (l, layer) in self.decoder.iter().enumerate() {
                self.residual(&mut x, &layer.self_norm, ws, threads, |this, h, ws| {
                    this.cached_attention(l, &layer.self_attn, h, rows, threads, ws)
                })?;
                self.residual(&mut x, &layer.cross_norm, ws, threads, |this, h, ws| {
                    this.cross_attention(l, &layer.cross_attn, h, rows, threads, ws)
                })?;
                self.residual(&mut x, &layer.ffn_norm, ws, threads, |this, h, ws| {
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
            match head {
                Head::Logits(logits) => self.logits_of(&x, m, logits, threads, ws),
                Head::Tiles(f) => self.logit_tiles(&x, m, f, threads, ws),
            }
        })();
        ws.x = x;
        result
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
        // This step's rows: base..base + m of the arena (see step_unbiased).
        let base = ws.kv.rows - m;
        for (layer, new) in [(&mut ws.kv.keys[l], &ws.k), (&mut ws.kv.values[l], &ws.v)] {
            layer.resize(base * qd, 0.0);
            layer.extend_from_slice(&new[..m * qd]);
        }
        let c = &self.config;
        let (keys, values) = (&ws.kv.keys[l][..], &ws.kv.values[l][..]);
        attend_rows(c, &ws.q, m, &mut ws.attn, threads, |r, bias| {
            // The row's positions, this one last.
            let positions = &rows[r].cache.rows[..];
            let pos = positions.len() - 1;
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
            (keys, values, pos + 1, rel.is_some(), Some(positions))
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
            (&keys[..], &values[..], src.len, false, None)
        });
        apply(&w.o, &ws.attn, m, &mut ws.proj, None, &mut ws.acts, threads)
    }
}
