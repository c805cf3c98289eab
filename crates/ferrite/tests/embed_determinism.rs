//! Embeddings do not depend on how inputs are batched or how many threads
//! run: each input's vector is bit-identical alone, in any batch, in any
//! position of a batch, for 1 or 2 threads (the encoder packs sequences
//! without padding and every value has one fixed summation order).
//! Also: the clear errors for bad requests.

mod common;

use ferrite::embed::{EmbedOptions, Embedder, Pooling};
use ferrite::parallel::Threads;

fn texts() -> Vec<String> {
    let bench = std::fs::read_to_string(common::testdata().join("embed/bench-sentences.txt"))
        .expect("testdata/embed/bench-sentences.txt");
    let mut t: Vec<String> = bench.lines().take(37).map(String::from).collect();
    t.push(String::new());
    t.push("Ünïcödé — 日本語のテキスト, and emoji 🎉!".into());
    t.push("word ".repeat(400));
    t
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn minilm_vectors_are_identical_alone_in_any_batch_and_for_any_thread_count() {
    let model = Embedder::open(&common::real_model("minilm")).unwrap();
    let texts = texts();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let opts = EmbedOptions::default();
    let reference = model.embed(&refs, &opts, &Threads::new(2)).unwrap();
    assert_eq!(reference.len(), refs.len());
    assert!(
        reference.last().unwrap().truncated,
        "the 400-word input is cut"
    );

    // Two threads split a product's rows between them when it has many
    // (the reference's batches of 32, and 40), else its output features.
    for (batch_size, n_threads) in [(1, 1), (7, 2), (40, 1), (3, 2), (40, 2)] {
        let o = EmbedOptions { batch_size, ..opts };
        let got = model.embed(&refs, &o, &Threads::new(n_threads)).unwrap();
        for (i, (a, b)) in reference.iter().zip(&got).enumerate() {
            assert_eq!(
                bits(&a.vector),
                bits(&b.vector),
                "input {i}, batch size {batch_size}, {n_threads} threads"
            );
        }
    }
    // Input order does not matter either: reversed, each vector is the same.
    let reversed: Vec<&str> = refs.iter().rev().copied().collect();
    let got = model.embed(&reversed, &opts, &Threads::new(2)).unwrap();
    for (a, b) in reference.iter().zip(got.iter().rev()) {
        assert_eq!(bits(&a.vector), bits(&b.vector));
    }
}

#[test]
fn options_shape_the_output() {
    let model = Embedder::open(&common::real_model("minilm")).unwrap();
    let threads = Threads::new(1);
    let text = ["A short sentence about embeddings."];
    let full = &model
        .embed(&text, &EmbedOptions::default(), &threads)
        .unwrap()[0];
    assert_eq!(full.vector.len(), 384);
    let norm: f32 = full.vector.iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!((norm - 1.0).abs() < 1e-5);

    // --dim 64 for BERT: the first 64 values, re-normalized.
    let o = EmbedOptions {
        dim: Some(64),
        ..Default::default()
    };
    let cut = &model.embed(&text, &o, &threads).unwrap()[0];
    assert_eq!(cut.vector.len(), 64);
    let head_norm: f32 = full.vector[..64].iter().map(|x| x * x).sum::<f32>().sqrt();
    for (c, f) in cut.vector.iter().zip(&full.vector) {
        assert!((c - f / head_norm).abs() < 1e-6);
    }

    // Unnormalized mean pooling, normalized afterwards, is the default.
    let o = EmbedOptions {
        normalize: false,
        ..Default::default()
    };
    let raw = &model.embed(&text, &o, &threads).unwrap()[0];
    let n: f32 = raw.vector.iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!(
        (n - 1.0).abs() > 1e-3,
        "mean pooling is not unit length by itself"
    );
    for (r, f) in raw.vector.iter().zip(&full.vector) {
        assert!((r / n - f).abs() < 1e-6);
    }

    // CLS pooling differs from mean pooling.
    let o = EmbedOptions {
        pooling: Some(Pooling::Cls),
        ..Default::default()
    };
    let cls = &model.embed(&text, &o, &threads).unwrap()[0];
    assert!(cls
        .vector
        .iter()
        .zip(&full.vector)
        .any(|(a, b)| (a - b).abs() > 1e-3));
}

#[test]
fn bad_requests_get_clear_errors() {
    let model = Embedder::open(&common::real_model("minilm")).unwrap();
    let threads = Threads::new(1);
    let long = "word ".repeat(400);
    let o = EmbedOptions {
        truncate: false,
        ..Default::default()
    };
    let err = model
        .embed(&["fine", &long], &o, &threads)
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("input 2") && err.contains("longer than"),
        "{err}"
    );
    // Two threads tokenize the two halves of the texts: the error named is
    // still the first in input order, whichever thread met it.
    let err = model
        .embed(&["fine", "ok", &long, "fine", &long], &o, &Threads::new(2))
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("input 3:"), "{err}");
    for dim in [0, 385] {
        let o = EmbedOptions {
            dim: Some(dim),
            ..Default::default()
        };
        let err = model.embed(&["x"], &o, &threads).err().unwrap().to_string();
        // The library names the option neutrally (the CLI says `--dim`,
        // Python `dim=`; issue 44 item 12).
        assert!(
            err.contains(&format!("dim={dim} is not in 1..=384")) && !err.contains("--dim"),
            "{err}"
        );
    }
    // An empty request is fine and gives nothing.
    assert!(model
        .embed(&[], &EmbedOptions::default(), &threads)
        .unwrap()
        .is_empty());
}

#[test]
fn loading_a_decoder_or_a_missing_dir_as_an_embedding_model_fails_clearly() {
    let err = Embedder::open(&common::real_model("smollm2"))
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("llama") && err.contains("not a supported embedding model"),
        "{err}"
    );
    let err = Embedder::open(std::path::Path::new("/nonexistent/model"))
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("/nonexistent/model"), "{err}");
}

/// Copies the bert-tiny fixture with `config.json` rewritten by `edit`,
/// and returns the error opening it gives.
fn open_with_config(edit: impl Fn(&mut serde_json::Value)) -> String {
    let src = common::testdata().join("embed/bert-tiny");
    let dir = std::env::temp_dir().join(format!(
        "ferrite-bad-config-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    for f in ["model.safetensors", "tokenizer.json"] {
        std::fs::copy(src.join(f), dir.join(f)).unwrap();
    }
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(src.join("config.json")).unwrap()).unwrap();
    edit(&mut config);
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    let result = Embedder::open(&dir);
    std::fs::remove_dir_all(&dir).ok();
    match result {
        Ok(_) => "opened".into(),
        Err(e) => e.to_string(),
    }
}

#[test]
fn inconsistent_configs_are_clear_errors_not_panics() {
    let err = open_with_config(|c| c["hidden_size"] = 96.into());
    assert!(err.contains("shape") && err.contains("96"), "{err}");
    let err = open_with_config(|c| c["num_attention_heads"] = 5.into());
    assert!(err.contains("heads"), "{err}");
    let err = open_with_config(|c| c["num_hidden_layers"] = 3.into());
    assert!(
        err.contains("missing tensor") && err.contains("layer.2"),
        "{err}"
    );
    let err = open_with_config(|c| c["hidden_act"] = "swishy".into());
    assert!(err.contains("hidden_act"), "{err}");
    let err = open_with_config(|c| c["hidden_size"] = (-1).into());
    assert!(err.contains("hidden_size"), "{err}");
    let err = open_with_config(|c| c["model_type"] = "t5".into());
    assert!(err.contains("model_type 't5'"), "{err}");
    assert_eq!(open_with_config(|_| {}), "opened");
}

#[test]
fn token_ids_embed_as_their_text() {
    for name in ["minilm", "nomic-embed-v1.5"] {
        let model = Embedder::open(&common::real_model(name)).unwrap();
        let tok = model.tokenizer();
        let texts = ["A cat sits on the mat.", "", "Ünïcödé — 日本語, 🎉!"];
        let with_specials: Vec<Vec<u32>> = texts
            .iter()
            .map(|t| tok.encode_untruncated(t).unwrap())
            .collect();
        // A client's ids are the text's tokens without [CLS] and [SEP].
        for ids in &with_specials {
            let bare = &ids[1..ids.len() - 1];
            assert_eq!(&tok.with_special_tokens(bare).unwrap(), ids, "{name}");
        }
        let refs: Vec<&[u32]> = with_specials.iter().map(Vec::as_slice).collect();
        let opts = EmbedOptions::default();
        let threads = Threads::new(2);
        let a = model.embed(&texts, &opts, &threads).unwrap();
        let b = model.embed_tokens(&refs, &opts, &threads).unwrap();
        for (x, y) in a.iter().zip(&b) {
            assert_eq!(bits(&x.vector), bits(&y.vector), "{name}");
        }
        let e = tok
            .with_special_tokens(&[5, 1 << 30])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("token 1: id 1073741824 is not in the vocabulary"),
            "{e}"
        );
        let e = match model.embed_tokens(&[&[1u32 << 30]], &opts, &threads) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("an id past the vocabulary was embedded"),
        };
        assert!(e.contains("input 1: token id 1073741824"), "{e}");
        let long = vec![100u32; model.max_positions() + 1];
        assert!(model.embed_tokens(&[&long], &opts, &threads).is_err());
    }
}
