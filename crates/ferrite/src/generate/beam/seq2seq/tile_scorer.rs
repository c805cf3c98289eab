//! Beam search's scoring of an encoder-decoder step from the output
//! layer's tiles ([`BeamScorer`]), without storing the logits.

use ferrite_kernels::columns;
use ferrite_kernels::math::exp;

use std::ops::Range;

use super::super::{
    each_banned, forced, forced_picks, picks_per_row, score_all, Hyp, Rules, Search,
};
use crate::kv_cache::KvCache;
use crate::models::seq2seq::forward::Workspace;
use crate::models::seq2seq::Seq2Seq;
use crate::parallel::{DisjointSlice, Threads};
use crate::tensor::TILE_ROWS;
use crate::Error;

/// Raw logits [`BeamScorer`] keeps per hypothesis beyond its `2 *
/// num_beams` picks: room for banned tokens among the best, and the margin
/// that shows the picks complete.
const EXTRA_CANDIDATES: usize = 4;

/// A beam search step's hypotheses, for [`BeamScorer::finish`]: column
/// (hypothesis) `r` is `owners[r]` = (input, beam) of `searches`; the
/// model and workspace of the step give its logits again if needed.
pub(super) struct Step<'a, 'w> {
    pub(super) searches: &'a [Search<KvCache>],
    pub(super) owners: &'a [(usize, usize)],
    pub(super) model: &'a Seq2Seq,
    pub(super) ws: &'w mut Workspace,
}

/// Beam search's scoring, from the output layer's tiles (`TILE_ROWS`
/// vocabulary entries x the step's hypotheses, see `Head::Tiles`) while
/// they are in cache, so that the 61,950 x hypotheses logits are never
/// stored and read back. Each hypothesis' token scores are its logits plus
/// the logits bias, log-softmaxed (`v - M - ln(sum(e^(v - M)))`, M the
/// maximum), processed, plus the beam's score; its picks are the
/// `2 * num_beams` best, best first, ties lower token first.
///
/// From each tile, per hypothesis (vectorized across the hypotheses by
/// `ferrite_kernels::columns`): the tile's maximum m and sum of e^(v - m),
/// and the best raw logits so far (per thread). At the end M is the
/// largest m, the sum is the tiles' sums times e^(m - M) added in tile
/// order (the same whatever the threads), and the picks are scored from
/// the best raw logits: scores rise with the logits, so the best scores
/// are among the best logits, unless banned tokens or equal scores reach
/// the last logit kept; then the hypothesis' logits are computed again and
/// all scored, by the same formula on every token. (A forced token's
/// scores need no logits: -inf but its own.)
#[derive(Default)]
pub(super) struct BeamScorer {
    /// Hypotheses this step.
    w: usize,
    /// Raw logits kept per hypothesis.
    keep: usize,
    /// Per tile, per hypothesis: the maximum and the sum of e^(v - max).
    tile_max: Vec<f32>,
    tile_sum: Vec<f32>,
    /// Per thread, per hypothesis: the best (token, logit + bias).
    tops: Vec<Vec<columns::Top>>,
    /// Per thread, per hypothesis: the `keep`-th best of `tops` once it
    /// holds `keep`, else NaN (a tile whose maximum is not above it has
    /// nothing to add; NaN compares false, so such a tile is scanned).
    floors: Vec<Vec<f32>>,
    /// (token, hypothesis) of every token a hypothesis bans, in token
    /// order, and its logit + bias once seen.
    watch: Vec<(usize, usize)>,
    watched: Vec<f32>,
    /// After [`BeamScorer::finish`], per hypothesis: M and the log-sum
    /// (0 and 0 where every logit is -inf).
    max: Vec<f32>,
    log_sum: Vec<f32>,
}

impl BeamScorer {
    /// Ready for a step of the hypotheses `running` (in the step's order).
    pub(super) fn start<'h>(
        &mut self,
        running: impl Iterator<Item = &'h Hyp>,
        rules: Rules,
        threads: &Threads,
    ) {
        self.watch.clear();
        let mut w = 0;
        for (c, h) in running.enumerate() {
            let first = self.watch.len();
            each_banned(rules.opts, rules.eos, &h.seq, |t| {
                if t < rules.n_vocab {
                    self.watch.push((t, c));
                }
            });
            self.watch[first..].sort_unstable();
            let mut seen = first;
            for i in first..self.watch.len() {
                if i == first || self.watch[i] != self.watch[seen - 1] {
                    self.watch[seen] = self.watch[i];
                    seen += 1;
                }
            }
            self.watch.truncate(seen);
            w = c + 1;
        }
        self.watch.sort_unstable();
        self.watched.clear();
        self.watched.resize(self.watch.len(), 0.0);
        let n_tiles = rules.n_vocab.div_ceil(TILE_ROWS);
        self.w = w;
        self.keep = picks_per_row(rules.opts) + EXTRA_CANDIDATES;
        self.tile_max.clear();
        self.tile_max.resize(n_tiles * w, f32::NEG_INFINITY);
        self.tile_sum.clear();
        self.tile_sum.resize(n_tiles * w, 0.0);
        self.tops.resize(threads.count(), Vec::new());
        for t in &mut self.tops {
            t.iter_mut().for_each(Vec::clear);
            t.resize(w, Vec::new());
        }
        self.floors.resize(threads.count(), Vec::new());
        for f in &mut self.floors {
            f.clear();
            f.resize(w, f32::NAN);
        }
    }

    /// The receiver of the output layer's tiles (see the type's notes).
    pub(super) fn tile_fn<'s>(
        &'s mut self,
        bias: Option<&'s [f32]>,
    ) -> impl Fn(usize, Range<usize>, &mut [f32]) + Sync + 's {
        let (w, keep) = (self.w, self.keep);
        let tile_max = DisjointSlice::new(&mut self.tile_max);
        let tile_sum = DisjointSlice::new(&mut self.tile_sum);
        let tops = DisjointSlice::new(&mut self.tops);
        let floors = DisjointSlice::new(&mut self.floors);
        let watch = &self.watch;
        let watched = DisjointSlice::new(&mut self.watched);
        move |thread, vocab, tile| {
            let i = vocab.start / TILE_ROWS;
            // SAFETY: tile i is handed over once, so its maxima and sums
            // are written by this call only; tops[thread] by this thread
            // only (and floors[thread]).
            let (max, sum, top, floor) = unsafe {
                (
                    tile_max.segment(i * w, w),
                    tile_sum.segment(i * w, w),
                    &mut tops.segment(thread, 1)[0],
                    &mut floors.segment(thread, 1)[0],
                )
            };
            columns::tile_stats(tile, w, bias.map(|b| &b[vocab.clone()]), max, sum);
            // The best raw logits: a hypothesis' tile is scanned only if
            // its maximum would enter (NaNs, passed over here, make the
            // sum NaN, and finish then scores that hypothesis again).
            for (c, (&m, f)) in max.iter().zip(floor.iter_mut()).enumerate() {
                if m <= *f {
                    continue;
                }
                let top = &mut top[c];
                for (r, row) in tile.chunks_exact(w).enumerate() {
                    columns::insert_top(top, keep, vocab.start + r, row[c]);
                }
                *f = match top.get(keep.wrapping_sub(1)) {
                    Some(&(_, k)) if top.len() >= keep => k,
                    _ => f32::NAN,
                };
            }
            let first = watch.partition_point(|&(t, _)| t < vocab.start);
            for (j, &(t, c)) in watch.iter().enumerate().skip(first) {
                if t >= vocab.end {
                    break;
                }
                // SAFETY: entry j's token is in this tile only.
                unsafe { watched.write(j, tile[(t - vocab.start) * w + c]) };
            }
        }
    }

    /// Each hypothesis' picks into `picks[r]`, once every tile was seen.
    pub(super) fn finish(
        &mut self,
        step: &mut Step,
        rules: Rules,
        threads: &Threads,
        picks: &mut Vec<Vec<(usize, f32)>>,
    ) -> Result<(), Error> {
        self.normalize(rules);
        let (searches, owners) = (step.searches, step.owners);
        let hyp = |c: usize| &searches[owners[c].0].running[owners[c].1];
        picks.resize(self.w, Vec::new());
        let mut again = Vec::new();
        for (c, picked) in picks.iter_mut().enumerate().take(self.w) {
            match self.fast_picks(c, hyp(c), rules) {
                Some(p) => *picked = p,
                None => again.push((c, hyp(c))),
            }
        }
        let redone = self.rescore(step, &again, rules, threads)?;
        for ((c, _), p) in again.iter().zip(redone) {
            picks[*c] = p;
        }
        Ok(())
    }

    /// Each hypothesis' M and log-sum from the tiles' (0 and 0 where every
    /// logit is -inf: the logits are then left as they are). With
    /// `renormalize_logits`, the log-probabilities of the tokens left after
    /// the processors are log-softmaxed again: the same as leaving the
    /// banned tokens out of the sum (ln(sum - banned's e^(v - M))), which
    /// is how it is done here.
    fn normalize(&mut self, rules: Rules) {
        let w = self.w;
        let mut max = vec![f32::NEG_INFINITY; w];
        for tile in self.tile_max.chunks_exact(w) {
            for (m, &v) in max.iter_mut().zip(tile) {
                *m = m.max(v);
            }
        }
        let mut sums = vec![0f32; w];
        columns::rescaled_sums(&self.tile_max, &self.tile_sum, w, &max, &mut sums);
        if rules.opts.renormalize {
            for (&(_, c), &v) in self.watch.iter().zip(&self.watched) {
                if max[c] != f32::NEG_INFINITY {
                    sums[c] -= exp(v - max[c]);
                }
            }
        }
        let mut log_sum = vec![0f32; w];
        for c in 0..w {
            if max[c] == f32::NEG_INFINITY {
                max[c] = 0.0;
            } else {
                log_sum[c] = sums[c].ln();
            }
        }
        (self.max, self.log_sum) = (max, log_sum);
    }

    /// Hypothesis `h`'s (column `c`'s) picks from its best raw logits, or
    /// `None` if they may not be complete (then all its tokens must be
    /// scored: [`BeamScorer::rescore`]).
    fn fast_picks(&self, c: usize, h: &Hyp, rules: Rules) -> Option<Vec<(usize, f32)>> {
        let (opts, keep) = (rules.opts, self.keep);
        let k = picks_per_row(opts);
        let mut picked = Vec::with_capacity(k + 1);
        if forced(opts, &h.seq).is_some() {
            return forced_picks(h, rules);
        }
        // The best raw logits of the whole column, then in token order.
        let mut cands = Vec::with_capacity(keep + 1);
        for t in &self.tops {
            for &(tok, v) in &t[c] {
                columns::insert_top(&mut cands, keep, tok, v);
            }
        }
        let last = cands.last().map(|&(_, v)| v);
        cands.sort_unstable_by_key(|&(tok, _)| tok);
        let mut banned = Vec::new();
        each_banned(opts, rules.eos, &h.seq, |t| banned.push(t));
        let (max, log_sum) = (self.max[c], self.log_sum[c]);
        let score = |v: f32| ((v - max) - log_sum) + h.score;
        for &(tok, v) in &cands {
            if !banned.contains(&tok) {
                columns::insert_top(&mut picked, k, tok, score(v));
            }
        }
        // Complete if every token was kept, or if the last logit kept
        // scores below the k-th pick (every other token then does too, or
        // is banned). NaNs: not.
        let all_kept = cands.len() < keep;
        let complete = picked.len() == k
            && !log_sum.is_nan()
            && picked.iter().all(|p| !p.1.is_nan())
            && (all_kept || last.is_some_and(|v| score(v) < picked[k - 1].1));
        complete.then_some(picked)
    }

    /// The picks of hypotheses `cols` = (column, hypothesis) after
    /// [`BeamScorer::normalize`]: each column's logits computed again (the
    /// same values), and all its tokens scored ([`score_all`]) as the
    /// hypothesis says (its banned tokens, its score).
    pub(super) fn rescore(
        &self,
        step: &mut Step,
        cols: &[(usize, &Hyp)],
        rules: Rules,
        threads: &Threads,
    ) -> Result<Vec<Vec<(usize, f32)>>, Error> {
        let mut picks = vec![Vec::new(); cols.len()];
        if cols.is_empty() {
            return Ok(picks);
        }
        let n = rules.n_vocab;
        let dim = step.model.dim();
        let hidden = step.model.last_hidden(step.ws);
        let mut rows = Vec::with_capacity(cols.len() * dim);
        for &(c, _) in cols {
            rows.extend_from_slice(&hidden[c * dim..(c + 1) * dim]);
        }
        let mut logits = Vec::new();
        step.model
            .logits_of(&rows, cols.len(), &mut logits, threads, step.ws)?;
        let picks_ds = DisjointSlice::new(&mut picks[..]);
        let logits_ds = DisjointSlice::new(&mut logits[..cols.len() * n]);
        threads.split(cols.len(), |range| {
            for j in range {
                let (c, h) = cols[j];
                // SAFETY: row j and picks j are this thread's only.
                let (row, picked) =
                    unsafe { (logits_ds.segment(j * n, n), &mut picks_ds.segment(j, 1)[0]) };
                *picked = score_all(row, self.max[c], self.log_sum[c], h, rules);
            }
        });
        Ok(picks)
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::{SearchOptions, NEG};
    use super::*;

    fn xorshift(mut seed: u64) -> impl FnMut() -> u64 {
        move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        }
    }

    /// The tiles' picks ([`BeamScorer::fast_picks`]) equal scoring every
    /// token ([`score_all`]) whenever they are given, for hypotheses with
    /// n-gram bans, banned tokens, a forced token, -1e9 scores, ties among
    /// the best logits, a NaN and an all -inf column; and the tiles' M and
    /// log-sum are those of the whole column (f64, without the banned
    /// tokens when renormalizing).
    #[test]
    fn tile_picks_equal_scoring_every_token() {
        let (n, w) = (1000, 37);
        let mut next = xorshift(12345);
        let bias: Vec<f32> = (0..n).map(|_| (next() % 64) as f32 / 128.0).collect();
        let mut logits: Vec<f32> = (0..n * w)
            .map(|_| (next() % 8192) as f32 / 1024.0 - 4.0)
            .collect();
        // Column 3: its best logit twice (a tie at the top); 5: a NaN; 6:
        // all -inf.
        logits[100 * w + 3] = 9.0;
        logits[700 * w + 3] = 9.0;
        logits[400 * w + 5] = f32::NAN;
        (0..n).for_each(|v| logits[v * w + 6] = f32::NEG_INFINITY);
        let hyps: Vec<Hyp> = (0..w)
            .map(|c| Hyp {
                // Short tokens, so that n-grams repeat; column 8 one token
                // short of max_length (forced </s>).
                seq: (0..if c == 8 { 49 } else { 3 + c % 7 })
                    .map(|_| (next() % 12) as u32)
                    .collect(),
                score: if c == 2 {
                    NEG
                } else {
                    -((next() % 2000) as f32) / 100.0
                },
            })
            .collect();
        let threads = Threads::new(2);
        for (renormalize, ngram) in [(false, 0), (true, 0), (false, 2), (true, 2)] {
            let opts = SearchOptions {
                num_beams: 4,
                max_length: 50,
                no_repeat_ngram_size: ngram,
                banned: vec![7, 300],
                forced_eos: Some(0),
                renormalize,
                ..Default::default()
            };
            let rules = Rules {
                opts: &opts,
                eos: 0,
                n_vocab: n,
                bias: Some(&bias),
            };
            let mut scorer = BeamScorer::default();
            scorer.start(hyps.iter(), rules, &threads);
            {
                // The tiles in order, the first half as thread 0's, the
                // rest as thread 1's (as a product's threads split them).
                let f = scorer.tile_fn(rules.bias);
                let tiles = n.div_ceil(TILE_ROWS);
                for i in 0..tiles {
                    let vocab = i * TILE_ROWS..((i + 1) * TILE_ROWS).min(n);
                    let mut tile = logits[vocab.start * w..vocab.end * w].to_vec();
                    f(usize::from(i >= tiles / 2), vocab, &mut tile);
                }
            }
            scorer.normalize(rules);
            let mut fast = 0;
            for (c, h) in hyps.iter().enumerate() {
                let mut row: Vec<f32> = (0..n).map(|v| logits[v * w + c]).collect();
                // M and the log-sum against f64.
                let mut banned = Vec::new();
                each_banned(&opts, 0, &h.seq, |t| banned.push(t));
                let x: Vec<f32> = row.iter().zip(&bias).map(|(v, b)| v + b).collect();
                let m = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                if c != 5 && c != 6 {
                    let sum: f64 = (0..n)
                        .filter(|t| !(renormalize && banned.contains(t)))
                        .map(|t| f64::from(x[t] - m).exp())
                        .sum();
                    assert_eq!(scorer.max[c], m, "column {c}");
                    assert!(
                        (f64::from(scorer.log_sum[c]) - sum.ln()).abs() < 1e-5,
                        "column {c}"
                    );
                }
                let want = score_all(&mut row, scorer.max[c], scorer.log_sum[c], h, rules);
                if let Some(got) = scorer.fast_picks(c, h, rules) {
                    let bits = |p: &[(usize, f32)]| {
                        p.iter().map(|&(t, v)| (t, v.to_bits())).collect::<Vec<_>>()
                    };
                    assert_eq!(
                        bits(&got),
                        bits(&want),
                        "column {c} ({renormalize}, {ngram})"
                    );
                    fast += 1;
                }
            }
            // Most are given; the NaN, -inf, and -1e9 ones cannot be.
            assert!(fast >= w - 5, "{fast} of {w} from the tiles");
            for c in [2, 5, 6] {
                assert!(
                    scorer.fast_picks(c, &hyps[c], rules).is_none(),
                    "column {c}"
                );
            }
        }
    }
}
