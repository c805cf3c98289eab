//! Checks shared by the encoder-decoder tests (Marian, T5) against the
//! goldens of `scripts/make-translation-fixtures.py`: encoder outputs,
//! decoder logits, generate() outputs, batch independence.
#![allow(dead_code)]

use ferrite::generate::beam::{generate, EarlyStopping, SearchOptions};
use ferrite::kv_cache::KvCache;
use ferrite::models::seq2seq::forward::{StepRow, Workspace};
use ferrite::parallel::Threads;
use ferrite::translate::{TranslateOptions, Translator};
use serde_json::Value;

/// Token ids stored as a JSON array.
pub fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("an array of ids")
        .iter()
        .map(|x| x.as_u64().expect("an id") as u32)
        .collect()
}

pub fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .expect("floats")
        .iter()
        .map(|x| x.as_f64().expect("a number") as f32)
        .collect()
}

pub fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// Largest difference of the encoder's last hidden state from the goldens'.
pub fn encoder_diff(tr: &Translator, goldens: &Value) -> f32 {
    let threads = Threads::new(2);
    let mut ws = Workspace::default();
    let mut worst = 0f32;
    for e in goldens["encoder"].as_array().expect("entries") {
        let input = ids(&e["ids"]);
        let out = tr
            .model()
            .encode(&[&input], &threads, &mut ws)
            .expect("encodes");
        worst = worst.max(max_diff(&out[0].hidden, &floats(&e["hidden"])));
    }
    worst
}

/// Largest difference of the decoder's logits, every position of a forced
/// decoder input fed one token at a time, from the goldens'.
pub fn logits_diff(tr: &Translator, goldens: &Value) -> f32 {
    let m = tr.model();
    let threads = Threads::new(2);
    let mut ws = Workspace::default();
    let n_vocab = m.config.n_vocab;
    let mut worst = 0f32;
    for e in goldens["decoder"].as_array().expect("entries") {
        let input = ids(&e["ids"]);
        let want = floats(&e["logits"]);
        let src = m.encode(&[&input], &threads, &mut ws).expect("encodes");
        let mut cache = m.new_cache();
        let mut logits = Vec::new();
        for (p, &tok) in ids(&e["decoder_ids"]).iter().enumerate() {
            let mut rows = [StepRow {
                token: tok,
                cache: &mut cache,
                source: &src[0],
            }];
            m.step(&mut rows, &threads, &mut ws, &mut logits)
                .expect("steps");
            worst = worst.max(max_diff(&logits, &want[p * n_vocab..(p + 1) * n_vocab]));
        }
    }
    worst
}

/// The search options of one golden `generate` run over the model's
/// defaults.
pub fn options(tr: &Translator, run: &Value) -> SearchOptions {
    let o = &run["options"];
    let mut s = tr.defaults().clone();
    s.num_beams = o["num_beams"].as_u64().expect("num_beams") as usize;
    s.max_length = o["max_length"].as_u64().expect("max_length") as usize;
    if let Some(p) = o.get("length_penalty").and_then(Value::as_f64) {
        s.length_penalty = p as f32;
    }
    if let Some(n) = o.get("no_repeat_ngram_size").and_then(Value::as_u64) {
        s.no_repeat_ngram_size = n as usize;
    }
    if o.get("early_stopping").and_then(Value::as_bool) == Some(true) {
        s.early_stopping = EarlyStopping::True;
    }
    s
}

/// Runs every golden `generate` case; returns (cases, mismatches as text).
pub fn generation_mismatches(tr: &Translator, goldens: &Value) -> (usize, Vec<String>) {
    let threads = Threads::new(2);
    let mut ws = Workspace::default();
    let (mut n, mut bad) = (0, Vec::new());
    for run in goldens["generate"].as_array().expect("runs") {
        let name = run["name"].as_str().expect("name");
        let opts = options(tr, run);
        for o in run["outputs"].as_array().expect("outputs") {
            let input = ids(&o["ids"]);
            let want = ids(&o["out"]);
            let src = tr
                .model()
                .encode(&[&input], &threads, &mut ws)
                .expect("encodes");
            let got = generate(tr.model(), &src, &opts, &threads, &mut ws).expect("generates");
            if got[0] != want {
                bad.push(format!(
                    "{name} {input:?}:\n  got  {:?}\n  want {want:?}",
                    got[0]
                ));
            }
            n += 1;
        }
    }
    (n, bad)
}

/// Asserts that encoder outputs, one decoder step's logits and whole
/// searches are the same bits for inputs batched together as alone.
pub fn assert_batch_independent(tr: &Translator, inputs: &[Vec<u32>]) {
    let threads = Threads::new(2);
    let mut ws = Workspace::default();
    let seqs: Vec<&[u32]> = inputs.iter().map(|v| &v[..]).collect();
    let together = tr
        .model()
        .encode(&seqs, &threads, &mut ws)
        .expect("encodes");
    for (s, t) in seqs.iter().zip(&together) {
        let alone = tr
            .model()
            .encode(&[s], &Threads::new(1), &mut ws)
            .expect("encodes");
        assert_eq!(
            alone[0].hidden, t.hidden,
            "encoder output depends on the batch"
        );
        assert_eq!(alone[0].cross, t.cross, "cross K/V depend on the batch");
    }
    let n_vocab = tr.model().config.n_vocab;
    let start = tr.model().config.decoder_start;
    let mut caches: Vec<_> = together.iter().map(|_| tr.model().new_cache()).collect();
    let mut batched = Vec::new();
    let mut rows: Vec<StepRow> = caches
        .iter_mut()
        .zip(&together)
        .map(|(cache, source)| StepRow {
            token: start,
            cache,
            source,
        })
        .collect();
    tr.model()
        .step(&mut rows, &threads, &mut ws, &mut batched)
        .expect("steps");
    for (i, src) in together.iter().enumerate() {
        let mut cache = tr.model().new_cache();
        let mut one = Vec::new();
        let mut rows = [StepRow {
            token: start,
            cache: &mut cache,
            source: src,
        }];
        tr.model()
            .step(&mut rows, &Threads::new(1), &mut ws, &mut one)
            .expect("steps");
        assert_eq!(
            one,
            batched[i * n_vocab..(i + 1) * n_vocab],
            "row {i} depends on the batch"
        );
    }
    for beams in [1, 4] {
        let opts = |batch| TranslateOptions {
            beams: Some(beams),
            max_length: Some(24),
            batch: Some(batch),
            ..Default::default()
        };
        let all = tr.generate_ids(inputs, &opts(32)).expect("generates");
        assert_eq!(all, tr.generate_ids(inputs, &opts(5)).expect("generates"));
        assert_eq!(all, tr.generate_ids(inputs, &opts(1)).expect("generates"));
    }
}

/// A hypothesis forked from another (its cache cloned: the same rows,
/// shared) and stepped in the same batch gives the bits of a fresh cache
/// fed the same tokens one row at a time; a cache of another shape is
/// refused with an error.
pub fn assert_forks_share_and_foreign_caches_fail(tr: &Translator, input: &[u32]) {
    let m = tr.model();
    let threads = Threads::new(2);
    let mut ws = Workspace::default();
    let src = m.encode(&[input], &threads, &mut ws).expect("encodes");
    let start = m.config.decoder_start;
    let (x, y) = (5u32, 7u32);
    let mut logits = Vec::new();
    let mut a = m.new_cache();
    let mut rows = [StepRow {
        token: start,
        cache: &mut a,
        source: &src[0],
    }];
    m.step(&mut rows, &threads, &mut ws, &mut logits)
        .expect("steps");
    let mut b = a.clone();
    let mut rows = [
        StepRow {
            token: x,
            cache: &mut a,
            source: &src[0],
        },
        StepRow {
            token: y,
            cache: &mut b,
            source: &src[0],
        },
    ];
    let mut forked = Vec::new();
    m.step(&mut rows, &threads, &mut ws, &mut forked)
        .expect("steps");
    let n_vocab = m.config.n_vocab;
    for (i, tok) in [x, y].into_iter().enumerate() {
        // In a workspace of its own: nothing shared with the forks.
        let mut own = Workspace::default();
        let mut fresh = m.new_cache();
        let mut alone = Vec::new();
        for t in [start, tok] {
            let mut rows = [StepRow {
                token: t,
                cache: &mut fresh,
                source: &src[0],
            }];
            m.step(&mut rows, &Threads::new(1), &mut own, &mut alone)
                .expect("steps");
        }
        assert_eq!(
            alone,
            forked[i * n_vocab..(i + 1) * n_vocab],
            "fork {i} differs from its own history"
        );
    }
    // A cache of other widths or layers (another model's) is refused.
    let n_layers = a.layers().len();
    for mut other in [
        KvCache::rows(m.dim() + 1, n_layers),
        KvCache::rows(m.dim(), n_layers + 1),
    ] {
        let mut rows = [StepRow {
            token: x,
            cache: &mut other,
            source: &src[0],
        }];
        let err = m
            .step(&mut rows, &threads, &mut ws, &mut logits)
            .expect_err("a cache of another model is refused");
        assert!(err.to_string().contains("another model"), "{err}");
    }
}
