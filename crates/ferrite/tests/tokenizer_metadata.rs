//! GGUF tokenizers built from small hand-made metadata: the algorithms on
//! vocabularies small enough to reason about, and hostile metadata, which
//! must give an error naming the key, never a panic.

use ferrite::formats::gguf::{Array, Metadata, Value};
use ferrite::tokenize::Tokenizer;

fn strings(v: &[&str]) -> Value {
    Value::Array(Array::String(v.iter().map(|s| s.to_string()).collect()))
}

/// A SentencePiece vocabulary: `<unk> <s> </s>`, the 256 byte tokens, then
/// `pieces` with their scores.
fn spm_metadata(pieces: &[(&str, f32)]) -> Metadata {
    let mut texts = vec!["<unk>".to_string(), "<s>".to_string(), "</s>".to_string()];
    let mut types = vec![2, 3, 3];
    let mut scores = vec![0.0, 0.0, 0.0];
    for b in 0..=255u8 {
        texts.push(format!("<0x{b:02X}>"));
        types.push(6);
        scores.push(0.0);
    }
    for (text, score) in pieces {
        texts.push(text.to_string());
        types.push(1);
        scores.push(*score);
    }
    let mut md = Metadata::default();
    md.insert("tokenizer.ggml.model".into(), Value::String("llama".into()));
    md.insert(
        "tokenizer.ggml.tokens".into(),
        Value::Array(Array::String(texts)),
    );
    md.insert(
        "tokenizer.ggml.token_type".into(),
        Value::Array(Array::I32(types)),
    );
    md.insert(
        "tokenizer.ggml.scores".into(),
        Value::Array(Array::F32(scores)),
    );
    md
}

/// A byte-level BPE vocabulary over the bytes of `a b c` and space.
fn bpe_metadata() -> Metadata {
    let mut md = Metadata::default();
    md.insert("tokenizer.ggml.model".into(), Value::String("gpt2".into()));
    md.insert("tokenizer.ggml.pre".into(), Value::String("smollm".into()));
    md.insert(
        "tokenizer.ggml.tokens".into(),
        strings(&[
            "<|endoftext|>",
            "a",
            "b",
            "c",
            "Ġ",
            "ab",
            "Ġab",
            "1",
            "2",
            "12",
        ]),
    );
    md.insert(
        "tokenizer.ggml.token_type".into(),
        Value::Array(Array::I32(vec![3, 1, 1, 1, 1, 1, 1, 1, 1, 1])),
    );
    md.insert(
        "tokenizer.ggml.merges".into(),
        strings(&["a b", "Ġ ab", "1 2"]),
    );
    md.insert("tokenizer.ggml.bos_token_id".into(), Value::U32(0));
    md.insert("tokenizer.ggml.eos_token_id".into(), Value::U32(0));
    md
}

fn error_of(md: &Metadata) -> String {
    match Tokenizer::from_gguf(md) {
        Ok(_) => panic!("hostile metadata was accepted"),
        Err(e) => e.to_string(),
    }
}

fn with(mut md: Metadata, key: &str, value: Value) -> Metadata {
    // Metadata::insert keeps the first value: rebuild without the key.
    let mut out = Metadata::default();
    for (k, v) in md.iter() {
        if k != key {
            out.insert(k.to_string(), v.clone());
        }
    }
    out.insert(key.to_string(), value);
    md = out;
    md
}

fn without(md: &Metadata, key: &str) -> Metadata {
    let mut out = Metadata::default();
    for (k, v) in md.iter() {
        if k != key {
            out.insert(k.to_string(), v.clone());
        }
    }
    out
}

#[test]
fn spm_merges_the_best_scoring_pair_first() {
    let md = spm_metadata(&[
        ("▁", -1.0),
        ("a", -1.0),
        ("b", -1.0),
        ("ab", -3.0),
        ("▁a", -2.0),
        ("▁ab", -1.5),
    ]);
    let tok = Tokenizer::from_gguf(&md).unwrap();
    let id = |t: &str| tok.token_id(t).unwrap();
    // Default SPM: BOS added, a space prefix before the text.
    assert!(tok.adds_bos());
    // "▁ab": ▁a (-2) beats ab (-3), then ▁a+b = ▁ab.
    assert_eq!(tok.encode("ab", true, false), [1, id("▁ab")]);
    // Characters with no token fall back to their UTF-8 bytes.
    let e_acute: Vec<u32> = [0xC3u8, 0xA9]
        .iter()
        .map(|b| id(&format!("<0x{b:02X}>")))
        .collect();
    assert_eq!(
        tok.encode("é", false, false),
        [id("▁"), e_acute[0], e_acute[1]]
    );
    // Decoding drops the space prefix again (llama.cpp keeps it after a BOS).
    assert_eq!(tok.decode(&tok.encode("ab é", false, false), true), "ab é");
    assert_eq!(tok.decode(&tok.encode("ab é", true, false), true), " ab é");
}

#[test]
fn bpe_isolates_digits_and_merges_by_rank() {
    let tok = Tokenizer::from_gguf(&bpe_metadata()).unwrap();
    assert!(!tok.adds_bos());
    // smollm splits every digit on its own, so "12" never merges.
    assert_eq!(tok.encode("ab ab12", false, false), [5, 6, 7, 8]);
    assert_eq!(tok.encode("<|endoftext|>c", false, true), [0, 3]);
    assert_eq!(tok.decode(&[5, 6, 0, 3], false), "ab ab<|endoftext|>c");
    assert_eq!(tok.decode(&[5, 6, 0, 3], true), "ab abc");
    assert!(tok.is_end_of_generation(0));
}

#[test]
fn missing_keys_are_named() {
    let md = bpe_metadata();
    for key in [
        "tokenizer.ggml.model",
        "tokenizer.ggml.tokens",
        "tokenizer.ggml.merges",
    ] {
        let err = error_of(&without(&md, key));
        assert!(err.contains(key) && err.contains("missing"), "{err}");
    }
}

#[test]
fn wrong_types_are_named() {
    let cases = [
        ("tokenizer.ggml.model", Value::U32(1)),
        ("tokenizer.ggml.tokens", Value::Array(Array::I32(vec![1]))),
        (
            "tokenizer.ggml.token_type",
            Value::Array(Array::F32(vec![1.0; 10])),
        ),
        ("tokenizer.ggml.scores", strings(&["x"])),
        ("tokenizer.ggml.merges", Value::String("a b".into())),
        ("tokenizer.ggml.add_bos_token", Value::U8(1)),
        ("tokenizer.ggml.bos_token_id", Value::I32(-1)),
        ("tokenizer.ggml.eos_token_id", Value::String("2".into())),
    ];
    for (key, value) in cases {
        let err = error_of(&with(bpe_metadata(), key, value));
        assert!(err.contains(key) && err.contains("should be"), "{err}");
    }
}

#[test]
fn mismatched_lengths_are_errors() {
    let md = with(
        bpe_metadata(),
        "tokenizer.ggml.token_type",
        Value::Array(Array::I32(vec![1; 9])),
    );
    assert!(error_of(&md).contains("has 9 entries but the vocabulary has 10 tokens"));
    let md = with(
        spm_metadata(&[]),
        "tokenizer.ggml.scores",
        Value::Array(Array::F32(vec![0.0; 1000])),
    );
    assert!(error_of(&md).contains("tokenizer.ggml.scores"));
}

#[test]
fn ids_out_of_range_are_errors() {
    for key in [
        "tokenizer.ggml.bos_token_id",
        "tokenizer.ggml.eos_token_id",
        "tokenizer.ggml.eot_token_id",
        "tokenizer.ggml.unknown_token_id",
        "tokenizer.ggml.padding_token_id",
    ] {
        for id in [10u64, u64::from(u32::MAX), u64::MAX] {
            let err = error_of(&with(bpe_metadata(), key, Value::U64(id)));
            assert!(err.contains(key) && err.contains("out of range"), "{err}");
        }
    }
}

#[test]
fn other_bad_vocabularies_are_errors() {
    let err = error_of(&with(
        bpe_metadata(),
        "tokenizer.ggml.model",
        Value::String("bert".into()),
    ));
    assert!(err.contains("unsupported tokenizer model 'bert'"), "{err}");
    let err = error_of(&with(
        bpe_metadata(),
        "tokenizer.ggml.pre",
        Value::String("nope".into()),
    ));
    assert!(
        err.contains("tokenizer.ggml.pre") && err.contains("'nope'"),
        "{err}"
    );
    let err = error_of(&with(
        bpe_metadata(),
        "tokenizer.ggml.merges",
        strings(&["a b", "ab"]),
    ));
    assert!(err.contains("entry 1"), "{err}");
    let err = error_of(&with(
        bpe_metadata(),
        "tokenizer.ggml.tokens",
        strings(&["a"; 10]),
    ));
    assert!(err.contains("same text"), "{err}");
    let err = error_of(&with(bpe_metadata(), "tokenizer.ggml.tokens", strings(&[])));
    assert!(err.contains("empty"), "{err}");
    // A byte-typed token must be <0xNN>.
    let md = with(
        bpe_metadata(),
        "tokenizer.ggml.token_type",
        Value::Array(Array::I32(vec![6; 10])),
    );
    assert!(error_of(&md).contains("not <0xNN>"));
    // BOS to be added, but the default BOS (11) is outside a 10-token vocabulary.
    let md = with(
        without(&bpe_metadata(), "tokenizer.ggml.bos_token_id"),
        "tokenizer.ggml.add_bos_token",
        Value::Bool(true),
    );
    assert!(error_of(&md).contains("no BOS"));
}

#[test]
fn odd_but_valid_input_never_panics() {
    let tok = Tokenizer::from_gguf(&bpe_metadata()).unwrap();
    // Characters with no token at all are dropped, as llama.cpp does.
    assert_eq!(tok.encode("zz", false, false), Vec::<u32>::new());
    assert_eq!(tok.decode(&[u32::MAX, 99, 5], true), "ab");
    let mut stream = tok.stream_decoder(false);
    assert_eq!(stream.push(u32::MAX), "");
    // Empty token texts are renamed, so a special token can never be empty.
    let md = with(
        bpe_metadata(),
        "tokenizer.ggml.tokens",
        strings(&["", "a", "b", "c", "Ġ", "ab", "Ġab", "1", "2", "12"]),
    );
    let tok = Tokenizer::from_gguf(&md).unwrap();
    assert_eq!(tok.token_text(0), Some("[EMPTY_0]"));
    assert_eq!(tok.encode("ab", false, true), [5]);
}
