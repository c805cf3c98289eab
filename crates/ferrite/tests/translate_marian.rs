//! Marian (opus-mt architecture) against HF transformers on the tiny
//! fixture `testdata/translation/tiny-marian` (made with its goldens by
//! `scripts/make-translation-fixtures.py`): tokenizer ids and decoding,
//! encoder outputs and decoder logits (f32, within 1e-4), greedy and beam
//! search outputs token for token, batched = alone bit for bit, Q8_0 at
//! load, and bad inputs.

#[path = "common/seq2seq.rs"]
mod seq2seq;

use std::path::PathBuf;
use std::sync::OnceLock;

use ferrite::models::seq2seq::weights::WeightFormat;
use ferrite::tokenize::marian::MarianTokenizer;
use ferrite::translate::{LoadOptions, TranslateOptions, Translator};
use seq2seq::ids;
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
            let want = ids(&e["ids"]);
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
        let ids = ids(&e["ids"]);
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
    let worst = seq2seq::encoder_diff(translator(), goldens());
    eprintln!("encoder: max |ferrite - HF| = {worst:.2e}");
    assert!(worst < 1e-4, "encoder differs by {worst}");
}

#[test]
fn decoder_logits_match_transformers() {
    let worst = seq2seq::logits_diff(translator(), goldens());
    eprintln!("decoder logits: max |ferrite - HF| = {worst:.2e}");
    assert!(worst < 1e-4, "logits differ by {worst}");
}

#[test]
fn generation_matches_transformers() {
    let (n, bad) = seq2seq::generation_mismatches(translator(), goldens());
    assert!(
        bad.is_empty(),
        "{} of {n} differ:\n{}",
        bad.len(),
        bad.join("\n")
    );
    assert_eq!(n, 72, "greedy, beam 4 and beam 4 with options on 24 inputs");
}

/// The token ids of the first generation run's inputs.
fn golden_inputs() -> Vec<Vec<u32>> {
    goldens()["generate"][0]["outputs"]
        .as_array()
        .expect("outputs")
        .iter()
        .map(|o| ids(&o["ids"]))
        .collect()
}

/// tiny-marian with its matrices quantized to Q8_0 at load.
fn q8_0_translator() -> Translator {
    let opts = LoadOptions {
        format: WeightFormat::Q8_0,
        threads: 2,
    };
    Translator::open(&dir().join("tiny-marian"), &opts).expect("loads as Q8_0")
}

#[test]
fn batched_is_bit_identical_to_alone() {
    seq2seq::assert_batch_independent(translator(), &golden_inputs());
}

#[test]
fn forked_caches_share_rows_and_foreign_ones_are_refused() {
    let input = &golden_inputs()[0];
    seq2seq::assert_forks_share_and_foreign_caches_fail(translator(), input);
    seq2seq::assert_forks_share_and_foreign_caches_fail(&q8_0_translator(), input);
}

#[test]
fn q8_0_batched_is_bit_identical_to_alone() {
    // Q8_0 products take the many-row kernels (`dot8n`) for several rows
    // and the one-row ones (`dot8`) for one: the same bits either way.
    seq2seq::assert_batch_independent(&q8_0_translator(), &golden_inputs());
}

#[test]
fn q8_0_at_load_stays_close() {
    let q = q8_0_translator();
    let run = &goldens()["generate"][0];
    let mut same = 0;
    let outs = run["outputs"].as_array().expect("outputs");
    for o in outs {
        let input = ids(&o["ids"]);
        let got = q
            .generate_ids(
                &[input],
                &TranslateOptions {
                    beams: Some(1),
                    max_length: Some(24),
                    ..Default::default()
                },
            )
            .expect("generates");
        same += usize::from(got[0] == ids(&o["out"]));
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

/// A set cancel flag stops a translation: before its first batch (a
/// request that waited while its client left) and, in the search itself,
/// before a step. A fresh flag changes nothing.
#[test]
fn a_cancelled_translation_stops() {
    use ferrite::generate::beam::generate;
    use ferrite::generate::cancel::Cancel;
    use ferrite::models::seq2seq::forward::Workspace;
    use ferrite::parallel::Threads;

    let tr = translator();
    let cancel = Cancel::new();
    let opts = TranslateOptions {
        beams: Some(2),
        max_length: Some(8),
        cancel: cancel.clone(),
        ..Default::default()
    };
    let plain = TranslateOptions {
        cancel: Cancel::default(),
        ..opts.clone()
    };
    let want = tr.translate(&["Hello!"], &plain).expect("translates");
    assert_eq!(
        tr.translate(&["Hello!"], &opts).expect("not cancelled"),
        want
    );
    cancel.cancel();
    let err = tr.translate(&["Hello!"], &opts).expect_err("cancelled");
    assert!(matches!(err, ferrite::Error::Cancelled), "{err}");

    // The search's own check, without the batch loop's.
    let (threads, mut ws) = (Threads::new(1), Workspace::default());
    let input = tr.encode("Hello!").expect("encodes");
    let src = tr
        .model()
        .encode(&[&input], &threads, &mut ws)
        .expect("encodes");
    let search = tr.search_options(&opts);
    let err = generate(tr.model(), &src, &search, &threads, &mut ws).err();
    assert!(matches!(err, Some(ferrite::Error::Cancelled)), "{err:?}");
}
