//! Greedy and beam search for encoder-decoder models, step for step as
//! `transformers`' `generate` does them, over many inputs at once.
//!
//! Every step feeds one token to each running hypothesis of every
//! unfinished input as rows of one [`Seq2Seq::step`]; an input's choices
//! depend only on its own rows, so its output is the same alone or in any
//! batch. Beam search keeps `num_beams` running hypotheses per input, each
//! with its own self-attention cache ([`HypCache`]); a hypothesis that two
//! continuations extend is forked by cloning its cache.
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

use ferrite_kernels::math::{argmax_first, exp_shifted_sum, max_value};

use super::cancel::Cancel;
use crate::models::seq2seq::forward::{add_logits_bias, Encoded, HypCache, StepRow, Workspace};
use crate::models::seq2seq::Seq2Seq;
use crate::parallel::{DisjointSlice, Threads};
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

/// `x - max - log(sum(exp(x - max)))` in place; `exps` (as long as `x`)
/// is scratch for the exponentials, which the kernels' vectorized
/// `exp_shifted_sum` computes and sums (the same bits in every kernel set).
fn log_softmax(x: &mut [f32], exps: &mut [f32]) {
    let max = max_value(x);
    if max == f32::NEG_INFINITY {
        return;
    }
    let exps = &mut exps[..x.len()];
    exps.copy_from_slice(x);
    let log_sum = exp_shifted_sum(exps, max).ln();
    x.iter_mut().for_each(|v| *v = *v - max - log_sum);
}

/// The logits processors on one row of scores for hypothesis `seq`
/// (decoder start token included).
fn process(opts: &SearchOptions, eos: u32, seq: &[u32], scores: &mut [f32]) {
    let n = opts.no_repeat_ngram_size;
    let cur = seq.len();
    if n > 0 && cur + 1 >= n {
        // Tokens that followed the last n-1 tokens before.
        let prefix = &seq[cur + 1 - n..];
        for w in seq.windows(n) {
            if &w[..n - 1] == prefix {
                if let Some(s) = scores.get_mut(w[n - 1] as usize) {
                    *s = f32::NEG_INFINITY;
                }
            }
        }
    }
    for &b in &opts.banned {
        if b != eos {
            if let Some(s) = scores.get_mut(b as usize) {
                *s = f32::NEG_INFINITY;
            }
        }
    }
    if let Some(e) = opts.forced_eos {
        if cur + 1 == opts.max_length {
            scores.fill(f32::NEG_INFINITY);
            if let Some(s) = scores.get_mut(e as usize) {
                *s = 0.0;
            }
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
    let mut logits = Vec::new();
    let mut picks = Vec::new();
    let n_vocab = c.n_vocab;
    // One row of scratch per thread for the log-softmax.
    let mut scratch = vec![0f32; threads.count() * n_vocab];
    while searches.iter().any(|s| !s.done) {
        opts.cancel.check()?;
        // Rows: every running hypothesis of every unfinished input (all
        // of them for beam search; greedy has one per input).
        let mut owners = Vec::new();
        {
            let mut rows: Vec<StepRow> = Vec::new();
            for (i, (s, src)) in searches.iter_mut().zip(inputs).enumerate() {
                if s.done {
                    continue;
                }
                for (b, (h, cache)) in s.running.iter().zip(s.caches.iter_mut()).enumerate() {
                    owners.push((i, b));
                    rows.push(StepRow {
                        token: *h.seq.last().expect("a hypothesis has its start token"),
                        cache,
                        source: src,
                    });
                }
            }
            // The logits bias is added by score_rows, row by row.
            model.step_unbiased(&mut rows, threads, ws, &mut logits)?;
        }
        let rules = Rules {
            opts,
            eos: c.eos,
            n_vocab,
            bias: model.logits_bias.as_deref(),
        };
        let rows = Rows {
            owners: &owners,
            logits: &mut logits,
            scratch: &mut scratch,
            picks: &mut picks,
        };
        score_rows(&searches, rows, rules, threads);
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
/// `owners[r]` = (input, beam); `scratch` is `n_vocab` values per thread;
/// `picks` receives each row's best continuations.
struct Rows<'a> {
    owners: &'a [(usize, usize)],
    logits: &'a mut [f32],
    scratch: &'a mut [f32],
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

/// Scores each row of `rows.logits` and keeps its best continuations in
/// `rows.picks[r]` as (token, score): the row plus the logits bias, then
/// the processed logits (greedy: their arg-max, the first of equal
/// maxima as torch.argmax) or the beam's score plus the processed
/// log-probabilities (beam search: the `2 * num_beams` best, best first,
/// ties lower token first). Everything is done to one row while it is in
/// cache, after the product wrote it: the 61,950-wide rows of a batch
/// are read from memory once. Each row depends only on its own values and
/// hypothesis, so the rows are split across threads.
fn score_rows(searches: &[Search], rows: Rows, rules: Rules, threads: &Threads) {
    let (opts, n, owners) = (rules.opts, rules.n_vocab, rows.owners);
    let k = picks_per_row(opts);
    rows.picks.resize(owners.len(), Vec::new());
    let logits = DisjointSlice::new(&mut rows.logits[..owners.len() * n]);
    let scratch = DisjointSlice::new(rows.scratch);
    let picks = DisjointSlice::new(&mut rows.picks[..owners.len()]);
    threads.split_indexed(owners.len(), |thread, range| {
        // SAFETY: row `thread` of the scratch is this thread's only.
        let exps = unsafe { scratch.segment(thread * n, n) };
        for r in range {
            let (i, b) = owners[r];
            let h = &searches[i].running[b];
            // SAFETY: row r is in this thread's range only.
            let (row, picked) = unsafe { (logits.segment(r * n, n), &mut picks.segment(r, 1)[0]) };
            if let Some(bias) = rules.bias {
                add_logits_bias(row, bias);
            }
            picked.clear();
            if k == 1 {
                process(opts, rules.eos, &h.seq, row);
                let best = argmax_first(row);
                picked.extend(row.get(best).map(|&v| (best, v)));
                continue;
            }
            log_softmax(row, exps);
            process(opts, rules.eos, &h.seq, row);
            if opts.renormalize {
                log_softmax(row, exps);
            }
            row.iter_mut().for_each(|v| *v += h.score);
            picked.extend(top_k(row, k).into_iter().map(|t| (t, row[t])));
        }
    });
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
    let mut idx: Vec<usize> = Vec::with_capacity(k + 1);
    for (c, chunk) in scores.chunks(TOP_K_CHUNK).enumerate() {
        // Once k are held, a chunk whose every value is <= the k-th best
        // (no NaN) would be skipped value by value below: skip it whole,
        // in one vectorizable pass.
        if idx.len() == k {
            let floor = scores[idx[k - 1]];
            if chunk.iter().fold(true, |all, &v| all & (v <= floor)) {
                continue;
            }
        }
        for (j, &v) in chunk.iter().enumerate() {
            if idx.len() == k && v <= scores[idx[k - 1]] {
                continue;
            }
            // Insert after every element >= v (stable for ties).
            let at = idx.partition_point(|&j| scores[j] >= v);
            idx.insert(at, c * TOP_K_CHUNK + j);
            idx.truncate(k);
        }
    }
    idx
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
