//! `ferrite run` and `ferrite chat` end to end on SmolLM2 (named: the
//! default model is Qwen2.5, tested in `chat.rs`).

mod common;

use common::{ferrite, ok};

#[test]
fn run_greedy_knows_the_capital_of_france() {
    let out = ferrite(
        &[
            "run",
            "smollm2",
            "-p",
            "The capital of France is",
            "-n",
            "8",
            "--temp",
            "0",
            "--verbose",
        ],
        None,
    );
    let (stdout, stderr) = ok(&out);
    assert!(stdout.contains("Paris"), "{stdout}");
    assert!(
        !stdout.contains("prompt:"),
        "stats must go to stderr: {stdout}"
    );
    assert!(
        stderr.contains("prompt: 5 tokens")
            && stderr.contains("generated: 8 tokens")
            && stderr.ends_with("| stop: max tokens\n"),
        "{stderr}"
    );
    // Without --verbose, and stderr not a terminal: no stats line.
    let quiet = ferrite(
        &[
            "run",
            "smollm2",
            "-p",
            "The capital of France is",
            "--max-tokens",
            "8",
            "--temp",
            "0",
        ],
        None,
    );
    let (quiet_stdout, quiet_stderr) = ok(&quiet);
    assert_eq!(quiet_stdout, stdout);
    assert_eq!(quiet_stderr, "");
}

#[test]
fn sampling_is_reproducible_and_thread_count_independent() {
    let args = |t: &'static str| {
        vec![
            "run",
            "smollm2",
            "-p",
            "Once upon a time",
            "-n",
            "24",
            "--temp",
            "0.9",
            "--seed",
            "42",
            "-t",
            t,
        ]
    };
    let (a, _) = ok(&ferrite(&args("1"), None));
    let (b, _) = ok(&ferrite(&args("2"), None));
    assert_eq!(a, b);
    let (c, _) = ok(&ferrite(
        &[
            "run",
            "smollm2",
            "-p",
            "Once upon a time",
            "-n",
            "24",
            "--temp",
            "0.9",
            "--seed",
            "43",
        ],
        None,
    ));
    assert_ne!(a, c, "a different seed should change the text");
}

/// `--lookup` and `--draft` change no output (the library's
/// `tests/speculative.rs` proves it in depth); `-v` reports the counts.
#[test]
fn speculation_changes_no_output() {
    let prompt = "a = 1; b = 2; c = 3; a = 1; b = 2; c = 3; a = 1;";
    let run = |extra: &[&str]| {
        let mut args = vec![
            "run", "smollm2", "-p", prompt, "-n", "24", "--temp", "0.8", "--seed", "7", "-v",
        ];
        args.extend_from_slice(extra);
        ok(&ferrite(&args, None))
    };
    let (plain, plain_err) = run(&[]);
    assert!(!plain_err.contains("drafted"), "{plain_err}");
    for extra in [
        &["--lookup"][..],
        &["--lookup", "--draft-max", "2"],
        &["--draft", "smollm2"],
    ] {
        let (out, err) = run(extra);
        assert_eq!(out, plain, "{extra:?}");
        assert!(err.contains("| drafted: "), "{extra:?}: {err}");
    }
    // Chat keeps one draft model's cache across turns.
    let chat = |extra: &[&str]| {
        let mut args = vec!["chat", "smollm2", "-n", "16", "--temp", "0"];
        args.extend_from_slice(extra);
        ok(&ferrite(
            &args,
            Some("Count from 1 to 5.\nAgain, please.\n"),
        ))
        .0
    };
    let plain = chat(&[]);
    assert!(!plain.trim().is_empty());
    assert_eq!(chat(&["--draft", "smollm2"]), plain);
    assert_eq!(chat(&["--lookup"]), plain);
}

#[test]
fn chat_answers_and_keeps_the_cache_between_turns() {
    // With the template's built-in system prompt ("You are a helpful AI
    // assistant named SmolLM...") this Q4_1 file answers the first question
    // in mangled French under greedy decoding, token for token as llama.cpp
    // does on the same file; with a plain system prompt it answers well.
    let input = "What is the capital of France?\nWhat is the capital of Italy?\n";
    let out = ferrite(
        &[
            "chat",
            "smollm2",
            "--verbose",
            "--temp",
            "0",
            "-n",
            "48",
            "--system",
            "You are a helpful assistant.",
        ],
        Some(input),
    );
    let (stdout, stderr) = ok(&out);
    assert!(stdout.contains("Paris"), "{stdout}");
    assert!(stdout.contains("Rome"), "{stdout}");
    let stats: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("prompt:"))
        .collect();
    assert_eq!(stats.len(), 2, "{stderr}");
    // The second turn re-uses the first turn's tokens from the cache: far
    // fewer new tokens than prompt tokens.
    let numbers: Vec<usize> = stats[1]
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|s| s.parse().ok())
        .collect();
    let (total, new) = (numbers[0], numbers[1]);
    assert!(
        new * 2 < total,
        "second turn recomputed {new} of {total} tokens"
    );
}

fn fails_with(args: &[&str], needle: &str) {
    let out = ferrite(args, None);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{args:?} should fail");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{args:?}: {stderr}");
    assert!(stderr.contains(needle), "{args:?}: {stderr}");
}

#[test]
fn bad_requests_get_one_line_errors() {
    let long = "word ".repeat(50);
    fails_with(
        &["run", "-p", &long, "--ctx", "16"],
        "longer than the context",
    );
    fails_with(
        &["run", "no-such-model.gguf", "-p", "hi"],
        "no such file or model",
    );
    // ferrite::open tells the kinds apart (this said "not a supported decoder").
    fails_with(
        &["run", "minilm", "-p", "hi"],
        "is an embedding model, not a text-generation model",
    );
    fails_with(&["run", "-p", "hi", "--top-p", "2"], "top-p");
}

#[test]
fn unsupported_architecture_is_a_one_line_error() {
    use ferrite::formats::gguf::{write_gguf, GgufFile, Metadata, Value};
    // SmolLM2's metadata (so the tokenizer loads), renamed to an
    // architecture we do not run, and no tensors.
    let real = GgufFile::open(ferrite::tools::resolve("smollm2").unwrap()).unwrap();
    let mut meta = Metadata::default();
    for (k, v) in real.metadata().iter() {
        let v = if k == "general.architecture" {
            Value::String("mamba".into())
        } else {
            v.clone()
        };
        meta.insert(k.to_string(), v);
    }
    let path = std::env::temp_dir().join(format!("ferrite-mamba-{}.gguf", std::process::id()));
    let mut bytes = Vec::new();
    write_gguf(&mut bytes, 3, &meta, &[]).unwrap();
    std::fs::write(&path, bytes).unwrap();
    fails_with(
        &["run", path.to_str().unwrap(), "-p", "hi"],
        "architecture 'mamba' is not supported",
    );
    std::fs::remove_file(&path).ok();
}
