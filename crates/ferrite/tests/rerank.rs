//! Cross-encoder rerankers against sentence-transformers' `CrossEncoder`,
//! with the random-weight `BertForSequenceClassification` fixtures and
//! goldens of `scripts/make-rerank-fixtures.py` (`testdata/rerank/`):
//! token ids and types identical to HF's (pairs cut longest-first to 512
//! tokens included), scores with and without the activation within 1e-5,
//! the same bits alone and in any batch, and the refusals.

mod common;

use std::path::PathBuf;

use ferrite::{rank_scores, Ranked, RerankOptions, Reranker, ScoreActivation, Threads};
use serde_json::Value;

fn fixture(name: &str) -> PathBuf {
    common::testdata().join("rerank").join(name)
}

struct Goldens {
    pairs: Vec<(String, String)>,
    ids: Vec<Vec<u32>>,
    types: Vec<Vec<u32>>,
    scores: Vec<Vec<f32>>,
    raw: Vec<Vec<f32>>,
}

fn goldens(name: &str) -> Goldens {
    let text = std::fs::read_to_string(fixture(name).join("goldens.json")).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    let lists = |key: &str| -> Vec<Vec<f32>> {
        v[key]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                r.as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_f64().unwrap() as f32)
                    .collect()
            })
            .collect()
    };
    Goldens {
        pairs: v["pairs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (p[0].as_str().unwrap().into(), p[1].as_str().unwrap().into()))
            .collect(),
        ids: v["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(common::ids)
            .collect(),
        types: v["types"]
            .as_array()
            .unwrap()
            .iter()
            .map(common::ids)
            .collect(),
        scores: lists("scores"),
        raw: lists("raw"),
    }
}

fn pairs(g: &Goldens) -> Vec<(&str, &str)> {
    g.pairs
        .iter()
        .map(|(q, d)| (q.as_str(), d.as_str()))
        .collect()
}

fn max_diff(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .flat_map(|(x, y)| {
            assert_eq!(x.len(), y.len());
            x.iter().zip(y).map(|(p, q)| (p - q).abs())
        })
        .fold(0.0, f32::max)
}

fn check_fixture(name: &str, labels: usize, activation: ScoreActivation) {
    let model = Reranker::open(&fixture(name)).unwrap();
    assert_eq!(model.n_labels(), labels);
    assert_eq!(model.activation(), activation);
    assert_eq!(model.max_tokens(), 512);
    let g = goldens(name);
    let p = pairs(&g);
    for (i, (q, d)) in p.iter().enumerate() {
        let t = model.tokenize_pair(q, d).unwrap();
        assert_eq!(t.ids, g.ids[i], "pair {i}: ids");
        assert_eq!(t.types, g.types[i], "pair {i}: types");
        assert_eq!(t.truncated, g.ids[i].len() == 512, "pair {i}: truncated");
    }
    let threads = Threads::all_cores();
    let scores = model
        .predict(&p, &RerankOptions::default(), &threads)
        .unwrap();
    let raw_opts = RerankOptions {
        raw_scores: true,
        ..Default::default()
    };
    let raw = model.predict(&p, &raw_opts, &threads).unwrap();
    let (d1, d2) = (max_diff(&scores, &g.scores), max_diff(&raw, &g.raw));
    println!("{name}: max abs difference {d1:.2e} (activated), {d2:.2e} (raw)");
    assert!(d1 <= 1e-5, "activated scores differ by {d1}");
    assert!(d2 <= 1e-5, "raw scores differ by {d2}");
    // The goldens spread out well beyond the tolerance, so it tells
    // pairs apart.
    let spread = g.raw.iter().map(|r| r[0]).fold(f32::MIN, f32::max)
        - g.raw.iter().map(|r| r[0]).fold(f32::MAX, f32::min);
    assert!(spread > 0.1, "goldens' spread {spread}");
}

#[test]
fn one_label_matches_cross_encoder() {
    check_fixture("bert-ce-1", 1, ScoreActivation::Sigmoid);
}

#[test]
fn three_labels_match_cross_encoder() {
    check_fixture("bert-ce-3", 3, ScoreActivation::Identity);
}

#[test]
fn same_bits_alone_and_in_any_batch() {
    let model = Reranker::open(&fixture("bert-ce-1")).unwrap();
    let g = goldens("bert-ce-1");
    let p = pairs(&g);
    let one = Threads::new(1);
    let all = Threads::all_cores();
    let whole = model.predict(&p, &RerankOptions::default(), &all).unwrap();
    for batch_size in [1, 3, 32] {
        let opts = RerankOptions {
            batch_size,
            ..Default::default()
        };
        for threads in [&one, &all] {
            let got = model.predict(&p, &opts, threads).unwrap();
            let bits = |v: &[Vec<f32>]| -> Vec<u32> { v.iter().map(|r| r[0].to_bits()).collect() };
            assert_eq!(bits(&got), bits(&whole), "batch size {batch_size}");
        }
    }
    for (i, pair) in p.iter().enumerate() {
        let alone = model
            .predict(&[*pair], &RerankOptions::default(), &one)
            .unwrap();
        assert_eq!(alone[0][0].to_bits(), whole[i][0].to_bits(), "pair {i}");
    }
}

#[test]
fn rank_sorts_by_score_then_index() {
    let model = Reranker::open(&fixture("bert-ce-1")).unwrap();
    let g = goldens("bert-ce-1");
    let query = "how many people live in berlin?";
    let docs: Vec<&str> = g.pairs.iter().map(|(_, d)| d.as_str()).collect();
    let threads = Threads::all_cores();
    let ranked = model
        .rank(query, &docs, None, &RerankOptions::default(), &threads)
        .unwrap();
    assert_eq!(ranked.len(), docs.len());
    let pairs: Vec<(&str, &str)> = docs.iter().map(|d| (query, *d)).collect();
    let scores = model
        .predict(&pairs, &RerankOptions::default(), &threads)
        .unwrap();
    for w in ranked.windows(2) {
        assert!(w[0].score >= w[1].score);
    }
    for r in &ranked {
        assert_eq!(r.score.to_bits(), scores[r.index][0].to_bits());
    }
    let top = model
        .rank(query, &docs, Some(3), &RerankOptions::default(), &threads)
        .unwrap();
    assert_eq!(top, ranked[..3]);
    // Ties keep input order; NaN goes last.
    let tied = rank_scores([0.5, f32::NAN, 0.9, 0.5].into_iter(), None);
    let order: Vec<usize> = tied.iter().map(|r: &Ranked| r.index).collect();
    assert_eq!(order, [2, 0, 3, 1]);
}

#[test]
fn refusals_are_clear() {
    // A real embedding model has no classification head.
    let minilm = common::real_model("minilm");
    let e = Reranker::open(&minilm).err().expect("refused");
    let msg = e.to_string();
    assert!(msg.contains("not a cross-encoder"), "{msg}");
    assert!(msg.contains("classifier.weight"), "{msg}");
    // A model with several labels cannot rank.
    let three = Reranker::open(&fixture("bert-ce-3")).unwrap();
    let threads = Threads::new(1);
    let e = three
        .rank("q", &["a", "b"], None, &RerankOptions::default(), &threads)
        .unwrap_err();
    assert!(e.to_string().contains("3 labels"), "{e}");
    // An empty query cannot rank.
    let one = Reranker::open(&fixture("bert-ce-1")).unwrap();
    let e = one
        .rank(" ", &["a"], None, &RerankOptions::default(), &threads)
        .unwrap_err();
    assert!(e.to_string().contains("query is empty"), "{e}");
    // A file is not a cross-encoder directory.
    let e = Reranker::open(&fixture("bert-ce-1").join("config.json"))
        .err()
        .unwrap();
    assert!(e.to_string().contains("directory"), "{e}");
}

#[test]
fn huge_inputs_are_cut_not_refused() {
    let model = Reranker::open(&fixture("bert-ce-1")).unwrap();
    let long = "lorem ipsum dolor sit amet ".repeat(2000);
    let t = model.tokenize_pair("a query", &long).unwrap();
    assert_eq!(t.ids.len(), 512);
    assert!(t.truncated);
    let threads = Threads::new(1);
    let s = model
        .predict(
            &[("a query", long.as_str())],
            &RerankOptions::default(),
            &threads,
        )
        .unwrap();
    assert!(s[0][0].is_finite());
}
