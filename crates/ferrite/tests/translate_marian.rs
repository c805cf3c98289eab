//! Marian (opus-mt architecture) against HF transformers on the tiny
//! fixture `testdata/translation/tiny-marian` (made with its goldens by
//! `scripts/make-translation-fixtures.py`): tokenizer ids and decoding,
//! encoder outputs and decoder logits (f32, within 1e-4), greedy and beam
//! search outputs token for token, batched = alone bit for bit, Q8_0 at
//! load, and bad inputs.

mod common;

use std::path::PathBuf;
use std::sync::OnceLock;

use ferrite::generate::beam::{generate, EarlyStopping, SearchOptions};
use ferrite::models::seq2seq::forward::{StepRow, Workspace};
use ferrite::models::seq2seq::weights::WeightFormat;
use ferrite::parallel::Threads;
use ferrite::tokenize::marian::MarianTokenizer;
use ferrite::translate::{LoadOptions, TranslateOptions, Translator};
use serde_json::Value;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/translation")
}

fn goldens() -> &'static Value {
    static G: OnceLock<Value> = OnceLock::new();
    G.get_or_init(|| {
        let text = std::fs::read_to_string(dir().join("marian-goldens.json")).expect("goldens");
        serde_json::from_str(&text).expect("JSON")
    })
}

fn translator() -> &'static Translator {
    static T: OnceLock<Translator> = OnceLock::new();
    T.get_or_init(|| {
        let opts = LoadOptions {
            format: WeightFormat::F32,
            threads: 2,
        };
        Translator::open(&dir().join("tiny-marian"), &opts).expect("tiny-marian loads")
    })
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .expect("floats")
        .iter()
        .map(|x| x.as_f64().expect("a number") as f32)
        .collect()
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

#[test]
fn tokenizer_ids_match_marian_tokenizer() {
    let t = MarianTokenizer::open(&dir().join("tiny-marian")).expect("tokenizer");
    let g = &goldens()["tokenizer"];
    let mut n = 0;
    for (side, encode) in [
        (
            "source",
            &(|s: &str| t.encode_source(s)) as &dyn Fn(&str) -> _,
        ),
        ("target", &|s: &str| t.encode_target(s)),
    ] {
        let mut bad = Vec::new();
        for e in g[side].as_array().expect("entries") {
            let text = e["text"].as_str().expect("text");
            let want = common::ids(&e["ids"]);
            let got = encode(text).expect("encodes");
            if got != want {
                bad.push(format!("{text:?}: got {got:?}, want {want:?}"));
            }
            n += 1;
        }
        assert!(
            bad.is_empty(),
            "{side}: {} differ:\n{}",
            bad.len(),
            bad.join("\n")
        );
    }
    assert!(n >= 400, "{n} strings");
}

#[test]
fn decode_matches_marian_tokenizer() {
    let t = MarianTokenizer::open(&dir().join("tiny-marian")).expect("tokenizer");
    let mut bad = Vec::new();
    for e in goldens()["tokenizer"]["decode"]
        .as_array()
        .expect("entries")
    {
        let ids = common::ids(&e["ids"]);
        let want = e["text"].as_str().expect("text");
        let got = t.decode(&ids);
        if got != want {
            bad.push(format!("{ids:?}: got {got:?}, want {want:?}"));
        }
    }
    assert!(bad.is_empty(), "{} differ:\n{}", bad.len(), bad.join("\n"));
}

#[test]
fn encoder_outputs_match_transformers() {
    let tr = translator();
    let threads = Threads::new(2);
    let mut ws = Workspace::default();
    let mut worst = 0f32;
    for e in goldens()["encoder"].as_array().expect("entries") {
        let ids = common::ids(&e["ids"]);
        let out = tr
            .model
            .encode(&[&ids], &threads, &mut ws)
            .expect("encodes");
        worst = worst.max(max_diff(&out[0].hidden, &floats(&e["hidden"])));
    }
    eprintln!("encoder: max |ferrite - HF| = {worst:.2e}");
    assert!(worst < 1e-4, "encoder differs by {worst}");
}

#[test]
fn decoder_logits_match_transformers() {
    let tr = translator();
    let m = &tr.model;
    let threads = Threads::new(2);
    let mut ws = Workspace::default();
    let n_vocab = m.config.n_vocab;
    let mut worst = 0f32;
    for e in goldens()["decoder"].as_array().expect("entries") {
        let ids = common::ids(&e["ids"]);
        let dec = common::ids(&e["decoder_ids"]);
        let want = floats(&e["logits"]);
        let src = m.encode(&[&ids], &threads, &mut ws).expect("encodes");
        let mut cache = m.new_cache();
        let mut logits = Vec::new();
        for (p, &tok) in dec.iter().enumerate() {
            let mut rows = [StepRow {
                token: tok,
                cache: &mut cache,
                source: &src[0],
            }];
            m.step(&mut rows, &threads, &mut ws, &mut logits)
                .expect("steps");
            let w = &want[p * n_vocab..(p + 1) * n_vocab];
            worst = worst.max(max_diff(&logits, w));
        }
    }
    eprintln!("decoder logits: max |ferrite - HF| = {worst:.2e}");
    assert!(worst < 1e-4, "logits differ by {worst}");
}

/// The search options of one golden run.
fn options(run: &Value) -> SearchOptions {
    let tr = translator();
    let o = &run["options"];
    let mut s = tr.defaults.clone();
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

#[test]
fn generation_matches_transformers() {
    let tr = translator();
    let threads = Threads::new(2);
    let mut ws = Workspace::default();
    let mut checked = 0;
    for run in goldens()["generate"].as_array().expect("runs") {
        let name = run["name"].as_str().expect("name");
        let opts = options(run);
        let mut bad = Vec::new();
        for o in run["outputs"].as_array().expect("outputs") {
            let ids = common::ids(&o["ids"]);
            let want = common::ids(&o["out"]);
            let src = tr
                .model
                .encode(&[&ids], &threads, &mut ws)
                .expect("encodes");
            let got = generate(&tr.model, &src, &opts, &threads, &mut ws).expect("generates");
            if got[0] != want {
                bad.push(format!("{ids:?}:\n  got  {:?}\n  want {want:?}", got[0]));
            }
            checked += 1;
        }
        assert!(
            bad.is_empty(),
            "{name}: {} of 24 differ:\n{}",
            bad.len(),
            bad.join("\n")
        );
    }
    assert!(checked >= 60);
}

#[test]
fn batched_is_bit_identical_to_alone() {
    let tr = translator();
    let threads = Threads::new(2);
    let mut ws = Workspace::default();
    let inputs: Vec<Vec<u32>> = goldens()["generate"][0]["outputs"]
        .as_array()
        .expect("outputs")
        .iter()
        .map(|o| common::ids(&o["ids"]))
        .collect();
    let seqs: Vec<&[u32]> = inputs.iter().map(|v| &v[..]).collect();
    let together = tr.model.encode(&seqs, &threads, &mut ws).expect("encodes");
    for (s, t) in seqs.iter().zip(&together) {
        let alone = tr
            .model
            .encode(&[s], &Threads::new(1), &mut ws)
            .expect("encodes");
        assert_eq!(
            alone[0].hidden, t.hidden,
            "encoder output depends on the batch"
        );
        assert_eq!(alone[0].cross, t.cross, "cross K/V depend on the batch");
    }
    // Decoder steps: rows of different inputs at once vs one by one.
    let n_vocab = tr.model.config.n_vocab;
    let start = tr.model.config.decoder_start;
    let mut caches: Vec<_> = together.iter().map(|_| tr.model.new_cache()).collect();
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
    tr.model
        .step(&mut rows, &threads, &mut ws, &mut batched)
        .expect("steps");
    for (i, src) in together.iter().enumerate() {
        let mut cache = tr.model.new_cache();
        let mut one = Vec::new();
        let mut rows = [StepRow {
            token: start,
            cache: &mut cache,
            source: src,
        }];
        tr.model
            .step(&mut rows, &Threads::new(1), &mut ws, &mut one)
            .expect("steps");
        assert_eq!(
            one,
            batched[i * n_vocab..(i + 1) * n_vocab],
            "row {i} depends on the batch"
        );
    }
    // Whole searches: batches of 32, 5 and 1 give the same outputs.
    for beams in [1, 4] {
        let opts = |batch| TranslateOptions {
            beams: Some(beams),
            max_length: Some(24),
            batch: Some(batch),
            ..Default::default()
        };
        let all = tr.generate_ids(&inputs, &opts(32)).expect("generates");
        assert_eq!(all, tr.generate_ids(&inputs, &opts(5)).expect("generates"));
        assert_eq!(all, tr.generate_ids(&inputs, &opts(1)).expect("generates"));
    }
}

#[test]
fn q8_0_at_load_stays_close() {
    let opts = LoadOptions {
        format: WeightFormat::Q8_0,
        threads: 2,
    };
    let q = Translator::open(&dir().join("tiny-marian"), &opts).expect("loads as Q8_0");
    let run = &goldens()["generate"][0];
    let mut same = 0;
    let outs = run["outputs"].as_array().expect("outputs");
    for o in outs {
        let ids = common::ids(&o["ids"]);
        let got = q
            .generate_ids(
                &[ids],
                &TranslateOptions {
                    beams: Some(1),
                    max_length: Some(24),
                    ..Default::default()
                },
            )
            .expect("generates");
        same += usize::from(got[0] == common::ids(&o["out"]));
    }
    eprintln!(
        "Q8_0 greedy: {same} of {} outputs identical to HF f32",
        outs.len()
    );
    assert!(
        same * 2 >= outs.len(),
        "only {same} of {} agree",
        outs.len()
    );
}

#[test]
fn bad_inputs_are_handled() {
    let tr = translator();
    let opts = TranslateOptions {
        beams: Some(2),
        max_length: Some(8),
        ..Default::default()
    };
    // Blank lines translate to empty strings; long lines are cut to the
    // model's 128 positions and still translate.
    let long = "word ".repeat(10_000);
    let out = tr
        .translate(&["", "   ", &long, "Hello!"], &opts)
        .expect("translates");
    assert_eq!(out.len(), 4);
    assert_eq!(out[0], "");
    assert_eq!(out[1], "");
    assert!(!out[2].contains('\n') && !out[3].contains('\n'));
    assert_eq!(tr.encode(&long).expect("encodes").len(), 128);
    // A directory that is not a translation model.
    let not_model = dir().join("../gpt2");
    let err = Translator::open(&not_model, &LoadOptions::default())
        .err()
        .expect("an error");
    assert!(err.to_string().contains("not a translation model"), "{err}");
    // A file, not a directory.
    let err = Translator::open(&dir().join("corpus.en"), &LoadOptions::default())
        .err()
        .expect("an error");
    assert!(err.to_string().contains("not a directory"), "{err}");
}
