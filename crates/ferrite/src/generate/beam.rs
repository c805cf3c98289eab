//! Greedy and beam search for encoder-decoder models, step for step as
//! `transformers`' `generate` does them, over many inputs at once.
//!
//! Every step feeds one token to each running hypothesis of every
//! unfinished input as rows of one [`Seq2Seq::step`]; an input's choices
//! depend only on its own rows, so its output is the same alone or in any
//! batch. Beam search keeps `num_beams` running hypotheses per input, each
//! with its own self-attention cache ([`HypCache`]: the rows of the search's
//! key/value arena that hold its positions); a hypothesis that two
//! continuations extend is forked by copying that list of rows.
//!
//! The rules (HF `GenerationMixin._beam_search`, transformers 5):
//! - scores are log-softmaxed logits, then the logits processors: n-gram
//!   blocking (`no_repeat_ngram_size`), banned tokens (`bad_words_ids` of
//!   one token), forced `</s>` at `max_length - 1`, and a second
//!   log-softmax if `renormalize_logits`;
//! - the `2 * num_beams` best (beam score + token score) continuations are
//!   taken; those ending in `</s>` or at `max_length` that rank in the first
//!   `num_beams` become finished candidates, scored by sum / generated
//!   length ^ `length_penalty`, and the best `num_beams` finished are kept;
//!   the best `num_beams` others run on;
//! - an input stops when all its continuations end, when (`early_stopping`
//!   true) `num_beams` hypotheses are finished, or when the best running
//!   score (divided by the length ^ penalty, the current length or, for
//!   `early_stopping = "never"` with a positive penalty, `max_length`)
//!   cannot beat the worst finished one.
//!
//! Greedy search (`num_beams = 1`) is HF's: the arg-max of the processed
//! logits until `</s>` or `max_length`.
//!
//! Reference: huggingface/transformers `generation/utils.py`
//! (`_beam_search`, `_sample`), `generation/logits_process.py`.

use ferrite_kernels::columns;
use std::ops::Range;

use ferrite_kernels::math::{argmax_first, exp};

use super::cancel::Cancel;
use crate::models::seq2seq::forward::{
    add_logits_bias, Encoded, Head, HypCache, StepRow, Workspace,
};
use crate::models::seq2seq::Seq2Seq;
use crate::parallel::{DisjointSlice, Threads};
use crate::tensor::TILE_ROWS;
use crate::Error;

/// HF's stand-in for "impossible" in beam scores.
const NEG: f32 = -1.0e9;

/// `early_stopping` of a generation config.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum EarlyStopping {
    /// Stop as soon as `num_beams` hypotheses are finished.
    True,
    /// Stop when the best running hypothesis, at its current length,
    /// cannot beat the worst finished one (HF's default).
    #[default]
    False,
    /// As `False`, but with a positive length penalty estimate the best
    /// running score at `max_length`.
    Never,
}

/// How to search.
#[derive(Clone, Debug)]
pub struct SearchOptions {
    /// 1: greedy.
    pub num_beams: usize,
    /// Longest output, counting the decoder start token (as HF's
    /// `max_length`).
    pub max_length: usize,
    pub length_penalty: f32,
    pub early_stopping: EarlyStopping,
    /// 0: off.
    pub no_repeat_ngram_size: usize,
    /// Tokens never generated (`bad_words_ids` entries of one token).
    pub banned: Vec<u32>,
    /// Forced at `max_length - 1` (`forced_eos_token_id`).
    pub forced_eos: Option<u32>,
    /// Log-softmax again after the processors.
    pub renormalize: bool,
    /// Checked before every step: once set, [`generate`] returns
    /// `Error::Cancelled`.
    pub cancel: Cancel,
}

impl Default for SearchOptions {
    fn default() -> Self {
        SearchOptions {
            num_beams: 1,
            max_length: 20,
            length_penalty: 1.0,
            early_stopping: EarlyStopping::False,
            no_repeat_ngram_size: 0,
            banned: Vec::new(),
            forced_eos: None,
            renormalize: false,
            cancel: Cancel::default(),
        }
    }
}

/// The tokens the logits processors ban after hypothesis `seq` (decoder
/// start token included): those that would repeat an n-gram
/// (`no_repeat_ngram_size`), then the banned tokens other than `</s>`.
fn each_banned(opts: &SearchOptions, eos: u32, seq: &[u32], mut ban: impl FnMut(usize)) {
    let n = opts.no_repeat_ngram_size;
    let cur = seq.len();
    if n > 0 && cur + 1 >= n {
        // Tokens that followed the last n-1 tokens before.
        let prefix = &seq[cur + 1 - n..];
        for w in seq.windows(n) {
            if &w[..n - 1] == prefix {
                ban(w[n - 1] as usize);
            }
        }
    }
    for &b in &opts.banned {
        if b != eos {
            ban(b as usize);
        }
    }
}

/// The token forced after hypothesis `seq`, if any (`forced_eos` at
/// `max_length - 1`): every other token's score becomes -inf, its own 0.
fn forced(opts: &SearchOptions, seq: &[u32]) -> Option<usize> {
    let e = opts.forced_eos?;
    (seq.len() + 1 == opts.max_length).then_some(e as usize)
}

/// The logits processors on one row of scores for hypothesis `seq`
/// (decoder start token included).
fn process(opts: &SearchOptions, eos: u32, seq: &[u32], scores: &mut [f32]) {
    each_banned(opts, eos, seq, |t| {
        if let Some(s) = scores.get_mut(t) {
            *s = f32::NEG_INFINITY;
        }
    });
    if let Some(e) = forced(opts, seq) {
        scores.fill(f32::NEG_INFINITY);
        if let Some(s) = scores.get_mut(e) {
            *s = 0.0;
        }
    }
}

/// One running or finished hypothesis.
#[derive(Clone, Debug)]
struct Hyp {
    /// Tokens, decoder start first.
    seq: Vec<u32>,
    score: f32,
}

/// One input's search state.
struct Search {
    running: Vec<Hyp>,
    caches: Vec<HypCache>,
    /// `num_beams` slots, best first; `finished[i].1` says whether slot i
    /// holds a finished hypothesis.
    finished: Vec<(Hyp, bool)>,
    improvable: bool,
    done: bool,
}

/// Generates an output for each encoded input. Returns the generated
/// tokens of each (decoder start excluded, `</s>` included if produced).
pub fn generate(
    model: &Seq2Seq,
    inputs: &[Encoded],
    opts: &SearchOptions,
    threads: &Threads,
    ws: &mut Workspace,
) -> Result<Vec<Vec<u32>>, Error> {
    if opts.num_beams == 0 {
        return Err(Error::Input("num_beams must be at least 1".into()));
    }
    if opts.max_length < 2 {
        return Err(Error::Input("max_length must be at least 2".into()));
    }
    let c = &model.config;
    let nb = opts.num_beams;
    let start = Hyp {
        seq: vec![c.decoder_start],
        score: 0.0,
    };
    let mut searches: Vec<Search> = inputs
        .iter()
        .map(|_| Search {
            running: (0..nb)
                .map(|b| Hyp {
                    score: if b == 0 { 0.0 } else { NEG },
                    ..start.clone()
                })
                .collect(),
            caches: (0..nb).map(|_| model.new_cache()).collect(),
            finished: vec![
                (
                    Hyp {
                        seq: Vec::new(),
                        score: NEG
                    },
                    false
                );
                nb
            ],
            improvable: true,
            done: false,
        })
        .collect();
    // Room for every step's keys and values (a step runs at most num_beams
    // rows per input, and there are at most max_length - 1 steps, and no
    // more than the model has positions).
    let steps = c
        .max_positions
        .map_or(opts.max_length, |p| opts.max_length.min(p));
    let most_rows = inputs.len().saturating_mul(nb).saturating_mul(steps);
    model.start_search(ws, most_rows);
    let mut logits = Vec::new();
    let mut picks = Vec::new();
    let n_vocab = c.n_vocab;
    let rules = Rules {
        opts,
        eos: c.eos,
        n_vocab,
        bias: model.logits_bias.as_deref(),
    };
    // Beam search scores the logits tile by tile as the output layer
    // makes them ([`BeamScorer`]); greedy search stores and scans them.
    let mut scorer = BeamScorer::default();
    while searches.iter().any(|s| !s.done) {
        opts.cancel.check()?;
        // Rows: every running hypothesis of every unfinished input (all
        // of them for beam search; greedy has one per input). At beam
        // search's first step an input's beams are all the same hypothesis
        // (the decoder start; HF scores all but the first -1e9): only the
        // first is run, and the others are scored from its logits (the
        // same values) and take copies of its cache.
        // At the forced last position every hypothesis' picks are known
        // without logits, and nothing follows: no step is run.
        let known: Option<Vec<Vec<(usize, f32)>>> = searches
            .iter()
            .filter(|s| !s.done)
            .flat_map(|s| &s.running)
            .map(|h| forced_picks(h, rules))
            .collect();
        if let Some(known) = known {
            picks = known;
            choose(&mut searches, &picks, rules, threads);
            continue;
        }
        let first_step = nb > 1
            && searches
                .iter()
                .all(|s| s.running.iter().all(|h| h.seq.len() == 1));
        let stepped = |b: usize| !first_step || b == 0;
        let mut owners = Vec::new();
        for (i, s) in searches.iter().enumerate() {
            if !s.done {
                owners.extend((0..s.running.len()).filter(|&b| stepped(b)).map(|b| (i, b)));
            }
        }
        if nb > 1 {
            let running = owners.iter().map(|&(i, b)| &searches[i].running[b]);
            scorer.start(running, rules, threads);
        }
        {
            let mut rows: Vec<StepRow> = Vec::new();
            for (s, src) in searches.iter_mut().zip(inputs) {
                if s.done {
                    continue;
                }
                for (b, (h, cache)) in s.running.iter().zip(s.caches.iter_mut()).enumerate() {
                    if stepped(b) {
                        rows.push(StepRow {
                            token: *h.seq.last().expect("a hypothesis has its start token"),
                            cache,
                            source: src,
                        });
                    }
                }
            }
            if nb == 1 {
                // The logits bias is added by score_rows, row by row.
                model.step_unbiased(&mut rows, threads, ws, Head::Logits(&mut logits))?;
            } else {
                let tiles = scorer.tile_fn(rules.bias);
                model.step_unbiased(&mut rows, threads, ws, Head::Tiles(&tiles))?;
            }
        }
        if nb == 1 {
            let rows = Rows {
                owners: &owners,
                logits: &mut logits,
                picks: &mut picks,
            };
            score_rows(&searches, rows, rules, threads);
        } else {
            let mut step = Step {
                searches: &searches,
                owners: &owners,
                model,
                ws,
            };
            scorer.finish(&mut step, rules, threads, &mut picks)?;
            if first_step {
                // The other beams: column c (input i's first beam) scored
                // with each one's own score.
                let mut others = Vec::new();
                for (c, &(i, _)) in owners.iter().enumerate() {
                    others.extend(searches[i].running.iter().skip(1).map(|h| (c, h)));
                }
                let mut rest = scorer
                    .rescore(&mut step, &others, rules, threads)?
                    .into_iter();
                let mut all = Vec::with_capacity(owners.len() * nb);
                for (c, &(i, _)) in owners.iter().enumerate() {
                    all.push(std::mem::take(&mut picks[c]));
                    all.extend(rest.by_ref().take(searches[i].running.len() - 1));
                }
                picks = all;
                for s in searches.iter_mut().filter(|s| !s.done) {
                    let (first, others) = s.caches.split_at_mut(1);
                    others.iter_mut().for_each(|c| c.clone_from(&first[0]));
                }
            }
        }
        choose(&mut searches, &picks, rules, threads);
    }
    Ok(searches
        .into_iter()
        .map(|s| {
            let best = if nb == 1 {
                &s.running[0]
            } else {
                &s.finished[0].0
            };
            best.seq.get(1..).unwrap_or_default().to_vec()
        })
        .collect())
}

/// What scoring and choosing need besides the rows: the options, `</s>`,
/// the vocabulary size (values per row) and the logits bias.
#[derive(Clone, Copy)]
struct Rules<'a> {
    opts: &'a SearchOptions,
    eos: u32,
    n_vocab: usize,
    bias: Option<&'a [f32]>,
}

/// A step's rows for [`score_rows`]: row `r` of `logits` holds the
/// next-token logits (without the logits bias) of running hypothesis
/// `owners[r]` = (input, beam); `picks[r]` receives its best
/// continuations.
struct Rows<'a> {
    owners: &'a [(usize, usize)],
    logits: &'a mut [f32],
    picks: &'a mut Vec<Vec<(usize, f32)>>,
}

/// How many continuations of each row [`score_rows`] keeps: the arg-max
/// (greedy), or the `2 * num_beams` best, as many as the input's whole
/// step keeps (beam search).
fn picks_per_row(opts: &SearchOptions) -> usize {
    if opts.num_beams == 1 {
        1
    } else {
        2 * opts.num_beams
    }
}

/// Greedy search's scoring: the arg-max of each row of `rows.logits` plus
/// the logits bias, processed (the first of equal maxima, as
/// torch.argmax), into `rows.picks[r]` as (token, logit). Everything is
/// done to one row while it is in cache; rows are split across threads.
fn score_rows(searches: &[Search], rows: Rows, rules: Rules, threads: &Threads) {
    let (opts, n, owners) = (rules.opts, rules.n_vocab, rows.owners);
    rows.picks.resize(owners.len(), Vec::new());
    let logits = DisjointSlice::new(&mut rows.logits[..owners.len() * n]);
    let picks = DisjointSlice::new(&mut rows.picks[..owners.len()]);
    threads.split(owners.len(), |range| {
        for r in range {
            let (i, b) = owners[r];
            let h = &searches[i].running[b];
            // SAFETY: row r is in this thread's range only.
            let (row, picked) = unsafe { (logits.segment(r * n, n), &mut picks.segment(r, 1)[0]) };
            if let Some(bias) = rules.bias {
                add_logits_bias(row, bias);
            }
            picked.clear();
            process(opts, rules.eos, &h.seq, row);
            let best = argmax_first(row);
            picked.extend(row.get(best).map(|&v| (best, v)));
        }
    });
}

/// Raw logits [`BeamScorer`] keeps per hypothesis beyond its `2 *
/// num_beams` picks: room for banned tokens among the best, and the margin
/// that shows the picks complete.
const EXTRA_CANDIDATES: usize = 4;

/// A beam search step's hypotheses, for [`BeamScorer::finish`]: column
/// (hypothesis) `r` is `owners[r]` = (input, beam) of `searches`; the
/// model and workspace of the step give its logits again if needed.
struct Step<'a, 'w> {
    searches: &'a [Search],
    owners: &'a [(usize, usize)],
    model: &'a Seq2Seq,
    ws: &'w mut Workspace,
}

/// Beam search's scoring, from the output layer's tiles (`TILE_ROWS`
/// vocabulary entries x the step's hypotheses, see [`Head::Tiles`]) while
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
struct BeamScorer {
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
    fn start<'h>(
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
    fn tile_fn<'s>(
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
    fn finish(
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
    fn rescore(
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

/// The picks of hypothesis `h` at a forced token, which need no logits:
/// every score is -inf but the forced token's, 0 + the beam's (greedy: 0),
/// so it comes first, then the first other tokens (ties, lower first).
/// `None` if `h` has no forced token here, or its score is not finite.
fn forced_picks(h: &Hyp, rules: Rules) -> Option<Vec<(usize, f32)>> {
    let e = forced(rules.opts, &h.seq)?;
    if !h.score.is_finite() || e >= rules.n_vocab {
        return None;
    }
    let k = picks_per_row(rules.opts);
    let mut picked = vec![(e, if k == 1 { 0.0 } else { 0.0 + h.score })];
    let rest = (0..rules.n_vocab).filter(|&t| t != e).take(k - 1);
    picked.extend(rest.map(|t| (t, f32::NEG_INFINITY)));
    Some(picked)
}

/// Hypothesis `h`'s picks from all its logits `row` (without the logits
/// bias; used as scratch), given its M and log-sum: each token's score
/// `((v + bias - M) - log_sum) + h.score`, processed (banned: -inf; a
/// forced token: 0 + h.score, all others -inf), the `2 * num_beams` best,
/// ties lower token first. What [`BeamScorer::fast_picks`] gives when it
/// gives picks.
fn score_all(row: &mut [f32], max: f32, log_sum: f32, h: &Hyp, rules: Rules) -> Vec<(usize, f32)> {
    if let Some(bias) = rules.bias {
        add_logits_bias(row, bias);
    }
    row.iter_mut().for_each(|v| *v = (*v - max) - log_sum);
    process(rules.opts, rules.eos, &h.seq, row);
    row.iter_mut().for_each(|v| *v += h.score);
    let k = picks_per_row(rules.opts);
    top_k(row, k).into_iter().map(|t| (t, row[t])).collect()
}

/// Each unfinished input's next hypotheses from its rows' picks (in the
/// order of the inputs, `num_beams` rows each), inputs split across
/// threads.
fn choose(searches: &mut [Search], picks: &[Vec<(usize, f32)>], rules: Rules, threads: &Threads) {
    let nb = rules.opts.num_beams;
    let n = rules.n_vocab;
    // (input, first row) of each unfinished input.
    let mut active = Vec::new();
    let mut r = 0;
    for (i, s) in searches.iter().enumerate() {
        if !s.done {
            active.push((i, r));
            r += nb;
        }
    }
    let searches = DisjointSlice::new(searches);
    threads.split(active.len(), |range| {
        for &(i, r) in &active[range] {
            // SAFETY: input i is in this thread's range only.
            let s = unsafe { &mut searches.segment(i, 1)[0] };
            let rows = &picks[r..r + nb];
            if nb == 1 {
                let best = rows[0].first().map_or(0, |&(t, _)| t);
                greedy_step(s, best, rules.opts, rules.eos);
            } else {
                let top = best_of_rows(rows, 2 * nb, n);
                beam_step(s, &top, rules.opts, rules.eos, n);
            }
        }
    });
}

/// The `k` best continuations of an input's beams, as (flat index
/// `beam * n_vocab + token`, score), best first, ties lower flat index
/// first: the first `k` of all `num_beams * n_vocab` scores sorted so.
/// Those are among the rows' own `k` best (`rows[beam]`, by the same
/// order restricted to one row), so only those are ranked here, listed in
/// flat index order so that [`top_k`]'s ties fall as over the whole.
/// (With NaN scores, which [`top_k`] orders by where they stand, the
/// choice may differ from ranking every score; finite weights give none.)
fn best_of_rows(rows: &[Vec<(usize, f32)>], k: usize, n_vocab: usize) -> Vec<(usize, f32)> {
    let mut all: Vec<(usize, f32)> = Vec::with_capacity(rows.len() * k);
    for (b, row) in rows.iter().enumerate() {
        let first = all.len();
        all.extend(row.iter().map(|&(t, v)| (b * n_vocab + t, v)));
        all[first..].sort_unstable_by_key(|&(flat, _)| flat);
    }
    let scores: Vec<f32> = all.iter().map(|&(_, v)| v).collect();
    top_k(&scores, k).into_iter().map(|i| all[i]).collect()
}

/// Greedy search's step: `best`, the arg-max of the processed logits.
fn greedy_step(s: &mut Search, best: usize, opts: &SearchOptions, eos: u32) {
    let h = &mut s.running[0];
    h.seq.push(best as u32);
    if best as u32 == eos || h.seq.len() >= opts.max_length {
        s.done = true;
    }
}

/// Values [`top_k`] checks at once against its current k-th best.
const TOP_K_CHUNK: usize = 16;

/// Indices of `scores` sorted by descending score (ties: lower index first).
fn top_k(scores: &[f32], k: usize) -> Vec<usize> {
    let mut top: columns::Top = Vec::with_capacity(k + 1);
    for (c, chunk) in scores.chunks(TOP_K_CHUNK).enumerate() {
        // Once k are held, a chunk whose every value is <= the k-th best
        // (no NaN) would be passed over value by value below: skip it
        // whole, in one vectorizable pass.
        if k > 0 && top.len() == k {
            let floor = top[k - 1].1;
            if chunk.iter().fold(true, |all, &v| all & (v <= floor)) {
                continue;
            }
        }
        for (j, &v) in chunk.iter().enumerate() {
            columns::insert_top(&mut top, k, c * TOP_K_CHUNK + j, v);
        }
    }
    top.into_iter().map(|(i, _)| i).collect()
}

/// Beam search's step, from the `2 * num_beams` best continuations of
/// the running beams (`top`: flat index `beam * n_vocab + token` and
/// score, beam score + processed log-prob; from [`best_of_rows`]).
fn beam_step(s: &mut Search, top: &[(usize, f32)], opts: &SearchOptions, eos: u32, n_vocab: usize) {
    let nb = opts.num_beams;
    let cur_len = s.running[0].seq.len();
    let k = 2 * nb;
    let gen_len = (cur_len + 1 - 1) as f64;
    let penalty = gen_len.powf(f64::from(opts.length_penalty)) as f32;
    let full = s.finished.iter().all(|f| f.1);
    let mut cands: Vec<(Hyp, usize, bool)> = Vec::with_capacity(k);
    for &(flat, score) in top {
        let (b, t) = (flat / n_vocab, (flat % n_vocab) as u32);
        let mut seq = s.running[b].seq.clone();
        seq.push(t);
        let ends = t == eos || seq.len() >= opts.max_length;
        cands.push((Hyp { seq, score }, b, ends));
    }

    // Finished: the first num_beams candidates that end, merged with the
    // finished slots; the rest carry HF's -1e9 so they never win a slot.
    let mut merged: Vec<(Hyp, bool)> = std::mem::take(&mut s.finished);
    for (rank, (h, _, ends)) in cands.iter().enumerate() {
        let just_finished = *ends && rank < nb;
        let mut score = h.score / penalty;
        if full && opts.early_stopping == EarlyStopping::True {
            score += NEG;
        }
        if !s.improvable {
            score += NEG;
        }
        if !just_finished {
            score += NEG;
        }
        merged.push((
            Hyp {
                seq: h.seq.clone(),
                score,
            },
            just_finished,
        ));
    }
    let scores: Vec<f32> = merged.iter().map(|m| m.0.score).collect();
    s.finished = top_k(&scores, nb)
        .into_iter()
        .map(|i| merged[i].clone())
        .collect();

    // Running: the best num_beams continuations that do not end.
    let run_scores: Vec<f32> = cands
        .iter()
        .map(|(h, _, ends)| if *ends { h.score + NEG } else { h.score })
        .collect();
    let chosen = top_k(&run_scores, nb);
    let mut old_caches: Vec<Option<HypCache>> = std::mem::take(&mut s.caches)
        .into_iter()
        .map(Some)
        .collect();
    let mut uses = vec![0usize; nb];
    for &ci in &chosen {
        uses[cands[ci].1] += 1;
    }
    // The caches of beams no continuation extends: their buffers take
    // the copies of forked ones.
    let mut spare: Vec<HypCache> = (0..nb)
        .filter(|&b| uses[b] == 0)
        .filter_map(|b| old_caches[b].take())
        .collect();
    let mut running = Vec::with_capacity(nb);
    let mut caches = Vec::with_capacity(nb);
    for &ci in &chosen {
        let (h, parent, _) = &cands[ci];
        uses[*parent] -= 1;
        // The last user of a parent's cache takes it; others copy it.
        let cache = if uses[*parent] == 0 {
            old_caches[*parent].take().unwrap_or_default()
        } else {
            match (spare.pop(), &old_caches[*parent]) {
                (Some(mut copy), Some(from)) => {
                    copy.clone_from(from);
                    copy
                }
                (_, from) => from.clone().unwrap_or_default(),
            }
        };
        caches.push(cache);
        running.push(Hyp {
            seq: h.seq.clone(),
            score: run_scores[ci],
        });
    }
    s.running = running;
    s.caches = caches;

    // Stopping.
    let next_len = cur_len + 1;
    let all_finished = s.finished.iter().all(|f| f.1);
    let hyp_len = match opts.early_stopping {
        EarlyStopping::Never if opts.length_penalty > 0.0 => opts.max_length - 1,
        _ => next_len - 1,
    };
    let best_possible =
        s.running[0].score / (hyp_len as f64).powf(f64::from(opts.length_penalty)) as f32;
    // Per slot: the worst finished score if that slot is finished, else
    // -1e9 (HF compares against each slot and takes any).
    let worst = s
        .finished
        .iter()
        .map(|f| f.0.score)
        .fold(f32::INFINITY, f32::min);
    let beatable = s
        .finished
        .iter()
        .any(|f| best_possible > if f.1 { worst } else { NEG });
    s.improvable = s.improvable && beatable;
    let all_end = cands.iter().all(|c| c.2);
    let stop_full = all_finished && opts.early_stopping == EarlyStopping::True;
    if !s.improvable || stop_full || all_end {
        s.done = true;
    }
}

#[cfg(test)]
mod tests {
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

    #[test]
    fn top_k_is_descending_and_stable() {
        let v = [1.0, 3.0, 3.0, -1.0, 2.0];
        assert_eq!(top_k(&v, 3), vec![1, 2, 4]);
        assert_eq!(top_k(&v, 10), vec![1, 2, 4, 0, 3]);
    }

    #[test]
    fn top_k_skipping_chunks_keeps_every_rule() {
        // Past one chunk, with ties, -inf and a NaN in later chunks: the
        // same answer as sorting (the NaN, never below the k-th best, is
        // taken as the insertion rule takes it: first).
        let mut v: Vec<f32> = (0..100).map(|i| ((i * 37) % 23) as f32).collect();
        v[40] = f32::NEG_INFINITY;
        let mut want: Vec<usize> = (0..v.len()).collect();
        want.sort_by(|&a, &b| v[b].total_cmp(&v[a]).then(a.cmp(&b)));
        for k in [1, 3, 8, 17] {
            assert_eq!(top_k(&v, k), want[..k], "k = {k}");
        }
        v[70] = f32::NAN;
        assert_eq!(top_k(&v, 3)[0], 70);
    }

    #[test]
    fn ngram_blocking_bans_repeats() {
        let opts = SearchOptions {
            no_repeat_ngram_size: 2,
            ..Default::default()
        };
        let mut s = vec![0.0; 6];
        // After "... 3 4 ... 3", 4 is banned.
        process(&opts, 0, &[5, 3, 4, 1, 3], &mut s);
        assert_eq!(s[4], f32::NEG_INFINITY);
        assert_eq!(s.iter().filter(|v| v.is_infinite()).count(), 1);
    }
}
