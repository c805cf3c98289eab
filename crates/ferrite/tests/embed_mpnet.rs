//! all-mpnet-base-v2 (MPNet, real weights from `scripts/fetch-models.sh
//! mpnet`) against sentence-transformers in f32, goldens made by
//! `scripts/make-mpnet-goldens.py` (testdata/embed/mpnet/):
//!
//! - token ids identical to `tokenizer.json` on all corpus strings, full
//!   and cut to sentence-transformers' `max_seq_length` (384);
//! - the relative position buckets identical to HF's for distances
//!   -600..600;
//! - embeddings with cosine >= 0.99999 to `SentenceTransformer.encode`.
//!
//! Measured when written: min cosine 1 - 2e-12, max abs 2.8e-7 (the test
//! prints the figures).

mod common;

use std::path::PathBuf;

use common::embed::{check_token_ids, corpus, embed, json, max_abs, min_cosine, rows};
use ferrite::embed::{EmbedOptions, Embedder};

fn golden_dir() -> PathBuf {
    common::embed::embed_dir().join("mpnet")
}

fn open() -> Embedder {
    Embedder::open(&common::real_model("mpnet")).unwrap()
}

#[test]
fn mpnet_token_ids_match_hf_tokenizers() {
    let n_cut = check_token_ids(&open(), &corpus(), &golden_dir().join("ids.json"), 384);
    assert!(n_cut >= 1, "the corpus has inputs over 384 tokens");
}

#[test]
fn mpnet_relative_buckets_match_hf() {
    let model = open();
    let golden = json(&golden_dir().join("buckets.json"));
    let range = golden["range"].as_i64().unwrap();
    let rb = model
        .encoder()
        .relative_bias
        .as_ref()
        .expect("MPNet has a relative bias");
    let buckets = golden["buckets"].as_array().unwrap();
    assert_eq!(buckets.len() as i64, 2 * range + 1);
    for (i, b) in buckets.iter().enumerate() {
        let rel = i as i64 - range;
        assert_eq!(
            rb.bucket(rel) as u64,
            b.as_u64().unwrap(),
            "relative position {rel}"
        );
    }
}

#[test]
fn mpnet_matches_sentence_transformers() {
    let model = open();
    let texts = corpus();
    let golden = rows(&golden_dir().join("embeddings.f32"), 768);
    assert_eq!(golden.len(), texts.len());
    let got = embed(&model, &texts, EmbedOptions::default());
    let (min_cos, diff) = (min_cosine(&got, &golden), max_abs(&got, &golden));
    println!(
        "all-mpnet-base-v2: min cosine {min_cos:.9} (1 - {:.2e}), max abs {diff:.2e}",
        1.0 - min_cos
    );
    assert!(min_cos >= 0.99999, "min cosine {min_cos}");
}
