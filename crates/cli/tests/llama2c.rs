//! `ferrite run` on a llama2.c checkpoint with its tokenizer.bin (`-z`),
//! against the text karpathy's run.c printed for the same greedy run
//! (testdata/llama2c/goldens.json, scripts/make-llama2c-fixtures.py).

mod common;

use common::{ferrite, ok};
use serde_json::Value;

fn goldens() -> Value {
    let dir = common::testdata().join("llama2c");
    serde_json::from_str(&std::fs::read_to_string(dir.join("goldens.json")).unwrap()).unwrap()
}

/// `ferrite run` on a golden run's checkpoint and prompt, greedy, at most
/// `n` tokens, with `--verbose`: (stdout, stderr).
fn ferrite_run(run: &Value, n: usize) -> (String, String) {
    let dir = common::testdata().join("llama2c");
    let model = dir.join(run["checkpoint"].as_str().unwrap());
    let tok = dir.join("tokenizer.bin");
    let n = n.to_string();
    let args = [
        "run",
        model.to_str().unwrap(),
        "-z",
        tok.to_str().unwrap(),
        "-p",
        run["prompt"].as_str().unwrap(),
        "-n",
        &n,
        "--temp",
        "0",
        "--verbose",
    ];
    let out = ferrite(&args, None);
    ok(&out)
}

/// Whether ferrite's continuation is the text run.c printed after the
/// prompt. run.c echoes the prompt and drops the byte tokens (`<0xNN>`)
/// that are not printable on their own (control bytes, every byte >= 0x80),
/// so it prints ASCII only (the vocabulary's other pieces are ASCII);
/// ferrite prints the continuation only, joining byte tokens into
/// characters (U+FFFD where they do not form one).
fn assert_same_text(run: &Value, stdout: &str) {
    let theirs = run["stdout"].as_str().unwrap();
    let prompt = run["prompt"].as_str().unwrap();
    let printable = |c: char| c.is_ascii() && (!c.is_ascii_control() || c.is_ascii_whitespace());
    let prompt_shown: String = prompt.chars().filter(|&c| printable(c)).collect();
    let theirs = theirs
        .strip_prefix(prompt_shown.as_str())
        .unwrap()
        .trim_end();
    let ours: String = stdout.chars().filter(|&c| printable(c)).collect();
    assert_eq!(ours.trim_end(), theirs, "{prompt:?}");
}

#[test]
fn run_prints_what_run_c_prints() {
    let golden = goldens();
    let runs = golden["runs"].as_array().unwrap();
    let run = runs
        .iter()
        .find(|r| r["checkpoint"] == "v0-shared.bin" && r["prompt"] == "Once")
        .unwrap();
    let n = run["generated_tokens"].as_array().unwrap().len();
    let (stdout, _) = ferrite_run(run, n);
    assert_same_text(run, &stdout);
}

#[test]
fn run_stops_where_runq_c_stops_on_bos() {
    // runq.c (as run.c) ends generation when the model writes BOS (token
    // 1): llama2.c's stories each start with it. Asked for far more tokens
    // than runq.c wrote, ferrite must stop at the same place.
    let golden = goldens();
    let stopped: Vec<&Value> = golden["runs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["stopped_on_bos"] == true)
        .collect();
    assert!(!stopped.is_empty(), "no golden run stopped on BOS");
    for run in stopped {
        let n = run["generated_tokens"].as_array().unwrap().len();
        let (stdout, stderr) = ferrite_run(run, 100);
        assert_same_text(run, &stdout);
        assert!(
            stderr.contains(&format!("generated: {n} tokens"))
                && stderr.contains("stop: end of generation"),
            "{stderr}"
        );
    }
}

#[test]
fn a_file_that_is_neither_gguf_nor_a_checkpoint_is_an_error() {
    // Binary (f32 logits), so not taken for a text file either.
    let file = common::testdata().join("gpt2/logits-hf.f32");
    let out = ferrite(&["run", file.to_str().unwrap(), "-p", "x"], None);
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
