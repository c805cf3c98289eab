//! Embeddings against sentence-transformers / HF transformers, with goldens
//! made by `scripts/make-embed-goldens.py` (see `testdata/embed/README.md`):
//!
//! - all-MiniLM-L6-v2 (real weights): token ids identical to HF's
//!   `tokenizer.json` on all 134 corpus strings (empty to 600+ tokens, a
//!   dozen scripts), and cosine >= 0.99999 to `SentenceTransformer.encode`;
//! - bert-tiny and nomic-tiny (random weights in the real layouts, and the
//!   GGUF that llama.cpp's converter writes from them): max abs difference
//!   <= 1e-4 to HF, with and without `--dim 64` (nomic's Matryoshka recipe).
//!
//! Measured when written: MiniLM min cosine 1 - 1e-7 or better, max abs
//! about 3e-7; tiny fixtures max abs about 2.5e-7. The tests print the
//! figures.

mod common;

use common::embed::{
    check_token_ids, corpus, embed, embed_dir, id_lists, json, max_abs, min_cosine, rows,
};
use ferrite::embed::{EmbedOptions, Embedder, Pooling};

#[test]
fn minilm_token_ids_match_hf_tokenizers() {
    let model = Embedder::open(&common::real_model("minilm")).unwrap();
    let texts = corpus();
    let n_cut = check_token_ids(&model, &texts, &embed_dir().join("minilm/ids.json"), 256);
    assert!(
        n_cut >= 3,
        "the corpus has inputs over 256 tokens ({n_cut})"
    );
}

#[test]
fn minilm_matches_sentence_transformers() {
    let model = Embedder::open(&common::real_model("minilm")).unwrap();
    let texts = corpus();
    let golden = rows(&embed_dir().join("minilm/embeddings.f32"), 384);
    let got = embed(&model, &texts, EmbedOptions::default());
    let min_cos = min_cosine(&got, &golden);
    let diff = max_abs(&got, &golden);
    println!(
        "all-MiniLM-L6-v2: min cosine {min_cos:.9} (1 - {:.2e}), max abs {diff:.2e}",
        1.0 - min_cos
    );
    assert!(min_cos >= 0.99999, "min cosine {min_cos}");

    // The other poolings, unnormalized: element-wise to 1e-4 of HF.
    let raw = EmbedOptions {
        normalize: false,
        ..Default::default()
    };
    let got = embed(&model, &texts, raw);
    let golden = rows(&embed_dir().join("minilm/embeddings-unnormalized.f32"), 384);
    let diff = max_abs(&got, &golden);
    println!("mean pooling, unnormalized: max abs {diff:.2e}");
    assert!(diff <= 1e-4, "{diff}");
    let cls = EmbedOptions {
        pooling: Some(Pooling::Cls),
        ..raw
    };
    let got = embed(&model, &texts, cls);
    let golden = rows(&embed_dir().join("minilm/embeddings-cls.f32"), 384);
    let diff = max_abs(&got, &golden);
    println!("CLS pooling, unnormalized: max abs {diff:.2e}");
    assert!(diff <= 1e-4, "{diff}");
}

/// A tiny fixture from its HF directory and from its GGUF file.
fn check_fixture(name: &str, gguf: &str, dim: usize) {
    let dir = embed_dir().join(name);
    let goldens = json(&dir.join("goldens.json"));
    let max_len = goldens["max_seq_length"].as_u64().unwrap() as usize;
    let full_lengths: Vec<usize> = goldens["full_lengths"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as usize)
        .collect();
    let golden_ids = id_lists(&goldens["ids"]);
    let texts = corpus();
    let want = rows(&dir.join("embeddings.f32"), dim);
    let want64 = dir
        .join("embeddings-dim64.f32")
        .is_file()
        .then(|| rows(&dir.join("embeddings-dim64.f32"), 64));

    for path in [dir.clone(), dir.join(gguf)] {
        let model = Embedder::open(&path).unwrap();
        // The GGUF keeps no sentence-transformers length: it takes the
        // model's context, so compare the inputs no truncation touched.
        let keep: Vec<usize> = (0..texts.len())
            .filter(|&i| full_lengths[i] <= max_len.min(model.tokenizer().max_tokens))
            .collect();
        assert!(keep.len() > 100);
        for &i in &keep {
            let got = model.tokenizer().encode(&texts[i], true).unwrap();
            assert_eq!(
                got.ids,
                golden_ids[i],
                "{}: ids of text {i}",
                path.display()
            );
        }
        let texts: Vec<String> = keep.iter().map(|&i| texts[i].clone()).collect();
        let pick =
            |all: &[Vec<f32>]| -> Vec<Vec<f32>> { keep.iter().map(|&i| all[i].clone()).collect() };
        let got = embed(&model, &texts, EmbedOptions::default());
        let diff = max_abs(&got, &pick(&want));
        println!(
            "{}: max abs {diff:.2e} over {} inputs",
            path.display(),
            keep.len()
        );
        assert!(diff <= 1e-4, "{}: {diff}", path.display());
        if let Some(want64) = &want64 {
            let opts = EmbedOptions {
                dim: Some(64),
                ..Default::default()
            };
            let got = embed(&model, &texts, opts);
            let diff = max_abs(&got, &pick(want64));
            println!("{} --dim 64: max abs {diff:.2e}", path.display());
            assert!(diff <= 1e-4, "{} --dim 64: {diff}", path.display());
        }
    }
}

#[test]
fn bert_tiny_from_hf_dir_and_gguf_matches_hf() {
    check_fixture("bert-tiny", "bert-tiny.f32.gguf", 64);
}

#[test]
fn nomic_tiny_from_nomic_dir_and_gguf_matches_hf_with_and_without_matryoshka() {
    check_fixture("nomic-tiny", "nomic-tiny.f32.gguf", 128);
}
