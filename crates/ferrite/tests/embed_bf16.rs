//! The optional bf16 products (`--bf16`, `Embedder::use_bf16`) on the real
//! models, against the f32 goldens: sentence-transformers (f32) for
//! all-MiniLM-L6-v2 and all-mpnet-base-v2, llama.cpp's `llama-embedding`
//! for nomic-embed-text-v1.5. Rounding weights and layer inputs to bf16
//! must keep every text's cosine >= 0.9999 (the bar of the kernel-set
//! issue); within one machine the bits must not depend on the batch or
//! the thread count. On a CPU without AVX512-BF16 the option must fail
//! with a clear error, and these tests say they checked only that.

mod common;

use common::embed::{corpus, embed, embed_dir, json, min_cosine, rows};
use ferrite::embed::{EmbedOptions, Embedder};
use ferrite::parallel::Threads;

/// The model switched to bf16, or None (after checking the refusal) when
/// this CPU cannot.
fn open_bf16(name: &str) -> Option<Embedder> {
    let mut model = Embedder::open(&common::real_model(name)).unwrap();
    if !ferrite_kernels::gemm_bf16::available() {
        let err = model.use_bf16().unwrap_err().to_string();
        assert!(err.contains("AVX512-BF16"), "{err}");
        eprintln!("SKIPPED (no AVX512-BF16 here): checked only that --bf16 is refused: {err}");
        return None;
    }
    model.use_bf16().unwrap();
    Some(model)
}

fn check(name: &str, golden: &str, dim: usize, texts: &[String]) {
    let Some(model) = open_bf16(name) else {
        return;
    };
    let want = rows(&embed_dir().join(golden), dim);
    assert_eq!(want.len(), texts.len());
    let got = embed(&model, texts, EmbedOptions::default());
    let min_cos = min_cosine(&got, &want);
    println!(
        "{name} bf16: min cosine {min_cos:.7} over {} texts",
        texts.len()
    );
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
    let bits = |v: &[Vec<f32>]| -> Vec<Vec<u32>> {
        v.iter()
            .map(|r| r.iter().map(|x| x.to_bits()).collect())
            .collect()
    };
    let opts = EmbedOptions::default();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let with = |n: usize| -> Vec<Vec<f32>> {
        let out = model.embed(&refs, &opts, &Threads::new(n)).unwrap();
        out.into_iter().map(|e| e.vector).collect()
    };
    let (one, two) = (with(1), with(2));
    assert_eq!(bits(&one), bits(&two), "1 vs 2 threads");
    for i in [0, 7, 39] {
        let alone = embed(&model, &texts[i..=i], opts);
        assert_eq!(bits(&alone), bits(&one[i..=i]), "text {i} alone");
    }
}
