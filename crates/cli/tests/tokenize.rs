//! `ferrite tokenize` end to end on the real models, against the
//! llama-tokenize goldens in testdata/tokenizer/ (made by
//! scripts/make-tokenizer-goldens.py).

mod common;

use std::path::PathBuf;
use std::process::Output;

use serde_json::Value as Json;

fn testdata() -> PathBuf {
    common::testdata().join("tokenizer")
}

/// Runs `ferrite tokenize ARGS` with `stdin` as standard input.
fn run(args: &[&str], stdin: &[u8]) -> Output {
    let args: Vec<&str> = std::iter::once("tokenize")
        .chain(args.iter().copied())
        .collect();
    common::ferrite_bytes(&args, stdin)
}

fn ok(args: &[&str], stdin: &[u8]) -> String {
    let out = run(args, stdin);
    assert!(
        out.status.success(),
        "ferrite tokenize {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// llama-tokenize's `--ids` line for corpus string `text`.
fn golden_line(model: &str, mode: &str, text: &str) -> String {
    let read = |name: &str| -> Json {
        serde_json::from_str(&std::fs::read_to_string(testdata().join(name)).unwrap()).unwrap()
    };
    let corpus = read("corpus.json");
    let index = corpus
        .as_array()
        .unwrap()
        .iter()
        .position(|s| s == text)
        .unwrap_or_else(|| panic!("{text:?} is not in the corpus"));
    let ids: Vec<String> = read(&format!("{model}.json"))[mode][index]
        .as_array()
        .unwrap()
        .iter()
        .map(|id| id.to_string())
        .collect();
    format!("[{}]\n", ids.join(", "))
}

#[test]
fn prints_ids_like_llama_tokenize() {
    for model in ["smollm2", "gemma3-270m"] {
        for text in [
            "Hello world",
            "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n",
            "",
        ] {
            assert_eq!(
                ok(&[model, text], b""),
                golden_line(model, "parse_special", text)
            );
        }
        let text = "<start_of_turn>user\nHi there<end_of_turn>\n<start_of_turn>model\n";
        assert_eq!(
            ok(&[model, "--no-parse-special", text], b""),
            golden_line(model, "no_parse_special", text)
        );
    }
    assert_eq!(ok(&["gemma3-270m", ""], b""), "[2]\n");
    assert_eq!(ok(&["smollm2", ""], b""), "[]\n");
}

#[test]
fn reads_standard_input_byte_for_byte() {
    for text in [
        "trailing newlines\n\n",
        "line1\nline2\r\nline3\rline4",
        "\t\tindented\n\t\t\tmore",
    ] {
        for model in ["smollm2", "gemma3-270m"] {
            assert_eq!(
                ok(&[model, "-"], text.as_bytes()),
                golden_line(model, "parse_special", text)
            );
        }
    }
}

#[test]
fn prints_pieces_as_json_strings() {
    assert_eq!(
        ok(&["smollm2", "--pieces", "Hello world"], b""),
        "[\"Hello\", \" world\"]\n"
    );
    let out = ok(&["gemma3-270m", "--pieces", "-"], "a\n\"é\"".as_bytes());
    let pieces: Vec<String> = serde_json::from_str(&out).unwrap();
    assert_eq!(pieces.concat(), "<bos>a\n\"é\"");
}

#[test]
fn invalid_utf8_on_stdin_is_a_one_line_error() {
    let out = run(&["smollm2", "-"], b"ok \xff\xfe bad");
    assert!(!out.status.success());
    assert!(out.stdout.is_empty());
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("ferrite: ") && err.contains("not valid UTF-8") && err.contains("offset 3"),
        "{err}"
    );
}

#[test]
fn a_missing_model_is_an_error() {
    let out = run(&["/nonexistent/model.gguf", "hi"], b"");
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.starts_with("ferrite: ") && err.contains("/nonexistent/model.gguf"),
        "{err}"
    );
}

#[test]
fn a_file_without_a_tokenizer_is_an_error() {
    let dir = std::env::temp_dir().join(format!("ferrite-tokenize-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("empty.gguf");
    // A valid GGUF v3 header with no metadata and no tensors.
    let mut bytes = b"GGUF".to_vec();
    bytes.extend_from_slice(&3u32.to_le_bytes());
    bytes.extend_from_slice(&0u64.to_le_bytes());
    bytes.extend_from_slice(&0u64.to_le_bytes());
    std::fs::write(&path, bytes).unwrap();
    let out = run(&[path.to_str().unwrap(), "hi"], b"");
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("tokenizer metadata 'tokenizer.ggml.model': missing"),
        "{err}"
    );
}
