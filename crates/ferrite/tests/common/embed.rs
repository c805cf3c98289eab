//! Helpers for the embedding tests: the corpus, golden files, distances.

use std::path::{Path, PathBuf};

use ferrite::embed::{EmbedOptions, Embedder};
use ferrite::parallel::Threads;

/// testdata/embed.
pub fn embed_dir() -> PathBuf {
    super::testdata().join("embed")
}

/// A JSON file.
pub fn json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The embedding corpus (testdata/embed/corpus.json).
pub fn corpus() -> Vec<String> {
    serde_json::from_value(json(&embed_dir().join("corpus.json"))).unwrap()
}

/// `n x dim` little-endian f32 rows.
pub fn rows(path: &Path, dim: usize) -> Vec<Vec<f32>> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let v: Vec<f32> = bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    v.chunks_exact(dim).map(<[f32]>::to_vec).collect()
}

/// A JSON array of id arrays.
pub fn id_lists(v: &serde_json::Value) -> Vec<Vec<u32>> {
    v.as_array()
        .expect("an array of id lists")
        .iter()
        .map(super::ids)
        .collect()
}

pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(&x, &y)| x as f64 * y as f64).sum();
    let na: f64 = a.iter().map(|&x| (x as f64).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|&x| (x as f64).powi(2)).sum::<f64>().sqrt();
    dot / (na * nb)
}

/// The smallest cosine of corresponding rows.
pub fn min_cosine(a: &[Vec<f32>], b: &[Vec<f32>]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| cosine(x, y))
        .fold(f64::MAX, f64::min)
}

pub fn max_abs(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .flat_map(|(x, y)| {
            assert_eq!(x.len(), y.len());
            x.iter().zip(y).map(|(p, q)| (p - q).abs())
        })
        .fold(0.0, f32::max)
}

/// The vectors of `texts`, two threads.
pub fn embed(model: &Embedder, texts: &[String], opts: EmbedOptions) -> Vec<Vec<f32>> {
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    model
        .embed(&refs, &opts, &Threads::new(2))
        .unwrap()
        .into_iter()
        .map(|e| e.vector)
        .collect()
}

/// Checks `model`'s token ids of `texts` against a golden `ids.json`
/// (`full`: no truncation; `truncated`: cut to `max` tokens, the model's
/// maximum); returns how many inputs were cut.
pub fn check_token_ids(model: &Embedder, texts: &[String], golden: &Path, max: usize) -> usize {
    let golden = json(golden);
    assert_eq!(golden["max_seq_length"].as_u64(), Some(max as u64));
    assert_eq!(model.tokenizer().max_tokens, max);
    let full = id_lists(&golden["full"]);
    let truncated = id_lists(&golden["truncated"]);
    assert_eq!(texts.len(), full.len());
    let mut n_cut = 0;
    for (i, t) in texts.iter().enumerate() {
        assert_eq!(
            model.tokenizer().encode_untruncated(t).unwrap(),
            full[i],
            "text {i}: {t:?}"
        );
        let got = model.tokenizer().encode(t, true).unwrap();
        assert_eq!(got.ids, truncated[i], "text {i} truncated");
        assert_eq!(got.truncated, full[i].len() > max);
        n_cut += got.truncated as usize;
    }
    n_cut
}

/// The cosines of `model`'s vectors of `texts` to the golden `n x dim`
/// rows in testdata/embed/`golden`, in the texts' order (printed: the
/// smallest, with its text's index, and the mean).
pub fn cosines_to_golden(
    model: &Embedder,
    label: &str,
    golden: &str,
    dim: usize,
    texts: &[String],
) -> Vec<f64> {
    let want = rows(&embed_dir().join(golden), dim);
    assert_eq!(want.len(), texts.len());
    let got = embed(model, texts, EmbedOptions::default());
    let cos: Vec<f64> = got.iter().zip(&want).map(|(a, b)| cosine(a, b)).collect();
    let (worst, min) = cos
        .iter()
        .copied()
        .enumerate()
        .fold((0, f64::MAX), |m, (i, c)| if c < m.1 { (i, c) } else { m });
    let mean = cos.iter().sum::<f64>() / cos.len() as f64;
    println!(
        "{label}: min cosine {min:.7} (text {worst}), mean {mean:.7} over {} texts",
        texts.len()
    );
    cos
}

/// Asserts that `model`'s vectors of `texts` have the same bits at one and
/// two threads, and for a few texts embedded alone.
pub fn assert_bits_independent_of_batch_and_threads(model: &Embedder, texts: &[String]) {
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
    let last = texts.len() - 1;
    for i in [0, last / 2, last] {
        let alone = embed(model, &texts[i..=i], opts);
        assert_eq!(bits(&alone), bits(&one[i..=i]), "text {i} alone");
    }
}
