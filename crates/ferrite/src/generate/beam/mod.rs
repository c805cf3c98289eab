//! Greedy and beam search, step for step as `transformers`' `generate`
//! does them: for encoder-decoder models over many inputs at once
//! (`seq2seq`), and for decoder-only models (`decoder`). This module
//! holds what both share: the options, the logits processors, and how a
//! step's picks become the next hypotheses (`choose`).
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
//! - lengths count from the end of the prompt (`decoder_prompt_len`: the
//!   decoder start token for encoder-decoders, the prompt for decoders);
//!   `max_length` counts the prompt too.
//!
//! Greedy search (`num_beams = 1`) is HF's: the arg-max of the processed
//! logits until `</s>` or `max_length`.
//!
//! Reference: huggingface/transformers `generation/utils.py`
//! (`_beam_search`, `_sample`), `generation/logits_process.py`.

mod decoder;
mod seq2seq;

pub use decoder::generate_decoder;
pub use seq2seq::generate;

use ferrite_kernels::columns;

use super::cancel::Cancel;
use crate::models::seq2seq::forward::add_logits_bias;
use crate::parallel::{DisjointSlice, Threads};

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
    /// Exponent of the length a finished hypothesis's score is divided by (HF's `length_penalty`).
    pub length_penalty: f32,
    /// When the search stops (HF's `early_stopping`).
    pub early_stopping: EarlyStopping,
    /// 0: off.
    pub no_repeat_ngram_size: usize,
    /// Tokens never generated (`bad_words_ids` entries of one token).
    pub banned: Vec<u32>,
    /// Forced at `max_length - 1` (`forced_eos_token_id`).
    pub forced_eos: Option<u32>,
    /// Log-softmax again after the processors.
    pub renormalize: bool,
    /// Checked before every step: once set, `generate` returns
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
    /// Tokens, the prompt (decoder start) first.
    seq: Vec<u32>,
    score: f32,
}

/// One input's search state; `C` is a hypothesis' key/value cache
/// (forked by cloning when two continuations extend one hypothesis).
struct Search<C> {
    /// Tokens every hypothesis starts with (HF's `decoder_prompt_len`).
    prompt_len: usize,
    running: Vec<Hyp>,
    caches: Vec<C>,
    /// `num_beams` slots, best first; `finished[i].1` says whether slot i
    /// holds a finished hypothesis.
    finished: Vec<(Hyp, bool)>,
    improvable: bool,
    done: bool,
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
fn choose<C: Clone + Default + Send>(
    searches: &mut [Search<C>],
    picks: &[Vec<(usize, f32)>],
    rules: Rules,
    threads: &Threads,
) {
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
fn greedy_step<C>(s: &mut Search<C>, best: usize, opts: &SearchOptions, eos: u32) {
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
fn beam_step<C: Clone + Default>(
    s: &mut Search<C>,
    top: &[(usize, f32)],
    opts: &SearchOptions,
    eos: u32,
    n_vocab: usize,
) {
    let nb = opts.num_beams;
    let cur_len = s.running[0].seq.len();
    let k = 2 * nb;
    let gen_len = (cur_len + 1 - s.prompt_len) as f64;
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
    let mut old_caches: Vec<Option<C>> = std::mem::take(&mut s.caches)
        .into_iter()
        .map(Some)
        .collect();
    let mut uses = vec![0usize; nb];
    for &ci in &chosen {
        uses[cands[ci].1] += 1;
    }
    // The caches of beams no continuation extends: their buffers take
    // the copies of forked ones.
    let mut spare: Vec<C> = (0..nb)
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
        EarlyStopping::Never if opts.length_penalty > 0.0 => opts.max_length - s.prompt_len,
        _ => next_len - s.prompt_len,
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
