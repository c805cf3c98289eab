//! Beam search for decoder-only models against transformers'
//! `generate(num_beams=N)` (goldens: scripts/make-beam-goldens.py) on the
//! tiny random-weight GPT-2, Llama and Qwen2 fixtures, from their Hugging
//! Face directories and (GPT-2) the GGUF files made from them.

use ferrite::generate::beam::{generate_decoder, EarlyStopping, SearchOptions};
use ferrite::{Generator, Threads};
use serde_json::Value;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn goldens() -> Value {
    let text = std::fs::read_to_string(root().join("testdata/beam/goldens.json"))
        .expect("testdata/beam/goldens.json (scripts/make-beam-goldens.py)");
    serde_json::from_str(&text).expect("JSON")
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("ids")
        .iter()
        .map(|x| x.as_u64().expect("an id") as u32)
        .collect()
}

/// The search options of a golden case (HF's `generate` keywords).
fn options(case: &Value, prompt_len: usize) -> SearchOptions {
    let o = &case["options"];
    SearchOptions {
        num_beams: o["num_beams"].as_u64().expect("num_beams") as usize,
        max_length: prompt_len + o["max_new_tokens"].as_u64().expect("max_new_tokens") as usize,
        length_penalty: o["length_penalty"].as_f64().unwrap_or(1.0) as f32,
        early_stopping: match &o["early_stopping"] {
            Value::Bool(true) => EarlyStopping::True,
            Value::String(s) if s == "never" => EarlyStopping::Never,
            _ => EarlyStopping::False,
        },
        no_repeat_ngram_size: o["no_repeat_ngram_size"].as_u64().unwrap_or(0) as usize,
        ..Default::default()
    }
}

/// Every golden case of `model` on the decoder at `path`; returns how many
/// cases ran.
fn check(model: &str, path: &Path) -> usize {
    let g = goldens();
    let gen: Generator = ferrite::open(path.to_str().expect("UTF-8 path"))
        .and_then(|m| m.into_generator())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let cases = g["models"][model]["cases"].as_array().expect("cases");
    for (i, case) in cases.iter().enumerate() {
        let prompt = ids(&case["prompt_ids"]);
        let eos = case["eos"].as_u64().expect("eos") as u32;
        let opts = options(case, prompt.len());
        let got = generate_decoder(gen.model(), &prompt, eos, &opts, Threads::new(2))
            .unwrap_or_else(|e| panic!("{model} case {i}: {e}"));
        assert_eq!(
            got,
            ids(&case["new_ids"]),
            "{model} case {i} ({}, eos {eos}) from {}",
            case["options"],
            path.display()
        );
    }
    cases.len()
}

#[test]
fn gpt2_beams_equal_transformers() {
    let n = check("gpt2", &root().join("testdata/gpt2/tiny-hf"));
    assert!(n >= 8);
    // (Not the Q8_0 file: its rounded weights change the logits enough
    // that a search over them may rank beams differently from the f32
    // model; its greedy goldens differ from transformers' too.)
    for file in ["tiny.f32.gguf", "tiny.f16.gguf"] {
        check("gpt2", &root().join("testdata/gpt2").join(file));
    }
}

#[test]
fn llama_and_qwen2_directories_beams_equal_transformers() {
    for model in ["tiny-llama", "tiny-qwen2"] {
        let n = check(model, &root().join("testdata/hf-decoders").join(model));
        assert!(n >= 8);
    }
}

/// One beam is greedy search: the same tokens as the decode loop.
#[test]
fn one_beam_is_greedy() {
    let gen = ferrite::open(root().join("testdata/gpt2/tiny-hf").to_str().unwrap())
        .and_then(|m| m.into_generator())
        .expect("opens");
    let g = goldens();
    let prompt = ids(&g["models"]["gpt2"]["cases"][0]["prompt_ids"]);
    let opts = SearchOptions {
        num_beams: 1,
        max_length: prompt.len() + 12,
        ..Default::default()
    };
    let beams =
        generate_decoder(gen.model(), &prompt, u32::MAX, &opts, Threads::new(1)).expect("searches");
    let mut session = ferrite::generate::session::Session::new(
        gen.model(),
        gen.tokenizer(),
        None,
        Threads::new(1),
    )
    .expect("session");
    session.set_prompt(&prompt).expect("prompt");
    let mut greedy = Vec::new();
    for _ in 0..12 {
        let t = ferrite_kernels::math::argmax_first(session.logits()) as u32;
        greedy.push(t);
        let mut all = session.tokens().to_vec();
        all.push(t);
        session.set_prompt(&all).expect("one more");
    }
    assert_eq!(beams, greedy);
}

/// Bad requests: no beams, an empty prompt, a prompt that fills the
/// search's whole length.
#[test]
fn bad_requests_are_errors() {
    let gen = ferrite::open(root().join("testdata/gpt2/tiny-hf").to_str().unwrap())
        .and_then(|m| m.into_generator())
        .expect("opens");
    let m = gen.model();
    let zero = SearchOptions {
        num_beams: 0,
        ..Default::default()
    };
    assert!(generate_decoder(m, &[1, 2], 0, &zero, Threads::new(1)).is_err());
    let opts = SearchOptions {
        num_beams: 2,
        max_length: 4,
        ..Default::default()
    };
    assert!(generate_decoder(m, &[], 0, &opts, Threads::new(1)).is_err());
    let e = generate_decoder(m, &[1, 2, 3, 4], 0, &opts, Threads::new(1)).unwrap_err();
    assert!(e.to_string().contains("context"), "{e}");
}
