//! Greedy and beam search for a decoder-only model (`ferrite run
//! --beams N`): transformers' `generate(num_beams=N, do_sample=False)` on
//! one prompt (see the parent module for the rules).
//!
//! The prompt is prefilled once; its logits score the first step of every
//! beam (they are all the prompt then; HF scores all but the first -1e9)
//! and its cache is copied to each. After that every step feeds each
//! running hypothesis' last token through its own KV cache ([`crate::kv_cache::KvCache`]:
//! cloning it forks the sequence) and scores all its logits.

use super::{choose, each_banned, forced_picks, score_all, Hyp, Rules, Search, SearchOptions, NEG};
use crate::models::decoder::Logits;
use crate::models::CausalLm;
use crate::parallel::Threads;
use crate::Error;

/// Searches for the best continuation of `prompt` (`opts.max_length`
/// counts the prompt, as HF's `max_length`; it is capped at the model's
/// training context). `eos` ends a hypothesis (HF's `eos_token_id`).
/// Returns the generated tokens, `eos` included if produced.
pub fn generate_decoder(
    model: &dyn CausalLm,
    prompt: &[u32],
    eos: u32,
    opts: &SearchOptions,
    threads: Threads,
) -> Result<Vec<u32>, Error> {
    if opts.num_beams == 0 {
        return Err(Error::Input("num_beams must be at least 1".into()));
    }
    if prompt.is_empty() {
        return Err(Error::Input("the prompt is empty (no tokens)".into()));
    }
    let n_ctx = opts.max_length.min(model.n_ctx_train());
    if prompt.len() >= n_ctx {
        return Err(Error::ContextFull {
            needed: prompt.len() + 1,
            used: 0,
            n_ctx,
        });
    }
    let opts = &SearchOptions {
        max_length: n_ctx,
        ..opts.clone()
    };
    let nb = opts.num_beams;
    let n_vocab = model.n_vocab();
    let rules = Rules {
        opts,
        eos,
        n_vocab,
        bias: None,
    };

    let mut state = model.new_state(n_ctx, threads.clone())?;
    let mut logits = Vec::new();
    model.forward(prompt, &mut state, Logits::Last, &mut logits)?;
    let mut search = Search {
        prompt_len: prompt.len(),
        running: (0..nb)
            .map(|b| Hyp {
                seq: prompt.to_vec(),
                score: if b == 0 { 0.0 } else { NEG },
            })
            .collect(),
        caches: vec![state.cache.clone(); nb],
        finished: vec![
            (
                Hyp {
                    seq: Vec::new(),
                    score: NEG,
                },
                false,
            );
            nb
        ],
        improvable: true,
        done: false,
    };
    // At the first step every beam's logits are the prompt's.
    let mut rows: Vec<Vec<f32>> = vec![logits.clone(); nb];
    loop {
        opts.cancel.check()?;
        let picks: Vec<Vec<(usize, f32)>> = search
            .running
            .iter()
            .zip(&mut rows)
            .map(|(h, row)| {
                forced_picks(h, rules).unwrap_or_else(|| {
                    let (max, log_sum) = log_softmax_terms(row, h, rules);
                    score_all(row, max, log_sum, h, rules)
                })
            })
            .collect();
        choose(std::slice::from_mut(&mut search), &picks, rules, &threads);
        if search.done {
            break;
        }
        for ((h, cache), row) in search.running.iter().zip(&mut search.caches).zip(&mut rows) {
            let last = *h.seq.last().expect("a hypothesis holds its prompt");
            std::mem::swap(&mut state.cache, cache);
            let fed = model.forward(&[last], &mut state, Logits::Last, row);
            std::mem::swap(&mut state.cache, cache);
            fed?;
        }
    }
    let best = if nb == 1 {
        &search.running[0]
    } else {
        &search.finished[0].0
    };
    Ok(best.seq.get(prompt.len()..).unwrap_or_default().to_vec())
}

/// The maximum M of `row` and ln(sum of e^(v - M)) (summed in f64), the
/// terms of its log-softmax `v - M - log_sum`; with `renormalize_logits`
/// the tokens `h` bans are left out of the sum (the second log-softmax
/// after the processors). (0, 0) where every logit is -inf, as the
/// encoder-decoder search does.
fn log_softmax_terms(row: &[f32], h: &Hyp, rules: Rules) -> (f32, f32) {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if max == f32::NEG_INFINITY {
        return (0.0, 0.0);
    }
    let mut sum: f64 = row.iter().map(|&v| f64::from(v - max).exp()).sum();
    if rules.opts.renormalize {
        let mut banned = Vec::new();
        each_banned(rules.opts, rules.eos, &h.seq, |t| banned.push(t));
        banned.sort_unstable();
        banned.dedup();
        for t in banned {
            if let Some(&v) = row.get(t) {
                sum -= f64::from(v - max).exp();
            }
        }
    }
    (max, sum.ln() as f32)
}
