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

use std::path::{Path, PathBuf};

use ferrite::embed::{EmbedOptions, Embedder, Pooling};
use ferrite::parallel::Threads;

fn embed_dir() -> PathBuf {
    common::testdata().join("embed")
}

fn corpus() -> Vec<String> {
    let text = std::fs::read_to_string(embed_dir().join("corpus.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// `n x dim` little-endian f32 rows.
fn rows(path: &Path, dim: usize) -> Vec<Vec<f32>> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let v: Vec<f32> = bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    v.chunks_exact(dim).map(<[f32]>::to_vec).collect()
}

fn ids(v: &serde_json::Value) -> Vec<Vec<u32>> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| {
            s.as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_u64().unwrap() as u32)
                .collect()
        })
        .collect()
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(&x, &y)| x as f64 * y as f64).sum();
    let na: f64 = a.iter().map(|&x| (x as f64).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|&x| (x as f64).powi(2)).sum::<f64>().sqrt();
    dot / (na * nb)
}

fn max_abs(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .flat_map(|(x, y)| {
            assert_eq!(x.len(), y.len());
            x.iter().zip(y).map(|(p, q)| (p - q).abs())
        })
        .fold(0.0, f32::max)
}

fn embed(model: &Embedder, texts: &[String], opts: EmbedOptions) -> Vec<Vec<f32>> {
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    model
        .embed(&refs, &opts, &Threads::new(2))
        .unwrap()
        .into_iter()
        .map(|e| e.vector)
        .collect()
}

#[test]
fn minilm_token_ids_match_hf_tokenizers() {
    let model = Embedder::open(&common::real_model("minilm")).unwrap();
    let golden = json(&embed_dir().join("minilm/ids.json"));
    assert_eq!(golden["max_seq_length"].as_u64(), Some(256));
    assert_eq!(model.tokenizer.max_tokens, 256);
    let texts = corpus();
    let full = ids(&golden["full"]);
    let truncated = ids(&golden["truncated"]);
    assert_eq!(texts.len(), full.len());
    let mut n_cut = 0;
    for (i, t) in texts.iter().enumerate() {
        assert_eq!(
            model.tokenizer.encode_untruncated(t).unwrap(),
            full[i],
            "text {i}: {t:?}"
        );
        let got = model.tokenizer.encode(t, true).unwrap();
        assert_eq!(got.ids, truncated[i], "text {i} truncated");
        assert_eq!(got.truncated, full[i].len() > 256);
        n_cut += got.truncated as usize;
    }
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
    let min_cos = got
        .iter()
        .zip(&golden)
        .map(|(a, b)| cosine(a, b))
        .fold(f64::MAX, f64::min);
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
    let golden_ids = ids(&goldens["ids"]);
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
            .filter(|&i| full_lengths[i] <= max_len.min(model.tokenizer.max_tokens))
            .collect();
        assert!(keep.len() > 100);
        for &i in &keep {
            let got = model.tokenizer.encode(&texts[i], true).unwrap();
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
