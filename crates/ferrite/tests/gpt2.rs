//! GPT-2 on tiny random-weight fixtures (testdata/gpt2, made by
//! scripts/make-gpt2-fixtures.py): GGUF files as llama.cpp's converter
//! writes them (f32, f16, q8_0) against HF transformers' logits and greedy
//! continuations, and the q8_0 file against llama.cpp's logits; the
//! byte-level BPE tokenizer read from the GGUF against HF's ids.

mod common;

use common::{all_logits, argmax, ids};

use std::sync::Arc;

use ferrite::formats::gguf::GgufFile;
use ferrite::models::decoder::Logits;
use ferrite::models::{load_causal_lm, CausalLm};
use ferrite::parallel::Threads;
use ferrite::tokenize::Tokenizer;
use serde_json::Value;

fn dir() -> std::path::PathBuf {
    common::testdata().join("gpt2")
}

fn golden() -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir().join("goldens.json")).unwrap()).unwrap()
}

fn f32_file(name: &str) -> Vec<f32> {
    std::fs::read(dir().join(name))
        .unwrap()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

fn open(name: &str) -> (Arc<GgufFile>, Box<dyn CausalLm>) {
    let file = Arc::new(GgufFile::open(dir().join(name)).unwrap());
    let model = load_causal_lm(file.clone()).unwrap();
    (file, model)
}

/// (max abs difference, top-1 agreement) of two row-major logit tables.
fn compare(ours: &[f32], theirs: &[f32], n_vocab: usize) -> (f32, f64) {
    assert_eq!(ours.len(), theirs.len());
    let max = ours
        .iter()
        .zip(theirs)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    let rows = ours.len() / n_vocab;
    let same = (0..rows)
        .filter(|&r| {
            let s = r * n_vocab..(r + 1) * n_vocab;
            argmax(&ours[s.clone()]) == argmax(&theirs[s])
        })
        .count();
    (max, same as f64 / rows as f64)
}

/// Largest difference from HF's f32 logits (about 1.6 in size) for the
/// f32 file, whose f32 attention weights give it an f32 KV cache (measured
/// 6.9e-6; with an f16 cache it was 3e-3).
const F32_MAX: f32 = 1e-4;
/// For the f16 file: f16 weights, f16 cache (measured 7.5e-3).
const F16_MAX: f32 = 1e-2;

#[test]
fn gguf_logits_match_hf() {
    let g = golden();
    let hf = f32_file("logits-hf.f32");
    let nv = g["logits"]["n_vocab"].as_u64().unwrap() as usize;
    for (file, bound) in [("tiny.f32.gguf", F32_MAX), ("tiny.f16.gguf", F16_MAX)] {
        let (_f, model) = open(file);
        for seq in g["logits"]["sequences"].as_array().unwrap() {
            let tokens = ids(&seq["ids"]);
            let at = seq["offset"].as_u64().unwrap() as usize;
            let want = &hf[at..at + tokens.len() * nv];
            let (max, top1) = compare(&all_logits(model.as_ref(), &tokens), want, nv);
            eprintln!(
                "{file} {}: max abs {max:.2e}, top-1 {:.1}%",
                seq["name"].as_str().unwrap(),
                100.0 * top1
            );
            assert!(max <= bound, "{file}: max abs {max} vs HF");
            assert_eq!(top1, 1.0, "{file}: top-1 differs from HF");
        }
    }
}

#[test]
fn q8_0_is_as_close_to_hf_as_llama_cpp() {
    let g = golden();
    let hf = f32_file("logits-hf.f32");
    let theirs = f32_file("logits-llamacpp.f32");
    let nv = 768;
    let seq = g["logits"]["sequences"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "len33")
        .unwrap();
    let entry = g["llama_cpp_logits"]["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["model"] == "tiny.q8_0.gguf")
        .unwrap();
    let tokens = ids(&seq["ids"]);
    let at = seq["offset"].as_u64().unwrap() as usize;
    let hf = &hf[at..at + tokens.len() * nv];
    let lat = entry["offset"].as_u64().unwrap() as usize;
    let llama = &theirs[lat..lat + tokens.len() * nv];
    let (_f, model) = open("tiny.q8_0.gguf");
    let ours = all_logits(model.as_ref(), &tokens);
    let nmse = |a: &[f32]| {
        let num: f64 = a
            .iter()
            .zip(hf)
            .map(|(x, y)| f64::from(x - y).powi(2))
            .sum();
        let den: f64 = hf.iter().map(|y| f64::from(*y).powi(2)).sum();
        num / den
    };
    let (ours_max, ours_top1) = compare(&ours, hf, nv);
    let (llama_max, llama_top1) = compare(llama, hf, nv);
    let (vs_llama_max, _) = compare(&ours, llama, nv);
    eprintln!(
        "q8_0 vs HF: ours max {ours_max:.3}, top-1 {:.1}%, NMSE {:.2e}; llama.cpp max {llama_max:.3}, top-1 {:.1}%, NMSE {:.2e}; ours vs llama.cpp max {vs_llama_max:.3}",
        100.0 * ours_top1,
        nmse(&ours),
        100.0 * llama_top1,
        nmse(llama)
    );
    assert!(nmse(&ours) <= 1.5 * nmse(llama), "NMSE vs HF");
    // Over 33 positions one near-tie is 3% of top-1; instead, every
    // position where our top-1 is not HF's must be a near tie in HF's
    // logits: HF's margin of its token over ours within twice our largest
    // error on that row.
    for r in 0..tokens.len() {
        let (o, h) = (&ours[r * nv..(r + 1) * nv], &hf[r * nv..(r + 1) * nv]);
        let (a, b) = (argmax(o) as usize, argmax(h) as usize);
        let row_err = o
            .iter()
            .zip(h)
            .map(|(x, y)| (x - y).abs())
            .fold(0f32, f32::max);
        assert!(
            a == b || h[b] - h[a] <= 2.0 * row_err,
            "position {r}: ours {a} vs HF {b}, HF margin {} with row error {row_err}",
            h[b] - h[a]
        );
    }
}

#[test]
fn greedy_matches_hf() {
    let g = golden();
    let (_f, model) = open("tiny.f32.gguf");
    for case in g["greedy"]["cases"].as_array().unwrap() {
        let prompt = ids(&case["prompt_ids"]);
        let want = ids(&case["hf"]);
        let want = &want[want.len() - 20..];
        let mut st = model.new_state(128, Threads::new(1)).unwrap();
        let mut out = Vec::new();
        model
            .forward(&prompt, &mut st, Logits::Last, &mut out)
            .unwrap();
        let mut got = Vec::new();
        for _ in 0..want.len() {
            let t = argmax(&out);
            got.push(t);
            model
                .forward(&[t], &mut st, Logits::Last, &mut out)
                .unwrap();
        }
        assert_eq!(got, want, "{:?}", case["prompt"]);
    }
}

#[test]
fn tokenizer_matches_hf() {
    let g = golden();
    let file = GgufFile::open(dir().join("tiny.f32.gguf")).unwrap();
    let tok = Tokenizer::from_gguf(file.metadata()).unwrap();
    let cases = g["tokenizer"]["cases"].as_array().unwrap();
    assert!(cases.len() >= 100);
    for case in cases {
        let text = case["text"].as_str().unwrap();
        assert_eq!(tok.encode(text, false, true), ids(&case["hf"]), "{text:?}");
    }
}
