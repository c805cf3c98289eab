//! T5 against HF transformers on the tiny fixtures `tiny-t5` (ReLU
//! feed-forward, tied embeddings, 4 heads of 16 = d_model) and
//! `tiny-flan` (gated-GELU, untied output, 3 heads of 16 in a 64-wide
//! model), made with `t5-goldens.json` by
//! `scripts/make-translation-fixtures.py --only-t5` (`--only-flan` remakes
//! tiny-flan alone): tokenizer.json ids and
//! decoding, encoder outputs and decoder logits (f32, within 1e-4),
//! greedy and beam search outputs token for token, batched = alone.

#[path = "common/seq2seq.rs"]
mod seq2seq;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use ferrite::translate::{LoadOptions, TranslateOptions, Translator, T5_MAX_INPUT};
use seq2seq::ids;
use serde_json::Value;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/translation")
}

fn goldens() -> &'static Value {
    static G: OnceLock<Value> = OnceLock::new();
    G.get_or_init(|| {
        let text = std::fs::read_to_string(dir().join("t5-goldens.json")).expect("goldens");
        serde_json::from_str(&text).expect("JSON")
    })
}

/// The fixtures: T5 (ReLU, tied) and flan-t5 (gated-GELU, untied).
const VARIANTS: [&str; 2] = ["t5", "flan"];

fn open(model_dir: &Path) -> Translator {
    let opts = LoadOptions {
        threads: 2,
        ..Default::default()
    };
    Translator::open(model_dir, &opts).expect("loads")
}

fn translator(variant: &str) -> Translator {
    open(&dir().join(format!("tiny-{variant}")))
}

#[test]
fn tokenizer_ids_and_decoding_match() {
    let tr = translator("t5");
    let g = &goldens()["t5"]["tokenizer"];
    let mut bad = Vec::new();
    let entries = g["source"].as_array().expect("entries");
    for e in entries {
        let text = e["text"].as_str().expect("text");
        let got = tr.tokenizer().encode_source(text).expect("encodes");
        if got != ids(&e["ids"]) {
            bad.push(format!("{text:?}: got {got:?}, want {:?}", ids(&e["ids"])));
        }
    }
    for e in g["decode"].as_array().expect("entries") {
        let got = tr.tokenizer().decode(&ids(&e["ids"]));
        if got != e["text"].as_str().expect("text") {
            bad.push(format!(
                "decode {:?}: got {got:?}, want {}",
                e["ids"], e["text"]
            ));
        }
    }
    assert!(bad.is_empty(), "{} differ:\n{}", bad.len(), bad.join("\n"));
    assert!(entries.len() >= 200);
}

#[test]
fn encoder_and_logits_match_transformers() {
    for variant in VARIANTS {
        let tr = translator(variant);
        let g = &goldens()[variant];
        let enc = seq2seq::encoder_diff(&tr, g);
        let logits = seq2seq::logits_diff(&tr, g);
        eprintln!("{variant}: encoder max diff {enc:.2e}, decoder logits max diff {logits:.2e}");
        assert!(enc < 1e-4 && logits < 1e-4, "{variant}: {enc} {logits}");
    }
}

#[test]
fn generation_matches_transformers() {
    for variant in VARIANTS {
        let (n, bad) = seq2seq::generation_mismatches(&translator(variant), &goldens()[variant]);
        assert!(
            bad.is_empty(),
            "{variant}: {} of {n} differ:\n{}",
            bad.len(),
            bad.join("\n")
        );
        assert_eq!(n, 72);
    }
}

#[test]
fn batched_is_bit_identical_to_alone() {
    for variant in VARIANTS {
        let tr = translator(variant);
        let inputs: Vec<Vec<u32>> = goldens()[variant]["generate"][0]["outputs"]
            .as_array()
            .expect("outputs")
            .iter()
            .map(|o| ids(&o["ids"]))
            .collect();
        seq2seq::assert_batch_independent(&tr, &inputs);
    }
}

/// transformers 5 saves a loaded flan-t5 again with `"tie_word_embeddings":
/// true, "scale_decoder_outputs": false` and its own `lm_head.weight`, and
/// loads that as the same untied, unscaled model (checked by the fixture
/// script); so must ferrite.
#[test]
fn flan_saved_by_transformers_5_loads_untied() {
    let tmp = Altered::new("flan", "v5", |config| {
        config["tie_word_embeddings"] = Value::Bool(true);
        config["scale_decoder_outputs"] = Value::Bool(false);
    });
    let logits = seq2seq::logits_diff(&open(&tmp.0), &goldens()["flan"]);
    assert!(logits < 1e-4, "re-saved flan: logits max diff {logits}");
}

/// A copy of `tiny-{variant}` in a temporary directory with its config.json
/// changed by `edit`; removed when dropped.
struct Altered(PathBuf);

impl Altered {
    fn new(variant: &str, tag: &str, edit: impl FnOnce(&mut Value)) -> Altered {
        let src = dir().join(format!("tiny-{variant}"));
        let tmp =
            std::env::temp_dir().join(format!("ferrite-t5-{variant}-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&tmp).expect("temp dir");
        for entry in std::fs::read_dir(&src).expect("fixture") {
            let path = entry.expect("entry").path();
            std::fs::copy(&path, tmp.join(path.file_name().expect("name"))).expect("copies");
        }
        let text = std::fs::read_to_string(src.join("config.json")).expect("config");
        let mut config: Value = serde_json::from_str(&text).expect("JSON");
        edit(&mut config);
        std::fs::write(tmp.join("config.json"), config.to_string()).expect("writes");
        Altered(tmp)
    }

    /// The error opening it gives (it must not open).
    fn error(&self) -> String {
        let opts = LoadOptions::default();
        match Translator::open(&self.0, &opts) {
            Ok(_) => panic!("{} opened", self.0.display()),
            Err(e) => e.to_string(),
        }
    }
}

impl Drop for Altered {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Broken T5 directories are refused with an error naming the problem.
#[test]
fn broken_t5_directories_are_errors() {
    let keep = |_: &mut Value| {};
    let cases: Vec<(Altered, &str)> = vec![
        (
            Altered::new("t5", "heads", |c| c["num_heads"] = 5.into()),
            "has shape",
        ),
        (
            Altered::new("t5", "ffn", |c| {
                c["feed_forward_proj"] = "gated-silu".into()
            }),
            "'gated-silu' is not supported",
        ),
        (
            Altered::new("t5", "untied", |c| {
                c["tie_word_embeddings"] = false.into();
            }),
            "lm_head.weight",
        ),
        (
            Altered::new("t5", "vocab", |c| c["vocab_size"] = 100.into()),
            "shape",
        ),
    ];
    for (tmp, needle) in &cases {
        let err = tmp.error();
        assert!(
            err.contains(needle),
            "{}: '{err}' lacks '{needle}'",
            tmp.0.display()
        );
    }
    // No weights, truncated weights, not weights, config.json that is not JSON.
    let no_weights = Altered::new("t5", "noweights", keep);
    std::fs::remove_file(no_weights.0.join("model.safetensors")).expect("removes");
    assert!(no_weights.error().contains("model.safetensors"));
    let cut = Altered::new("t5", "cut", keep);
    let weights = cut.0.join("model.safetensors");
    let bytes = std::fs::read(&weights).expect("reads");
    std::fs::write(&weights, &bytes[..bytes.len() / 2]).expect("writes");
    let err = cut.error();
    assert!(
        err.contains("model.safetensors") && err.contains("truncated"),
        "{err}"
    );
    std::fs::write(&weights, "not tensors at all").expect("writes");
    let err = cut.error();
    assert!(err.contains("not a safetensors file"), "{err}");
    let not_json = Altered::new("t5", "json", keep);
    std::fs::write(not_json.0.join("config.json"), "{\"model_type\": \"t5\",").expect("writes");
    assert!(not_json.error().contains("not a translation model"));
}

#[test]
fn task_prefix_is_plain_text() {
    let tr = translator("t5");
    let prefix = goldens()["config"]["prefix"].as_str().expect("prefix");
    let opts = TranslateOptions {
        beams: Some(1),
        max_length: Some(64),
        ..Default::default()
    };
    // A training pair of the tiny model (the prefix is part of the input).
    let out = tr
        .translate(
            &[&format!("{prefix}My sister reads a book every evening.")],
            &opts,
        )
        .expect("translates");
    assert_eq!(out[0], "मेरी बहन हर शाम एक किताब पढ़ती है।");
}

/// Blank inputs give empty strings without running the model; a
/// 10,000-word input is cut to `T5_MAX_INPUT` tokens (T5's relative
/// positions set no limit of their own), keeping `</s>` last, and still
/// translates; one output per input, in order.
#[test]
fn bad_inputs_are_handled() {
    let tr = translator("flan");
    let prefix = goldens()["config"]["prefix"].as_str().expect("prefix");
    let long = format!("{prefix}{}", "word ".repeat(10_000));
    let ids = tr.encode(&long).expect("encodes");
    assert_eq!(ids.len(), T5_MAX_INPUT);
    assert_eq!(ids.last(), Some(&tr.model().config.eos));
    assert_eq!(ids[..20], tr.encode(&long[..400]).expect("encodes")[..20]);
    let opts = TranslateOptions {
        beams: Some(2),
        max_length: Some(8),
        ..Default::default()
    };
    let hello = format!("{prefix}Hello!");
    let out = tr
        .translate(&["", " \t ", &long, &hello], &opts)
        .expect("translates");
    assert_eq!(out.len(), 4);
    assert_eq!(out[..2], ["", ""]);
    assert!(!out[2].is_empty() && !out[3].is_empty(), "{out:?}");
    let alone = tr.translate(&[&hello], &opts).expect("translates");
    assert_eq!(out[3], alone[0]);
}
