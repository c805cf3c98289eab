//! The encoder-decoder forward passes: [`Seq2Seq::encode`] runs the encoder
//! once per input (several inputs packed one after another, no padding) and
//! computes every decoder layer's cross-attention keys and values once;
//! [`Seq2Seq::step`] feeds one token to each of many hypotheses at once
//! (rows of one product), each with its own self-attention cache (the
//! library's [`KvCache`], in one-position blocks: [`KvCache::rows`], so
//! that beam search forks it without copying a row) and its input's
//! cross-attention keys and values.
//!
//! Attention runs per (row, head) in one fixed order: scores, softmax,
//! weighted sum of values added in position order (a row's heads together,
//! so that each cached key and value row is read once per query row). Together with the
//! row-independent matrix products this makes every row's values the same
//! bits whatever else is in the batch and whatever the thread count.

use ferrite_kernels::math::Activation;

use super::weights::{apply, apply_same_input, each_row};
use super::{AttnWeights, Ffn, Norm, NormPlacement, Positions, Seq2Seq};
use ferrite_kernels::attend_f32::Listed;

use crate::dump::{begin_pass, dump_rows, TensorDump};
use crate::kv_cache::{KvCache, LayerKv};
use crate::layers::attention::core::{attend, F32Rows, Scoring};
use crate::parallel::{DisjointSlice, Threads};
use crate::tensor::{QuantizedActs, TILE_ROWS};
use crate::Error;

/// One input after the encoder.
pub struct Encoded {
    /// Tokens in the input.
    pub len: usize,
    /// Last hidden state, `(len, dim)` (kept for the library's own tests
    /// only: the decoder reads `cross`).
    #[cfg(any(test, feature = "internals"))]
    pub hidden: Vec<f32>,
    /// Per decoder layer: cross-attention keys and values, `(len, dim)` each.
    pub cross: Vec<(Vec<f32>, Vec<f32>)>,
}

/// One row of a decoder step: the token fed, the hypothesis's cache and
/// its input's encoder output.
pub struct StepRow<'a> {
    pub token: u32,
    pub cache: &'a mut KvCache,
    pub source: &'a Encoded,
}

/// Buffers reused across calls.
#[derive(Default)]
pub struct Workspace {
    pub(super) acts: QuantizedActs,
    pub(super) x: Vec<f32>,
    pub(super) h: Vec<f32>,
    pub(super) q: Vec<f32>,
    pub(super) k: Vec<f32>,
    pub(super) v: Vec<f32>,
    pub(super) attn: Vec<f32>,
    pub(super) proj: Vec<f32>,
    pub(super) up: Vec<f32>,
    pub(super) gate: Vec<f32>,
    /// Where the passes write their named intermediates (`None`: nowhere).
    pub(crate) dump: Option<std::sync::Arc<TensorDump>>,
}

/// The names a tensor dump gives one residual sub-block's points: its
/// input norm (pre-norm models only), its output before the residual add,
/// and the sum after it (after the norm, for post-norm models).
pub(super) struct Points {
    pub(super) norm: &'static str,
    pub(super) out: &'static str,
    pub(super) sum: &'static str,
}

/// The encoder layers' attention and feed-forward halves (`enc.`: the
/// encoder pass; llama.cpp's T5 encoder graph names them without it).
const ENC_ATTN: Points = Points {
    norm: "enc.attn_norm",
    out: "enc.attn_out",
    sum: "enc.ffn_inp",
};
const ENC_FFN: Points = Points {
    norm: "enc.ffn_norm",
    out: "enc.ffn_out",
    sum: "enc.l_out",
};

pub(super) fn resize(v: &mut Vec<f32>, n: usize) {
    v.resize(n, 0.0);
}

// The f32 output layer's tiles are transposed sixteen rows at a time.
const _: () = assert!(TILE_ROWS <= 16);

/// A receiver of logit tiles: `f(thread, vocab, tile)` gets the logits of
/// vocabulary entries `vocab` (at most `TILE_ROWS`, starting at a
/// multiple of it) for every row of the step, entry `v`'s for row `r` at
/// `tile[(v - vocab.start) * rows + r]`; `thread` is the calling thread's
/// index (`0..threads.count()`). Called from the step's threads, each tile
/// once.
pub type TileFn<'f> = dyn Fn(usize, std::ops::Range<usize>, &mut [f32]) + Sync + 'f;

/// What [`Seq2Seq::step_unbiased`] does with the logits.
pub enum Head<'a> {
    /// Stores them, `(rows, n_vocab)`.
    Logits(&'a mut Vec<f32>),
    /// Hands them over tile by tile, never storing them all.
    Tiles(&'a TileFn<'a>),
}

/// The keys and values a query row attends to: rows of a matrix (`ld`
/// values each: every head's, one after the other), positions in order,
/// or positions `0..n` of a hypothesis' cache layer.
#[derive(Clone, Copy)]
pub(super) enum Keys<'a> {
    Matrix(&'a [f32], &'a [f32]),
    Cache(&'a LayerKv),
}

/// Where one query row's keys and values are, and its score biases.
pub(super) struct KeySpan<'a> {
    /// Rows of `ld` values (every head's, one after the other), unless
    /// `rows` lists them.
    pub(super) keys: &'a [f32],
    pub(super) values: &'a [f32],
    /// Positions attended: `0..n`.
    pub(super) n: usize,
    /// Added to score `j` of head `h` at `h * n + j` (T5 relative
    /// positions), `(n_heads, n)`.
    pub(super) bias: Option<&'a [f32]>,
    /// The key and value rows of position `j`, read from value 0 on
    /// (`keys`' and `values`' row `j` if `None`).
    pub(super) rows: Option<Listed<'a>>,
}

/// Heads `heads` of one query row `q` (`(n_heads, head_dim)`): per head,
/// softmax over `span`'s positions of `scale * q_h . k_j,h + bias_h,j`,
/// times the values, into `out` (the heads' `head_dim` values one after
/// the other), by the library's one attention core over the rows
/// ([`F32Rows`]). Each key and value row is read once, in position order,
/// for all these heads; per head the operations and their order are
/// those of one head on its own (scores, softmax, values added in
/// position order).
pub(super) fn attend_heads(
    q: &[f32],
    span: &KeySpan,
    ld: usize,
    (heads, hd): (std::ops::Range<usize>, usize),
    scale: f32,
    scores: &mut Vec<f32>,
    out: &mut [f32],
) {
    let (n, first) = (span.n, heads.start * hd);
    // Head `i` of the call reads its key j at keys[row * ld + i * hd], from
    // the first of these heads; its biases from head heads.start's.
    let src = F32Rows {
        keys: &span.keys[first.min(span.keys.len())..],
        values: &span.values[first.min(span.values.len())..],
        ld,
        n,
        head_dim: hd,
        rows: span.rows.map(|l| Listed { offset: first, ..l }),
    };
    let how = Scoring {
        bias: span.bias.map(|b| &b[heads.start * n..]),
        ..Scoring::scaled(scale)
    };
    if scores.len() < heads.len() * n {
        scores.resize(heads.len() * n, 0.0);
    }
    attend(&src, &q[first..heads.end * hd], heads.len(), &how, scores, out);
}

/// Attention of every head of `m` query rows (`q`, `(m, n_heads *
/// head_dim)`) into `out` (same shape), split across threads by row (by
/// row and head when there are too few rows to keep every thread busy).
/// `span(row, bias)` gives that row's keys and values ([`Keys`]), number
/// of positions, and whether it filled `bias` with the score biases
/// (`(n_heads, positions)`).
pub(super) fn attend_rows<'a>(
    c: &super::Seq2SeqConfig,
    q: &[f32],
    m: usize,
    out: &mut [f32],
    threads: &Threads,
    span: impl Fn(usize, &mut Vec<f32>) -> (Keys<'a>, usize, bool) + Sync,
) {
    let (hd, qd, nh) = (c.head_dim, c.n_heads * c.head_dim, c.n_heads);
    // Heads per work item: all of a row's, or one when rows are few.
    let per = if m >= 2 * threads.count() { nh } else { 1 };
    let groups = nh.div_ceil(per);
    let out = DisjointSlice::new(out);
    threads.split(m * groups, |items| {
        let (mut scores, mut bias) = (Vec::new(), Vec::new());
        // A cache's rows of the item's positions, keys and values.
        let (mut key_rows, mut value_rows) = (Vec::new(), Vec::new());
        for item in items {
            let (r, g) = (item / groups, item % groups);
            let heads = g * per..((g + 1) * per).min(nh);
            let (kv, n, biased) = span(r, &mut bias);
            let (keys, values, rows) = match kv {
                Keys::Matrix(k, v) => (k, v, None),
                Keys::Cache(layer) => {
                    key_rows.clear();
                    value_rows.clear();
                    key_rows.extend((0..n).map(|p| layer.key_f32(p)));
                    value_rows.extend((0..n).map(|p| layer.value_f32(p)));
                    let listed = Listed {
                        keys: &key_rows[..],
                        values: &value_rows[..],
                        offset: 0,
                    };
                    (&[][..], &[][..], Some(listed))
                }
            };
            let span = KeySpan {
                keys,
                values,
                n,
                bias: biased.then_some(&bias[..]),
                rows,
            };
            let qr = &q[r * qd..(r + 1) * qd];
            // SAFETY: (row, head group) items are split across threads,
            // so these heads' values of row r are written here only.
            let o = unsafe { out.segment(r * qd + heads.start * hd, heads.len() * hd) };
            attend_heads(qr, &span, qd, (heads, hd), c.attn_scale, &mut scores, o);
        }
    });
}

impl Seq2Seq {
    /// Width of the hidden states.
    pub fn dim(&self) -> usize {
        self.config.dim
    }

    /// Width of the attention heads together (`n_heads * head_dim`; T5
    /// models may have it differ from `dim`).
    pub(super) fn qdim(&self) -> usize {
        self.config.n_heads * self.config.head_dim
    }

    /// The relative position biases, if the model has them.
    pub(super) fn relative(&self) -> Option<&super::RelativeBias> {
        match &self.positions {
            Positions::Relative(r) => Some(r),
            Positions::Sinusoidal { .. } => None,
        }
    }

    /// Token embedding times the scale, plus the position vector
    /// (sinusoidal models), into `row`.
    pub(super) fn embed_row(&self, token: u32, pos: usize, row: &mut [f32]) -> Result<(), Error> {
        let (dim, t) = (self.dim(), token as usize);
        if t >= self.config.n_vocab {
            return Err(Error::TokenOutOfRange {
                token,
                n_vocab: self.config.n_vocab,
            });
        }
        let scale = self.config.embed_scale;
        for (o, &e) in row.iter_mut().zip(&self.embed[t * dim..(t + 1) * dim]) {
            *o = e * scale;
        }
        if let Positions::Sinusoidal { table, n } = &self.positions {
            if pos >= *n {
                return Err(Error::Input(format!(
                    "position {pos} is past the model's {n} positions"
                )));
            }
            for (o, &p) in row.iter_mut().zip(&table[pos * dim..(pos + 1) * dim]) {
                *o += p;
            }
        }
        Ok(())
    }

    /// Runs the encoder over `inputs` (token ids each) and computes every
    /// decoder layer's cross-attention keys and values.
    pub fn encode(
        &self,
        inputs: &[&[u32]],
        threads: &Threads,
        ws: &mut Workspace,
    ) -> Result<Vec<Encoded>, Error> {
        let dim = self.dim();
        let mut starts = vec![0usize];
        for s in inputs {
            if s.is_empty() {
                return Err(Error::Input(
                    "an empty input has no tokens to encode".into(),
                ));
            }
            if let Some(max) = self.config.max_positions {
                if s.len() > max {
                    return Err(Error::Input(format!(
                        "input of {} tokens is longer than the model's {max} positions",
                        s.len()
                    )));
                }
            }
            starts.push(starts[starts.len() - 1] + s.len());
        }
        let total = starts[inputs.len()];
        resize(&mut ws.x, total * dim);
        for (s, &start) in inputs.iter().zip(&starts) {
            for (p, &tok) in s.iter().enumerate() {
                let row = &mut ws.x[(start + p) * dim..(start + p + 1) * dim];
                self.embed_row(tok, p, row)?;
            }
        }
        let dump = ws.dump.clone();
        let dump = dump.as_deref();
        begin_pass(dump);
        dump_rows(dump, "enc.inp_embd", None, &ws.x, total)?;
        let mut x = std::mem::take(&mut ws.x);
        for (l, layer) in self.encoder.iter().enumerate() {
            let at = (l, &ENC_ATTN);
            self.residual(&mut x, &layer.attn_norm, at, ws, threads, |this, h, ws| {
                let spans = |row: usize| -> (usize, usize) {
                    // The input holding packed row `row`.
                    let i = starts.partition_point(|&s| s <= row) - 1;
                    (starts[i], starts[i + 1] - starts[i])
                };
                this.self_attention(&layer.attn, h, &spans, threads, ws)?;
                // The heads' outputs before the output projection.
                dump_rows(ws.dump.as_deref(), "enc.kqv_out", Some(l), &ws.attn, total)
            })?;
            let at = (l, &ENC_FFN);
            self.residual(&mut x, &layer.ffn_norm, at, ws, threads, |this, h, ws| {
                this.ffn(&layer.ffn, h, total, threads, ws)
            })?;
        }
        if let Some(norm) = &self.encoder_norm {
            x.chunks_exact_mut(dim).for_each(|r| norm.apply_in_place(r));
        }
        // What cross-attention reads, after the final norm if there is one.
        dump_rows(dump, "enc.result_norm", None, &x, total)?;
        let mut out: Vec<Encoded> = (0..inputs.len())
            .map(|i| Encoded {
                len: inputs[i].len(),
                #[cfg(any(test, feature = "internals"))]
                hidden: x[starts[i] * dim..starts[i + 1] * dim].to_vec(),
                cross: Vec::with_capacity(self.decoder.len()),
            })
            .collect();
        for layer in &self.decoder {
            let qd = self.qdim();
            resize(&mut ws.k, total * qd);
            resize(&mut ws.v, total * qd);
            apply(
                &layer.cross_attn.k,
                &x,
                total,
                &mut ws.k,
                None,
                &mut ws.acts,
                threads,
            )?;
            apply(
                &layer.cross_attn.v,
                &x,
                total,
                &mut ws.v,
                None,
                &mut ws.acts,
                threads,
            )?;
            for (i, e) in out.iter_mut().enumerate() {
                let r = starts[i] * qd..starts[i + 1] * qd;
                e.cross.push((ws.k[r.clone()].to_vec(), ws.v[r].to_vec()));
            }
        }
        ws.x = x;
        Ok(out)
    }

    /// `x = norm(x + f(x))` (post-norm) or `x = x + f(norm(x))` (pre-norm),
    /// row by row (rows split across threads); `f` reads its input from `h`
    /// and leaves its output in `ws.proj`. A tensor dump gets layer `l`'s
    /// `points`.
    pub(super) fn residual(
        &self,
        x: &mut [f32],
        norm: &Norm,
        (l, points): (usize, &Points),
        ws: &mut Workspace,
        threads: &Threads,
        f: impl FnOnce(&Self, &[f32], &mut Workspace) -> Result<(), Error>,
    ) -> Result<(), Error> {
        let dim = self.dim();
        let mut h = std::mem::take(&mut ws.h);
        h.clear();
        h.extend_from_slice(x);
        let m = x.len() / dim;
        let dump = ws.dump.clone();
        let dump = dump.as_deref();
        if self.config.placement == NormPlacement::Pre {
            each_row(&mut h, dim, threads, |r| norm.apply_in_place(r));
            let dumped = dump_rows(dump, points.norm, Some(l), &h, m);
            if dumped.is_err() {
                ws.h = h;
                return dumped;
            }
        }
        let result = f(self, &h, ws);
        ws.h = h;
        result?;
        dump_rows(dump, points.out, Some(l), &ws.proj[..m * dim], m)?;
        let post = self.config.placement == NormPlacement::Post;
        let proj = &ws.proj[..];
        let xs = DisjointSlice::new(x);
        threads.split(m, |rows| {
            // SAFETY: the row ranges of different threads are disjoint, so
            // are these segments.
            let xs = unsafe { xs.segment(rows.start * dim, rows.len() * dim) };
            let ps = &proj[rows.start * dim..rows.end * dim];
            for (xr, pr) in xs.chunks_exact_mut(dim).zip(ps.chunks_exact(dim)) {
                xr.iter_mut().zip(pr).for_each(|(a, &b)| *a += b);
                if post {
                    norm.apply_in_place(xr);
                }
            }
        });
        dump_rows(dump, points.sum, Some(l), x, m)
    }

    /// Q, K and V of `m` rows of `h` into `ws.q`, `ws.k`, `ws.v`; sizes
    /// `ws.attn` and `ws.proj` for the attention that follows.
    pub(super) fn project_qkv(
        &self,
        w: &AttnWeights,
        h: &[f32],
        m: usize,
        threads: &Threads,
        ws: &mut Workspace,
    ) -> Result<(), Error> {
        let qd = self.qdim();
        for buf in [&mut ws.q, &mut ws.k, &mut ws.v, &mut ws.attn] {
            resize(buf, m * qd);
        }
        resize(&mut ws.proj, m * self.dim());
        let mut jobs = [
            (&w.q, &mut ws.q[..]),
            (&w.k, &mut ws.k[..]),
            (&w.v, &mut ws.v[..]),
        ];
        apply_same_input(&mut jobs, h, m, &mut ws.acts, threads)
    }

    /// Encoder self-attention of the packed rows of `h` into `ws.proj`:
    /// row `r` attends to the rows `spans(r)` = (first row, count) of its
    /// own input, with bidirectional relative position biases (T5).
    pub(super) fn self_attention(
        &self,
        w: &AttnWeights,
        h: &[f32],
        spans: &(dyn Fn(usize) -> (usize, usize) + Sync),
        threads: &Threads,
        ws: &mut Workspace,
    ) -> Result<(), Error> {
        let qd = self.qdim();
        let m = h.len() / self.dim();
        let rel = self.relative();
        self.project_qkv(w, h, m, threads, ws)?;
        let (q, k, v) = (&ws.q[..], &ws.k[..], &ws.v[..]);
        let c = &self.config;
        attend_rows(c, q, m, &mut ws.attn, threads, |r, bias| {
            let (first, n) = spans(r);
            if let Some(rb) = rel {
                bias.clear();
                for h in 0..c.n_heads {
                    for j in 0..n {
                        let rel_pos = j as i64 - (r - first) as i64;
                        let b =
                            super::relative_bucket(rel_pos, true, rb.n_buckets, rb.max_distance);
                        bias.push(rb.encoder[b * c.n_heads + h]);
                    }
                }
            }
            (
                Keys::Matrix(&k[first * qd..], &v[first * qd..]),
                n,
                rel.is_some(),
            )
        });
        apply(&w.o, &ws.attn, m, &mut ws.proj, None, &mut ws.acts, threads)
    }

    /// The feed-forward block over `m` rows of `h` into `ws.proj`.
    pub(super) fn ffn(
        &self,
        f: &Ffn,
        h: &[f32],
        m: usize,
        threads: &Threads,
        ws: &mut Workspace,
    ) -> Result<(), Error> {
        let dim = self.dim();
        resize(&mut ws.proj, m * dim);
        match f {
            Ffn::Plain { up, down, act } => {
                resize(&mut ws.up, m * up.rows());
                apply(up, h, m, &mut ws.up, Some(*act), &mut ws.acts, threads)?;
                apply(down, &ws.up, m, &mut ws.proj, None, &mut ws.acts, threads)
            }
            Ffn::Gated {
                gate,
                up,
                down,
                act,
            } => {
                resize(&mut ws.up, m * up.rows());
                resize(&mut ws.gate, m * gate.rows());
                apply(gate, h, m, &mut ws.gate, Some(*act), &mut ws.acts, threads)?;
                apply(up, h, m, &mut ws.up, None, &mut ws.acts, threads)?;
                ws.up.iter_mut().zip(&ws.gate).for_each(|(u, &g)| *u *= g);
                apply(down, &ws.up, m, &mut ws.proj, None, &mut ws.acts, threads)
            }
        }
    }
}

/// The logits bias `bias` added to one row of logits (one f32 add per
/// value: the same bits wherever it is done).
pub fn add_logits_bias(row: &mut [f32], bias: &[f32]) {
    row.iter_mut().zip(bias).for_each(|(o, &b)| *o += b);
}

/// The activation named by a Hugging Face config (`activation_function`,
/// `dense_act_fn`).
pub fn hf_activation(name: &str) -> Option<Activation> {
    Some(match name {
        "swish" | "silu" => Activation::Silu,
        "relu" => Activation::Relu,
        "gelu" => Activation::GeluErf,
        "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => Activation::GeluTanh,
        _ => return None,
    })
}
