//! Greedy and beam search over an encoder-decoder model's batch of
//! inputs (see the parent module for the rules).
//!
//! Every step feeds one token to each running hypothesis of every
//! unfinished input as rows of one [`Seq2Seq::step`]; an input's choices
//! depend only on its own rows, so its output is the same alone or in any
//! batch. Beam search keeps `num_beams` running hypotheses per input, each
//! with its own self-attention cache (a [`KvCache`] of one-position
//! blocks); a hypothesis that two continuations extend is forked by
//! cloning it, which shares its rows and copies none.

use ferrite_kernels::math::argmax_first;

use super::{choose, forced_picks, process, Hyp, Rules, Search, SearchOptions, NEG};
use crate::kv_cache::KvCache;
use crate::models::seq2seq::forward::{add_logits_bias, Encoded, Head, StepRow, Workspace};
use crate::models::seq2seq::Seq2Seq;
use crate::parallel::{DisjointSlice, Threads};
use crate::Error;

mod tile_scorer;
use tile_scorer::{BeamScorer, Step};

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
    let mut searches: Vec<Search<KvCache>> = inputs
        .iter()
        .map(|_| Search {
            prompt_len: 1,
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

/// A step's rows for [`score_rows`]: row `r` of `logits` holds the
/// next-token logits (without the logits bias) of running hypothesis
/// `owners[r]` = (input, beam); `picks[r]` receives its best
/// continuations.
struct Rows<'a> {
    owners: &'a [(usize, usize)],
    logits: &'a mut [f32],
    picks: &'a mut Vec<Vec<(usize, f32)>>,
}

/// Greedy search's scoring: the arg-max of each row of `rows.logits` plus
/// the logits bias, processed (the first of equal maxima, as
/// torch.argmax), into `rows.picks[r]` as (token, logit). Everything is
/// done to one row while it is in cache; rows are split across threads.
fn score_rows(searches: &[Search<KvCache>], rows: Rows, rules: Rules, threads: &Threads) {
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
