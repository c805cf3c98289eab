//! The optional int8 products (`--int8`, `Embedder::use_int8`) on the real
//! models, against the f32 goldens: sentence-transformers (f32) for
//! all-MiniLM-L6-v2 and all-mpnet-base-v2, llama.cpp's `llama-embedding`
//! for nomic-embed-text-v1.5.
//!
//! Issue 34 asks for every text's cosine >= 0.9995 to sentence-transformers
//! and >= 0.999 to llama.cpp. Measured (int8 weights per feature and group
//! of 16 inputs, 16-bit activations per token, SmoothQuant-smoothed
//! inputs; `ferrite_kernels::gemm_w8a16`): smallest cosines 0.999681
//! (MiniLM, text 127), 0.999599 (mpnet, text 118), 0.999826 (nomic, text
//! 126); means 0.999904, 0.999921, 0.999928. What the bar rules out, on
//! the same corpus: int8 activations per token give 0.9912 / 0.9849 / 0.9970
//! (per-row weights), 0.9990 with activations and weights both in groups
//! of 32 (Q8_0 × Q8_0), 0.9994 in groups of 16; 16-bit activations with
//! per-row weights 0.9985, with weights per 32 inputs 0.99960 / 0.99945.
//! Also tested: the bits do not depend on the batch or the thread count
//! (nor on the kernel set: `gemm_w8a16`'s kernel tests).

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
fn minilm_int8_keeps_cosine_to_sentence_transformers() {
    check("minilm", "minilm/embeddings.f32", 384, &corpus(), 0.9995);
}

#[test]
fn mpnet_int8_keeps_cosine_to_sentence_transformers() {
    check("mpnet", "mpnet/embeddings.f32", 768, &corpus(), 0.9995);
}

#[test]
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
