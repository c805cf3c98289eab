//! The optional bf16 products (`--bf16`, `Embedder::use_bf16`) on the real
//! models, against the f32 goldens: sentence-transformers (f32) for
//! all-MiniLM-L6-v2 and all-mpnet-base-v2, llama.cpp's `llama-embedding`
//! for nomic-embed-text-v1.5. Rounding weights and layer inputs to bf16
//! must keep every text's cosine >= 0.9999 (the bar of the kernel-set
//! issue); within one machine the bits must not depend on the batch or
//! the thread count. On a CPU without AVX512-BF16 (x86-64) or FEAT_BF16
//! (aarch64) the option must fail
//! with a clear error, and these tests say they checked only that.

mod common;

use common::embed::{
    assert_bits_independent_of_batch_and_threads, corpus, cosines_to_golden, embed_dir, json,
};
use ferrite::embed::Embedder;

/// The model switched to bf16, or None (after checking the refusal) when
/// this CPU cannot.
fn open_bf16(name: &str) -> Option<Embedder> {
    let mut model = Embedder::open(&common::real_model(name)).unwrap();
    if !ferrite_kernels::gemm_bf16::available() {
        let err = model.use_bf16().unwrap_err().to_string();
        assert!(err.contains("AVX512-BF16"), "{err}");
        eprintln!(
            "SKIPPED (no AVX512-BF16 / FEAT_BF16 here): checked only that --bf16 is refused: {err}"
        );
        return None;
    }
    model.use_bf16().unwrap();
    Some(model)
}

fn check(name: &str, golden: &str, dim: usize, texts: &[String]) {
    let Some(model) = open_bf16(name) else {
        return;
    };
    let cos = cosines_to_golden(&model, &format!("{name} bf16"), golden, dim, texts);
    let min_cos = cos.into_iter().fold(f64::MAX, f64::min);
    assert!(min_cos >= 0.9999, "{name}: min cosine {min_cos}");
}

#[test]
fn minilm_bf16_keeps_cosine_to_sentence_transformers() {
    check("minilm", "minilm/embeddings.f32", 384, &corpus());
}

#[test]
fn mpnet_bf16_keeps_cosine_to_sentence_transformers() {
    check("mpnet", "mpnet/embeddings.f32", 768, &corpus());
}

#[test]
fn nomic_bf16_keeps_cosine_to_llama_embedding() {
    let texts: Vec<String> =
        serde_json::from_value(json(&embed_dir().join("nomic-v1.5/texts.json"))).unwrap();
    check("nomic-embed-v1.5", "nomic-v1.5/embeddings.f32", 768, &texts);
}

#[test]
fn bf16_bits_do_not_depend_on_batch_or_threads() {
    let Some(model) = open_bf16("minilm") else {
        return;
    };
    let texts: Vec<String> = corpus().into_iter().take(40).collect();
    assert_bits_independent_of_batch_and_threads(&model, &texts);
}
