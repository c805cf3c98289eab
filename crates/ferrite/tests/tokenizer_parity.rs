//! The GGUF tokenizers on the real decoder models: token ids identical to
//! llama.cpp's `llama-tokenize` for every string of
//! testdata/tokenizer/corpus.json (goldens made by
//! scripts/make-tokenizer-goldens.py), decoding back to the input, and
//! streaming decoding that never splits a character.

mod common;

use std::sync::OnceLock;

use ferrite::formats::gguf::GgufFile;
use ferrite::tokenize::Tokenizer;
use serde_json::Value as Json;
use sha2::{Digest, Sha256};

fn tokenizer(short_name: &str) -> &'static Tokenizer {
    static SMOLLM2: OnceLock<Tokenizer> = OnceLock::new();
    static GEMMA3: OnceLock<Tokenizer> = OnceLock::new();
    static QWEN2: OnceLock<Tokenizer> = OnceLock::new();
    let cell = match short_name {
        "smollm2" => &SMOLLM2,
        "gemma3-270m" => &GEMMA3,
        "qwen2.5-0.5b" => &QWEN2,
        other => panic!("no such model {other}"),
    };
    cell.get_or_init(|| {
        let file = GgufFile::open(common::real_model(short_name)).unwrap();
        Tokenizer::from_gguf(file.metadata()).unwrap()
    })
}

fn corpus() -> Vec<String> {
    let text = std::fs::read_to_string(common::testdata().join("tokenizer/corpus.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// The goldens for one mode, checked to belong to the current corpus.
fn goldens(short_name: &str, mode: &str) -> Vec<Vec<u32>> {
    let path = common::testdata().join(format!("tokenizer/{short_name}.json"));
    let golden: Json = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let corpus = std::fs::read(common::testdata().join("tokenizer/corpus.json")).unwrap();
    let sha: String = Sha256::digest(&corpus)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(
        golden["corpus_sha256"].as_str(),
        Some(sha.as_str()),
        "corpus.json changed since the goldens were made: rerun scripts/make-tokenizer-goldens.py"
    );
    serde_json::from_value(golden[mode].clone()).unwrap()
}

#[test]
fn tokenizers_can_be_shared_across_threads() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Tokenizer>();
}

/// Every corpus string tokenizes as llama-tokenize does (BOS as the model
/// asks, special tokens parsed or not).
fn check_parity(short_name: &str, parse_special: bool) {
    let tok = tokenizer(short_name);
    let mode = if parse_special {
        "parse_special"
    } else {
        "no_parse_special"
    };
    let corpus = corpus();
    let expected = goldens(short_name, mode);
    assert_eq!(
        corpus.len(),
        expected.len(),
        "goldens are stale: rerun the script"
    );
    let mut mismatches = Vec::new();
    for (text, want) in corpus.iter().zip(&expected) {
        let got = tok.encode(text, tok.adds_bos(), parse_special);
        if &got != want {
            mismatches.push(format!(
                "{text:?}\n  llama.cpp {want:?}\n  ferrite   {got:?}"
            ));
        }
    }
    let n = corpus.len();
    eprintln!(
        "{short_name} {mode}: {}/{n} strings identical",
        n - mismatches.len()
    );
    assert!(
        mismatches.is_empty(),
        "{short_name} {mode}: {} of {n} differ:\n{}",
        mismatches.len(),
        mismatches.join("\n")
    );
}

#[test]
fn smollm2_matches_llama_cpp_parsing_special() {
    check_parity("smollm2", true);
}

#[test]
fn smollm2_matches_llama_cpp_not_parsing_special() {
    check_parity("smollm2", false);
}

#[test]
fn qwen2_matches_llama_cpp_parsing_special() {
    check_parity("qwen2.5-0.5b", true);
}

#[test]
fn qwen2_matches_llama_cpp_not_parsing_special() {
    check_parity("qwen2.5-0.5b", false);
}

#[test]
fn gemma3_matches_llama_cpp_parsing_special() {
    check_parity("gemma3-270m", true);
}

#[test]
fn gemma3_matches_llama_cpp_not_parsing_special() {
    check_parity("gemma3-270m", false);
}

/// decode(encode(s)) == s, special tokens rendered as text. Byte-level BPE
/// gives back every string; SentencePiece writes spaces as `▁` (U+2581), so
/// a literal `▁` in the input comes back as a space.
fn check_round_trip(short_name: &str, exempt: impl Fn(&str) -> bool) {
    let tok = tokenizer(short_name);
    for text in corpus() {
        let ids = tok.encode(&text, false, true);
        let back = tok.decode(&ids, false);
        if exempt(&text) {
            assert_eq!(
                back,
                text.replace('\u{2581}', " "),
                "{short_name}: {text:?}"
            );
        } else {
            assert_eq!(back, text, "{short_name}: {ids:?}");
        }
    }
}

#[test]
fn smollm2_decodes_back_to_the_input() {
    check_round_trip("smollm2", |_| false);
}

#[test]
fn gemma3_decodes_back_to_the_input() {
    check_round_trip("gemma3-270m", |t| t.contains('\u{2581}'));
}

#[test]
fn qwen2_decodes_back_to_the_input() {
    check_round_trip("qwen2.5-0.5b", |_| false);
}

#[test]
fn qwen2_streaming_decode_never_splits_a_character() {
    check_streaming("qwen2.5-0.5b");
}

#[test]
fn skipping_special_tokens_drops_their_text() {
    let tok = tokenizer("smollm2");
    let ids = tok.encode("<|im_start|>user\nHi<|im_end|>", false, true);
    assert_eq!(ids[0], 1);
    assert_eq!(tok.decode(&ids, true), "user\nHi");
    assert_eq!(tok.decode(&ids, false), "<|im_start|>user\nHi<|im_end|>");

    let tok = tokenizer("gemma3-270m");
    let ids = tok.encode("<start_of_turn>user\nHi<end_of_turn>", true, true);
    assert_eq!(&ids[..2], &[2, 105]);
    assert_eq!(tok.decode(&ids, true), "user\nHi");
    assert_eq!(
        tok.decode(&ids, false),
        "<bos><start_of_turn>user\nHi<end_of_turn>"
    );
}

/// Token-by-token output, concatenated, is the whole decode, and no chunk
/// ever holds a replacement character the whole decode does not have.
fn check_streaming(short_name: &str) {
    let tok = tokenizer(short_name);
    for text in corpus() {
        let ids = tok.encode(&text, true, true);
        for skip_special in [false, true] {
            let mut stream = tok.stream_decoder(skip_special);
            let mut joined = String::new();
            for &id in &ids {
                joined.push_str(&stream.push(id));
            }
            joined.push_str(&stream.finish());
            assert_eq!(
                joined,
                tok.decode(&ids, skip_special),
                "{short_name}: {text:?}"
            );
        }
    }
}

#[test]
fn smollm2_streaming_decode_never_splits_a_character() {
    check_streaming("smollm2");
}

#[test]
fn gemma3_streaming_decode_never_splits_a_character() {
    check_streaming("gemma3-270m");
}

#[test]
fn streaming_holds_back_partial_characters() {
    // Gemma has no token for U+20000, so SentencePiece falls back to bytes.
    let tok = tokenizer("gemma3-270m");
    let ids = tok.encode("𠀀", false, false);
    let bytes: Vec<u32> = "𠀀"
        .bytes()
        .map(|b| tok.token_id(&format!("<0x{b:02X}>")).unwrap())
        .collect();
    assert_eq!(ids, bytes);
    let mut stream = tok.stream_decoder(true);
    let chunks: Vec<String> = ids.iter().map(|&id| stream.push(id)).collect();
    assert_eq!(chunks, ["", "", "", "𠀀"]);
    assert_eq!(stream.finish(), "");

    // A lone continuation byte can never complete: it comes out as U+FFFD.
    let mut stream = tok.stream_decoder(true);
    assert_eq!(stream.push(ids[1]), "\u{FFFD}");
    let mut stream = tok.stream_decoder(true);
    assert_eq!(stream.push(ids[0]), "");
    assert_eq!(stream.finish(), "\u{FFFD}");
}

#[test]
fn special_ids_and_end_of_generation() {
    let tok = tokenizer("smollm2");
    assert_eq!(tok.vocab_size(), 49152);
    // llama.cpp also takes <|endoftext|> as EOT (its log: "EOT token = 0").
    assert_eq!(
        (tok.bos_id(), tok.eos_id(), tok.eot_id()),
        (Some(1), Some(2), Some(0))
    );
    assert!(!tok.adds_bos() && !tok.adds_eos());
    assert_eq!(tok.token_text(2), Some("<|im_end|>"));
    assert!(tok.is_control(1) && !tok.is_control(17));
    // <|endoftext|>, <|im_end|>, and <reponame> (llama.cpp's FIM-repo guess).
    assert_eq!(tok.end_of_generation_ids().collect::<Vec<_>>(), [0, 2, 4]);
    assert!(tok.is_end_of_generation(2) && !tok.is_end_of_generation(1));

    let tok = tokenizer("gemma3-270m");
    assert_eq!(tok.vocab_size(), 262144);
    assert_eq!(
        (tok.bos_id(), tok.eos_id(), tok.eot_id()),
        (Some(2), Some(1), Some(106))
    );
    assert!(tok.adds_bos() && !tok.adds_eos());
    assert_eq!(tok.token_text(106), Some("<end_of_turn>"));
    // <eos>, <end_of_turn> and </s>.
    assert_eq!(
        tok.end_of_generation_ids().collect::<Vec<_>>(),
        [1, 106, 212]
    );
    assert_eq!(tok.token_bytes(248), b"\n");
    assert_eq!(tok.token_bytes(u32::MAX), b"");
    assert_eq!(tok.encode("", true, true), [2]);
}
