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

use ferrite_kernels::math::exp_shifted_sum;

use crate::models::seq2seq::forward::{Encoded, HypCache, StepRow, Workspace};
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
        }
    }
}

/// `x - max - log(sum(exp(x - max)))` in place; `exps` (as long as `x`)
/// is scratch for the exponentials, which the kernels' vectorized
/// `exp_shifted_sum` computes and sums (the same bits in every kernel set).
fn log_softmax(x: &mut [f32], exps: &mut [f32]) {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
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
    let n_vocab = c.n_vocab;
    // One row of scratch per thread for the log-softmax.
    let mut scratch = vec![0f32; threads.count() * n_vocab];
    while searches.iter().any(|s| !s.done) {
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
            model.step(&mut rows, threads, ws, &mut logits)?;
        }
        let rules = Rules {
            opts,
            eos: c.eos,
            n_vocab,
        };
        score_rows(
            &searches,
            &owners,
            &mut logits,
            &mut scratch,
            rules,
            threads,
        );
        choose(&mut searches, &mut logits, rules, threads);
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

/// What scoring and choosing need besides the rows: the options, `</s>`
/// and the vocabulary size (values per row).
#[derive(Clone, Copy)]
struct Rules<'a> {
    opts: &'a SearchOptions,
    eos: u32,
    n_vocab: usize,
}

/// Turns each row of `logits` (row `r` is the next-token logits of
/// running hypothesis `owners[r]` = (input, beam)) into its scores, in
/// place: the processed logits (greedy), or the beam's score plus the
/// processed log-probabilities (beam search). Each row depends only on its
/// own values and hypothesis, so the rows are split across threads
/// (`scratch`: `n_vocab` values per thread).
fn score_rows(
    searches: &[Search],
    owners: &[(usize, usize)],
    logits: &mut [f32],
    scratch: &mut [f32],
    rules: Rules,
    threads: &Threads,
) {
    let (opts, n) = (rules.opts, rules.n_vocab);
    let rows = DisjointSlice::new(&mut logits[..owners.len() * n]);
    let scratch = DisjointSlice::new(scratch);
    threads.split_indexed(owners.len(), |thread, range| {
        // SAFETY: row `thread` of the scratch is this thread's only.
        let exps = unsafe { scratch.segment(thread * n, n) };
        for r in range {
            let (i, b) = owners[r];
            let h = &searches[i].running[b];
            // SAFETY: row r is in this thread's range only.
            let row = unsafe { rows.segment(r * n, n) };
            if opts.num_beams == 1 {
                process(opts, rules.eos, &h.seq, row);
                continue;
            }
            log_softmax(row, exps);
            process(opts, rules.eos, &h.seq, row);
            if opts.renormalize {
                log_softmax(row, exps);
            }
            row.iter_mut().for_each(|v| *v += h.score);
        }
    });
}

/// Each unfinished input's next hypotheses from its rows of scores (in
/// the order of the inputs, `num_beams` rows each), inputs split across
/// threads.
fn choose(searches: &mut [Search], scores: &mut [f32], rules: Rules, threads: &Threads) {
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
    let rows = DisjointSlice::new(scores);
    threads.split(active.len(), |range| {
        for &(i, r) in &active[range] {
            // SAFETY: input i, and its rows r..r + nb, are in this
            // thread's range only.
            let (s, scores) =
                unsafe { (&mut searches.segment(i, 1)[0], rows.segment(r * n, nb * n)) };
            if nb == 1 {
                greedy_step(s, scores, rules.opts, rules.eos);
            } else {
                beam_step(s, scores, rules.opts, rules.eos, n);
            }
        }
    });
}

/// Greedy search's step: the arg-max of the processed logits `scores`.
fn greedy_step(s: &mut Search, scores: &[f32], opts: &SearchOptions, eos: u32) {
    let h = &mut s.running[0];
    // The first of equal maxima, as torch.argmax.
    let mut best = 0;
    for (t, &v) in scores.iter().enumerate() {
        if v > scores[best] {
            best = t;
        }
    }
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

/// Beam search's step, from the scores of every continuation of every
/// running beam (`logits`, beam score + processed log-probs, from
/// [`score_rows`]).
fn beam_step(s: &mut Search, logits: &[f32], opts: &SearchOptions, eos: u32, n_vocab: usize) {
    let nb = opts.num_beams;
    let cur_len = s.running[0].seq.len();
    let k = 2 * nb;
    let top = top_k(logits, k);
    let gen_len = (cur_len + 1 - 1) as f64;
    let penalty = gen_len.powf(f64::from(opts.length_penalty)) as f32;
    let full = s.finished.iter().all(|f| f.1);
    let mut cands: Vec<(Hyp, usize, bool)> = Vec::with_capacity(k);
    for &flat in &top {
        let (b, t) = (flat / n_vocab, (flat % n_vocab) as u32);
        let mut seq = s.running[b].seq.clone();
        seq.push(t);
        let ends = t == eos || seq.len() >= opts.max_length;
        cands.push((
            Hyp {
                seq,
                score: logits[flat],
            },
            b,
            ends,
        ));
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
    let mut running = Vec::with_capacity(nb);
    let mut caches = Vec::with_capacity(nb);
    for &ci in &chosen {
        let (h, parent, _) = &cands[ci];
        uses[*parent] -= 1;
        // The last user of a parent's cache takes it; others copy it.
        let cache = if uses[*parent] == 0 {
            old_caches[*parent].take().unwrap_or_default()
        } else {
            old_caches[*parent].clone().unwrap_or_default()
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
