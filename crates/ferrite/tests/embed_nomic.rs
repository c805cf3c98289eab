//! nomic-embed-text-v1.5 (the real f16 GGUF, `scripts/fetch-models.sh
//! nomic-embed-v1.5`) against llama.cpp's `llama-embedding` on the same
//! file, goldens made by `scripts/make-nomic-goldens.py`
//! (testdata/embed/nomic-v1.5/: 152 texts of 2 to 2035 tokens, six over
//! 512, some with task prefixes; the strings llama.cpp tokenizes unlike HF
//! are listed in meta.json and left out):
//!
//! - token ids identical to llama-tokenize's;
//! - cosine >= 0.9999 to llama-embedding, at 768 dimensions and with
//!   `--dim 256` (nomic's layer-norm-then-cut recipe applied to
//!   llama.cpp's pooled output);
//! - `--task` gives the same vector as the prefix typed in;
//! - retrieval: each query of a small set ranks its own document first;
//! - long inputs: cut to the trained 2048 tokens by default, or taken up
//!   to 8192 with `max_tokens`;
//! - a text alone has the bits it has in a batch.
//!
//! The tests print the measured figures.

mod common;

use std::path::PathBuf;

use common::embed::{cosine, embed, embed_dir, id_lists, json, rows};
use ferrite::embed::{EmbedOptions, Embedder, Task};
use ferrite::parallel::Threads;

fn golden_dir() -> PathBuf {
    embed_dir().join("nomic-v1.5")
}

fn open() -> Embedder {
    Embedder::open(&common::real_model("nomic-embed-v1.5")).unwrap()
}

fn texts() -> Vec<String> {
    serde_json::from_value(json(&golden_dir().join("texts.json"))).unwrap()
}

/// The smallest cosine between our vectors and the golden rows, and where.
fn worst(got: &[Vec<f32>], want: &[Vec<f32>]) -> (f64, usize) {
    assert_eq!(got.len(), want.len());
    got.iter()
        .zip(want)
        .map(|(a, b)| cosine(a, b))
        .enumerate()
        .map(|(i, c)| (c, i))
        .fold((f64::MAX, 0), |a, b| if b.0 < a.0 { b } else { a })
}

#[test]
fn nomic_token_ids_match_llama_cpp() {
    let model = open();
    assert_eq!(model.tokenizer().max_tokens, 2048);
    let golden = id_lists(&json(&golden_dir().join("ids.json")));
    let texts = texts();
    assert_eq!(texts.len(), golden.len());
    for (i, (t, want)) in texts.iter().zip(&golden).enumerate() {
        assert_eq!(
            &model.tokenizer().encode_untruncated(t).unwrap(),
            want,
            "text {i}: {t:?}"
        );
    }
}

#[test]
fn nomic_matches_llama_embedding_with_and_without_matryoshka() {
    let model = open();
    let texts = texts();
    assert!(texts.len() >= 100);
    let want = rows(&golden_dir().join("embeddings.f32"), 768);
    let got = embed(&model, &texts, EmbedOptions::default());
    let (c, i) = worst(&got, &want);
    println!(
        "nomic-embed-text-v1.5 f16: min cosine {c:.7} (1 - {:.1e}, text {i})",
        1.0 - c
    );
    assert!(c >= 0.9999, "text {i}: cosine {c}");

    let want = rows(&golden_dir().join("embeddings-dim256.f32"), 256);
    let opts = EmbedOptions {
        dim: Some(256),
        ..Default::default()
    };
    let got = embed(&model, &texts, opts);
    assert!(got.iter().all(|v| v.len() == 256));
    let (c, i) = worst(&got, &want);
    println!(
        "--dim 256: min cosine {c:.7} (1 - {:.1e}, text {i})",
        1.0 - c
    );
    assert!(c >= 0.9999, "--dim 256, text {i}: cosine {c}");
}

#[test]
fn task_option_equals_the_typed_prefix() {
    let model = open();
    let text = "What is the capital of France?".to_string();
    for task in Task::ALL {
        let opts = EmbedOptions {
            task: Some(task),
            ..Default::default()
        };
        let with_task = embed(&model, std::slice::from_ref(&text), opts);
        let typed = format!("{}{text}", task.prefix());
        let with_prefix = embed(&model, &[typed], EmbedOptions::default());
        assert_eq!(with_task, with_prefix, "{task:?}");
    }
}

#[test]
fn queries_rank_their_own_documents_first() {
    let model = open();
    let set = json(&golden_dir().join("retrieval.json"));
    let pairs = set["pairs"].as_array().unwrap();
    let (queries, docs): (Vec<String>, Vec<String>) = pairs
        .iter()
        .map(|p| {
            let s = |i: usize| p[i].as_str().unwrap().to_string();
            (s(0), s(1))
        })
        .unzip();
    let with = |task| EmbedOptions {
        task: Some(task),
        ..Default::default()
    };
    let q = embed(&model, &queries, with(Task::Query));
    let d = embed(&model, &docs, with(Task::Document));
    let mut min_margin = f64::MAX;
    for (i, qv) in q.iter().enumerate() {
        let scores: Vec<f64> = d.iter().map(|dv| cosine(qv, dv)).collect();
        let best_other = scores
            .iter()
            .enumerate()
            .filter(|&(j, _)| j != i)
            .map(|(_, &s)| s)
            .fold(f64::MIN, f64::max);
        assert!(
            scores[i] > best_other,
            "query {i} ({}) ranks another document first: {scores:?}",
            queries[i]
        );
        min_margin = min_margin.min(scores[i] - best_other);
    }
    println!(
        "retrieval: {} queries, each ranks its own document first; smallest margin {min_margin:.3}",
        q.len()
    );
}

#[test]
fn long_inputs_are_cut_to_the_trained_length_unless_asked() {
    let model = open();
    assert_eq!(model.max_positions(), 8192);
    // The two longest texts (about 1700 and 2000 tokens) as one.
    let mut texts = texts();
    texts.sort_by_key(|t| std::cmp::Reverse(t.len()));
    let long = texts[..2].join(" ");
    let n = model.tokenizer().encode_untruncated(&long).unwrap().len();
    assert!(n > 2048 && n <= 8192, "{n} tokens");
    let threads = Threads::new(2);
    let cut = model
        .embed(&[long.as_str()], &EmbedOptions::default(), &threads)
        .unwrap();
    assert!(cut[0].truncated);
    assert_eq!(cut[0].n_tokens, 2048);
    let strict = EmbedOptions {
        truncate: false,
        ..Default::default()
    };
    let err = model
        .embed(&[long.as_str()], &strict, &threads)
        .err()
        .unwrap();
    assert!(
        err.to_string().contains("longer than the maximum of 2048"),
        "{err}"
    );
    let whole = EmbedOptions {
        max_tokens: Some(8192),
        ..Default::default()
    };
    let full = model.embed(&[long.as_str()], &whole, &threads).unwrap();
    assert!(!full[0].truncated);
    assert_eq!(full[0].n_tokens, n);
    let c = cosine(&full[0].vector, &cut[0].vector);
    println!("{n} tokens whole vs cut to 2048: cosine {c:.4}");
    assert!(c > 0.5 && c < 1.0, "{c}");
    let too_long = EmbedOptions {
        max_tokens: Some(8193),
        ..Default::default()
    };
    assert!(model.embed(&["a"], &too_long, &threads).is_err());
}

/// The real f16 model gives the same bits for a text alone as in a batch:
/// alone a text has few rows, for which the AVX-512 set converts the f16
/// weights inside its GEMM micro-kernel; the batch of 16 (over 48 rows)
/// goes through converted panels. Both are the same chains of
/// multiply-adds.
#[test]
fn a_text_alone_has_its_bits_in_a_batch() {
    let model = open();
    let mut texts: Vec<String> = texts().into_iter().take(16).collect();
    // A query of a dozen tokens: alone, well under 48 rows.
    texts.push("search_query: What is the capital of France?".into());
    let batched = embed(&model, &texts, EmbedOptions::default());
    for i in [16, 0, 5, 10, 15] {
        let alone = embed(&model, &texts[i..=i], EmbedOptions::default());
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&alone[0]), bits(&batched[i]), "text {i}");
    }
}
