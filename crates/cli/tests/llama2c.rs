//! `ferrite run` on a llama2.c checkpoint with its tokenizer.bin (`-z`),
//! against the text karpathy's run.c printed for the same greedy run
//! (testdata/llama2c/goldens.json, scripts/make-llama2c-fixtures.py).

mod common;

use common::{ferrite, ok};
use serde_json::Value;

#[test]
fn run_prints_what_run_c_prints() {
    let dir = common::testdata().join("llama2c");
    let golden: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("goldens.json")).unwrap()).unwrap();
    let runs = golden["runs"].as_array().unwrap();
    let run = runs
        .iter()
        .find(|r| r["checkpoint"] == "v0-shared.bin" && r["prompt"] == "Once")
        .unwrap();
    let n = run["generated_tokens"]
        .as_array()
        .unwrap()
        .len()
        .to_string();
    let model = dir.join("v0-shared.bin");
    let tok = dir.join("tokenizer.bin");
    let args = [
        "run",
        model.to_str().unwrap(),
        "-z",
        tok.to_str().unwrap(),
        "-p",
        "Once",
        "-n",
        &n,
        "--temp",
        "0",
    ];
    let out = ferrite(&args, None);
    let (stdout, _) = ok(&out);
    // run.c echoes the prompt and drops bytes that are not printable on
    // their own (control bytes, every byte >= 0x80 of a split character);
    // ferrite prints the continuation only, with U+FFFD for bytes that are
    // not UTF-8, and control bytes as they are.
    let theirs = run["stdout"].as_str().unwrap();
    let theirs = theirs.strip_prefix("Once").unwrap().trim_end();
    let printable = |c: char| c != '\u{fffd}' && (!c.is_control() || c.is_whitespace());
    let ours: String = stdout.chars().filter(|&c| printable(c)).collect();
    assert_eq!(ours.trim_end(), theirs);
}

#[test]
fn a_file_that_is_neither_gguf_nor_a_checkpoint_is_an_error() {
    let readme = common::testdata().join("llama2c/goldens.json");
    let out = ferrite(&["run", readme.to_str().unwrap(), "-p", "x"], None);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("llama2.c"), "{stderr}");
}

/// `inspect` and `tokenize` open a checkpoint as `run` does
/// (`ferrite::open`'s rules: tokenizer.bin beside it).
#[test]
fn inspect_and_tokenize_read_checkpoints() {
    let model = common::testdata().join("llama2c/v1.bin");
    let model = model.to_str().unwrap();
    let out = ferrite(&["inspect", model], None);
    let (stdout, _) = ok(&out);
    assert!(stdout.contains("architecture  llama"), "{stdout}");
    // run.c's encode of a golden run's prompt (BOS first).
    let golden: Value = serde_json::from_str(
        &std::fs::read_to_string(common::testdata().join("llama2c/goldens.json")).unwrap(),
    )
    .unwrap();
    let run = golden["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["checkpoint"] == "v1.bin" && r["prompt"].as_str().is_some_and(|p| p.len() > 3))
        .expect("a v1.bin run with a prompt");
    let want: Vec<u32> = run["prompt_tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as u32)
        .collect();
    let out = ferrite(&["tokenize", model, run["prompt"].as_str().unwrap()], None);
    let (stdout, _) = ok(&out);
    let ids: Vec<u32> = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(ids, want);
}
