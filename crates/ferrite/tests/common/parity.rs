//! Comparing a decoder model with llama.cpp's goldens (testdata/llama/,
//! made by scripts/make-llama-goldens.py).

use ferrite::models::decoder::Logits;
use ferrite::models::open_causal_lm;
use ferrite::parallel::Threads;
use serde_json::Value;

use super::{argmax, ids};

fn golden_json(name: &str) -> Value {
    let path = super::testdata().join("llama").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

/// Greedy continuations vs llama.cpp's. Every case must match exactly or
/// diverge only at a near tie seen from both sides: llama.cpp's top-2
/// margin there is below `max_tie_margin`, and in our logits llama.cpp's
/// token is within `max_tie_margin` of ours.
pub fn check_greedy(short_name: &str, max_tie_margin: f32) {
    let golden = golden_json(&format!("{short_name}-greedy.json"));
    let (_file, model) = open_causal_lm(&super::real_model(short_name)).unwrap();
    let mut exact = 0;
    let mut report = Vec::new();
    let mut failures = Vec::new();
    let cases = golden.as_array().unwrap();
    for case in cases {
        let prompt = ids(&case["prompt_ids"]);
        let want = ids(&case["tokens"]);
        let mut st = model
            .new_state(prompt.len() + want.len() + 1, Threads::new(2))
            .unwrap();
        let mut logits = Vec::new();
        model
            .forward(&prompt, &mut st, Logits::Last, &mut logits)
            .unwrap();
        let mut got = Vec::new();
        // Our logit margin of our token over llama.cpp's, at each step.
        let mut our_margins = Vec::new();
        for &theirs in &want {
            let t = argmax(&logits);
            got.push(t);
            our_margins.push(logits[t as usize] - logits[theirs as usize]);
            model
                .forward(&[t], &mut st, Logits::Last, &mut logits)
                .unwrap();
        }
        match got.iter().zip(&want).position(|(a, b)| a != b) {
            None => exact += 1,
            Some(i) => {
                let top2 = &case["top2"][i];
                let second = top2[2].as_u64().unwrap() as u32;
                let margin = (top2[1].as_f64().unwrap() - top2[3].as_f64().unwrap()) as f32;
                let ours = our_margins[i];
                let line = format!(
                    "{:?}: diverges at {i}: ours {} vs {}; ours is llama.cpp's top-2: {}, its top-2 margin {margin:.4}, our margin {ours:.4}",
                    case["prompt"].as_str().unwrap(),
                    got[i],
                    want[i],
                    got[i] == second
                );
                if margin > max_tie_margin || ours > max_tie_margin {
                    failures.push(line.clone());
                }
                report.push(line);
            }
        }
    }
    eprintln!(
        "{short_name}: {exact}/{} greedy continuations identical to llama.cpp",
        cases.len()
    );
    for line in &report {
        eprintln!("  {line}");
    }
    assert!(cases.len() >= 10);
    assert!(
        failures.is_empty(),
        "divergences beyond near-ties: {failures:#?}"
    );
}

/// SplitMix64 finaliser, as in the golden script.
fn mix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A stored logits sketch: `{golden}.json` + `.bin` (see the golden script).
struct Sketch {
    /// Random projections per position.
    p: usize,
    n_vocab: usize,
    tokens: Vec<u32>,
    top1: Vec<u32>,
    /// Per position: `p` projections, then the sum of squares.
    stored: Vec<f64>,
}

impl Sketch {
    fn load(golden: &str) -> Sketch {
        let meta = golden_json(&format!("{golden}.json"));
        let blob = std::fs::read(super::testdata().join(format!("llama/{golden}.bin"))).unwrap();
        Sketch {
            p: meta["projections"].as_u64().unwrap() as usize,
            n_vocab: meta["n_vocab"].as_u64().unwrap() as usize,
            tokens: ids(&meta["ids"]),
            top1: ids(&meta["top1"]),
            stored: blob
                .chunks_exact(8)
                .map(|b| f64::from_le_bytes(b.try_into().unwrap()))
                .collect(),
        }
    }

    /// Position `t`'s projections and sum of squares.
    fn row(&self, t: usize) -> &[f64] {
        &self.stored[t * (self.p + 1)..(t + 1) * (self.p + 1)]
    }
}

/// Per-position comparison of logits with a stored reference.
pub struct Scores {
    /// Whether the top-1 tokens agree.
    pub agree: Vec<bool>,
    /// Squared error (estimated from the projections).
    pub err: Vec<f64>,
    /// The reference's sum of squares.
    pub norm: Vec<f64>,
}

impl Scores {
    /// Top-1 agreement and NMSE over the positions in `range`.
    pub fn over(&self, range: std::ops::Range<usize>) -> (f64, f64) {
        let n = range.len() as f64;
        let agree = self.agree[range.clone()].iter().filter(|&&a| a).count() as f64;
        let err: f64 = self.err[range.clone()].iter().sum();
        let norm: f64 = self.norm[range].iter().sum();
        (agree / n, err / norm)
    }

    pub fn len(&self) -> usize {
        self.agree.len()
    }
}

/// Our next-token logits against a stored reference (`{golden}`:
/// llama.cpp's logits, or an exact f64 forward pass), position by position,
/// the squared error estimated from the stored random projections.
pub fn logits_scores(short_name: &str, golden: &str) -> Scores {
    let sk = Sketch::load(golden);
    let (p, n_vocab) = (sk.p, sk.n_vocab);
    let (_file, model) = open_causal_lm(&super::real_model(short_name)).unwrap();
    let mut st = model.new_state(sk.tokens.len(), Threads::new(2)).unwrap();
    let mut logits = Vec::new();
    model
        .forward(&sk.tokens, &mut st, Logits::All, &mut logits)
        .unwrap();
    assert_eq!(logits.len(), sk.tokens.len() * n_vocab);

    // signs[p][v] = +-1 as in the golden script, as f32 for fast dots.
    let signs: Vec<f32> = (0..p)
        .flat_map(|pi| {
            (0..n_vocab).map(move |v| {
                let word = mix64(((pi as u64) << 32) | (v as u64 >> 6));
                if (word >> (v & 63)) & 1 == 1 {
                    1.0
                } else {
                    -1.0
                }
            })
        })
        .collect();
    let mut scores = Scores {
        agree: Vec::new(),
        err: Vec::new(),
        norm: Vec::new(),
    };
    for (t, row) in logits.chunks_exact(n_vocab).enumerate() {
        scores.agree.push(argmax(row) == sk.top1[t]);
        let rec = sk.row(t);
        let mut sq = 0f64;
        for (pi, sign_row) in signs.chunks_exact(n_vocab).enumerate() {
            // f32 within chunks of 64, f64 across them: exact enough for an
            // estimate whose own noise is ~sqrt(2/P).
            let proj: f64 = row
                .chunks(64)
                .zip(sign_row.chunks(64))
                .map(|(a, b)| f64::from(a.iter().zip(b).map(|(x, s)| x * s).sum::<f32>()))
                .sum();
            sq += (proj - rec[pi]).powi(2);
        }
        scores.err.push(sq / p as f64);
        scores.norm.push(rec[p]);
    }
    scores
}

/// Top-1 agreement and NMSE of our next-token logits against a stored
/// reference, over all its positions (see [`logits_scores`]).
pub fn logits_agreement(short_name: &str, golden: &str) -> (f64, f64) {
    let scores = logits_scores(short_name, golden);
    let n = scores.len();
    let (top1_rate, nmse) = scores.over(0..n);
    eprintln!(
        "{short_name} vs {golden}: top-1 agreement {}/{n} = {:.2}%, NMSE (estimated) {nmse:.3e}",
        (top1_rate * n as f64).round(),
        100.0 * top1_rate
    );
    (top1_rate, nmse)
}

/// Stored logits `theirs` (llama.cpp's) against the stored reference
/// `reference` (an exact forward pass of the same first tokens), position by
/// position, from the two sketches alone (projections are linear, so their
/// differences estimate the squared error).
pub fn stored_scores(theirs: &str, reference: &str) -> Scores {
    let (a, r) = (Sketch::load(theirs), Sketch::load(reference));
    let n = r.tokens.len();
    assert_eq!(
        a.tokens[..n],
        r.tokens[..],
        "{theirs} and {reference} differ in tokens"
    );
    assert_eq!(a.p, r.p);
    let mut scores = Scores {
        agree: Vec::new(),
        err: Vec::new(),
        norm: Vec::new(),
    };
    for t in 0..n {
        let (x, y) = (a.row(t), r.row(t));
        scores.agree.push(a.top1[t] == r.top1[t]);
        let sq: f64 = (0..r.p).map(|pi| (x[pi] - y[pi]).powi(2)).sum();
        scores.err.push(sq / r.p as f64);
        scores.norm.push(y[r.p]);
    }
    scores
}

/// The stored figures of llama.cpp against the exact reference `golden`.
pub fn llama_cpp_vs_exact(golden: &str) -> (f64, f64) {
    let meta = golden_json(&format!("{golden}.json"));
    (
        meta["llama_cpp_top1"].as_f64().unwrap(),
        meta["llama_cpp_nmse"].as_f64().unwrap(),
    )
}

/// How well llama.cpp agrees with its own `{golden}` logits when it
/// computes them one token at a time instead of in one batch -- top-1
/// agreement, NMSE, and the largest change of a top-1-over-top-2 margin:
/// its own numerical noise floor on that model.
pub fn llama_cpp_self_agreement(golden: &str) -> (f64, f64, f32) {
    let meta = golden_json(&format!("{golden}.json"));
    (
        meta["llama_cpp_self_top1"].as_f64().unwrap(),
        meta["llama_cpp_self_nmse"].as_f64().unwrap(),
        meta["llama_cpp_self_margin_max"].as_f64().unwrap() as f32,
    )
}
