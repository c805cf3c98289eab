//! The rules every command shares, as a user meets them (issue 32): where
//! prompts come from, input that is not UTF-8, thread counts, negative
//! numbers, seeds, a missing model argument. Each runs the real binary on
//! the small fixtures in testdata/.

mod common;

use std::path::PathBuf;

use common::{ferrite, ferrite_bytes, ok};

fn td(rel: &str) -> String {
    common::testdata().join(rel).to_str().unwrap().to_string()
}

/// Runs ferrite with `envs` set.
fn ferrite_env(args: &[&str], envs: &[(&str, &str)]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_ferrite"))
        .args(args)
        .envs(envs.iter().copied())
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run ferrite")
}

/// The tiny llama2.c checkpoint (Q8_0, 260 KB) and its tokenizer.
fn llama2c() -> (String, String) {
    let dir = common::testdata().join("llama2c");
    let s = |p: PathBuf| p.to_str().unwrap().to_string();
    (s(dir.join("v2-q8.bin")), s(dir.join("tokenizer.bin")))
}

/// A scratch directory for this test's files.
fn scratch(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ferrite-cli-rules-{}-{test}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn stderr_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Asserts that the run's stderr holds `text`.
fn assert_says(out: &std::process::Output, text: &str) {
    let stderr = stderr_of(out);
    assert!(stderr.contains(text), "{stderr}");
}

#[test]
fn the_prompt_can_come_from_a_file_or_standard_input() {
    let (model, tok) = llama2c();
    let prompt = "Once upon a time, a little girl";
    let base = ["run", &model, "-z", &tok, "-n", "24", "--temp", "0"];
    let with = |extra: &[&str], stdin: Option<&str>| {
        let args: Vec<&str> = base.iter().chain(extra).copied().collect();
        ok(&ferrite(&args, stdin)).0
    };
    let want = with(&["-p", prompt], None);
    assert!(!want.trim().is_empty());

    let dir = scratch("prompt-file");
    let file = dir.join("prompt.txt");
    // One final newline is dropped, as llama.cpp's -f does.
    std::fs::write(&file, format!("{prompt}\n")).unwrap();
    let file = file.to_str().unwrap();
    assert_eq!(with(&["-f", file], None), want);
    assert_eq!(with(&["--file", file], None), want);
    assert_eq!(with(&["-p", "-"], Some(&format!("{prompt}\n"))), want);
    assert_eq!(with(&["-f", "-"], Some(prompt)), want);

    // Neither, or both, is a usage error.
    let out = ferrite(&base, None);
    assert!(!out.status.success());
    let out = ferrite(&[&base[..], &["-p", prompt, "-f", file]].concat(), None);
    assert!(!out.status.success());
    let missing = dir.join("missing.txt");
    let out = ferrite(
        &[&base[..], &["-f", missing.to_str().unwrap()]].concat(),
        None,
    );
    assert!(!out.status.success());
    assert_says(&out, "missing.txt");
}

#[test]
fn chat_reads_its_system_prompt_from_a_file() {
    let model = common::testdata().join("hf-decoders/tiny-qwen2");
    let model = model.to_str().unwrap();
    let system = "You are terse.\nAnswer in one word.";
    let dir = scratch("system-file");
    let file = dir.join("system.txt");
    std::fs::write(&file, format!("{system}\n")).unwrap();
    let base = ["chat", model, "--temp", "0", "-n", "8", "--verbose"];
    let inline = ok(&ferrite(
        &[&base[..], &["--system", system]].concat(),
        Some("Hi\n"),
    ));
    let from_file = ok(&ferrite(
        &[&base[..], &["-f", file.to_str().unwrap()]].concat(),
        Some("Hi\n"),
    ));
    assert_eq!(inline.0, from_file.0);
    // The same prompt: the stats lines' token counts agree.
    let counts = |stderr: &str| {
        stderr
            .lines()
            .find(|l| l.starts_with("prompt:"))
            .map(|l| l.split(',').next().unwrap().to_string())
    };
    assert_eq!(counts(&inline.1), counts(&from_file.1));
    assert!(counts(&inline.1).is_some(), "{}", inline.1);
    let out = ferrite(&[&base[..], &["-f", "-"]].concat(), Some("Hi\n"));
    assert!(!out.status.success());
    assert_says(&out, "standard input");
}

/// Input with a bad byte on line 2: `0xff` at offset 2 of the line, 7 of
/// the input.
const BAD_UTF8: &[u8] = b"fine\nba\xffd\nok\n";
const BAD_UTF8_SAYS: &str =
    "line 2 is not valid UTF-8: byte 0xff at offset 2 of the line (7 of the input)";

/// A run that failed with `says` in its stderr and nothing on stdout.
fn assert_refused(out: &std::process::Output, says: &str) {
    let stderr = stderr_of(out);
    assert!(!out.status.success(), "succeeded: {stderr}");
    assert!(stderr.contains(says), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn input_that_is_not_utf8_is_one_error_before_any_output() {
    let says = format!("standard input: {BAD_UTF8_SAYS}");
    let bert = td("embed/bert-tiny");
    assert_refused(&ferrite_bytes(&["embed", &bert, "-"], BAD_UTF8), &says);
    assert_refused(
        &ferrite_bytes(&["bench", &bert, "--texts", "-", "-r", "1"], BAD_UTF8),
        &says,
    );
    let marian = td("translation/tiny-marian");
    assert_refused(&ferrite_bytes(&["translate", &marian], BAD_UTF8), &says);
    let gpt2 = td("gpt2/tiny.f32.gguf");
    assert_refused(&ferrite_bytes(&["tokenize", &gpt2, "-"], BAD_UTF8), &says);
    let (model, tok) = llama2c();
    let base = ["run", &model, "-z", &tok, "-n", "4"];
    assert_refused(
        &ferrite_bytes(&[&base[..], &["-p", "-"]].concat(), BAD_UTF8),
        &says,
    );
    let dir = scratch("bad-utf8");
    let file = dir.join("bad.txt");
    std::fs::write(&file, BAD_UTF8).unwrap();
    let file = file.to_str().unwrap();
    assert_refused(
        &ferrite(&[&base[..], &["-f", file]].concat(), None),
        &format!("{file}: {BAD_UTF8_SAYS}"),
    );
    assert_refused(
        &ferrite(&["embed", &bert, file], None),
        &format!("{file}: {BAD_UTF8_SAYS}"),
    );

    // chat reads its messages one at a time: the first is answered, the
    // bad one ends the chat with the same error.
    let qwen = td("hf-decoders/tiny-qwen2");
    let out = ferrite_bytes(&["chat", &qwen, "--temp", "0", "-n", "4"], BAD_UTF8);
    let stderr = stderr_of(&out);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains(&says), "{stderr}");
    assert!(!out.stdout.is_empty(), "the first message got no reply");
}

#[test]
fn thread_counts_follow_one_rule_everywhere() {
    let (model, tok) = llama2c();
    let bert = td("embed/bert-tiny");
    let marian = td("translation/tiny-marian");
    let commands: [Vec<&str>; 6] = [
        vec!["run", &model, "-z", &tok, "-p", "x", "-n", "2"],
        vec!["chat", &model, "-z", &tok],
        vec!["embed", &bert],
        vec!["translate", &marian],
        vec!["bench", &model, "-p", "8", "-n", "2", "-r", "1"],
        vec!["serve", &model],
    ];
    for cmd in &commands {
        for t in ["0", "513", "-1", "many"] {
            let out = ferrite(&[&cmd[..], &["-t", t]].concat(), Some(""));
            let stderr = stderr_of(&out);
            // A usage error (clap's status 2), the same words everywhere.
            assert_eq!(out.status.code(), Some(2), "{cmd:?} -t {t}: {stderr}");
            assert!(stderr.contains("--threads"), "{cmd:?} -t {t}: {stderr}");
            assert!(
                stderr.contains("give 1 to 512 threads"),
                "{cmd:?} -t {t}: {stderr}"
            );
        }
    }
    // Accepted at both ends.
    ok(&ferrite(&[&commands[0][..], &["-t", "1"]].concat(), None));
    ok(&ferrite(&[&commands[0][..], &["-t", "512"]].concat(), None));
}

#[test]
fn threads_the_os_cannot_start_are_an_error_not_a_panic() {
    // A 1 TiB minimum stack for every new thread: the OS cannot start one.
    let (model, tok) = llama2c();
    let envs = [("RUST_MIN_STACK", "1099511627776")];
    for cmd in [
        vec!["run", &model, "-z", &tok, "-p", "x", "-n", "2", "-t", "4"],
        vec!["bench", &model, "-p", "8", "-n", "2", "-r", "1", "-t", "4"],
    ] {
        let out = ferrite_env(&cmd, &envs);
        let stderr = stderr_of(&out);
        assert_eq!(out.status.code(), Some(1), "{cmd:?}: {stderr}");
        assert!(stderr.contains("cannot start 4 threads"), "{stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

#[test]
fn negative_numbers_are_taken_where_they_mean_something() {
    let (model, tok) = llama2c();
    let base = ["run", &model, "-z", &tok, "-p", "Once", "-n", "8"];
    for temp in [&["--temp", "-1"][..], &["--temp=-1"][..]] {
        let out = ferrite(&[&base[..], temp].concat(), None);
        let stderr = stderr_of(&out);
        assert_eq!(out.status.code(), Some(1), "{temp:?}: {stderr}");
        assert!(
            stderr.contains("temperature must be at least 0"),
            "{stderr}"
        );
    }
    let out = ferrite(&[&base[..], &["--top-p", "-0.5"]].concat(), None);
    assert_says(&out, "top-p must be in [0, 1]");
    ok(&ferrite(
        &[
            &base[..],
            &[
                "--presence-penalty",
                "-0.5",
                "--frequency-penalty",
                "-1",
                "--seed",
                "-1",
            ],
        ]
        .concat(),
        None,
    ));
    // -n -1: no cap; this run ends where its 24-token context is full.
    // Greedy, so that a random sample cannot end it early at the model's
    // end-of-text token (a seeded run did, once in many).
    let out = ferrite(
        &[
            "run",
            &model,
            "-z",
            &tok,
            "-p",
            "Once",
            "-n",
            "-1",
            "--ctx",
            "24",
            "--temp",
            "0",
            "--verbose",
        ],
        None,
    );
    let (_, stderr) = ok(&out);
    assert!(stderr.contains("stop: context full"), "{stderr}");
}

/// The seed `--verbose` printed.
fn printed_seed(stderr: &str) -> String {
    let line = stderr
        .lines()
        .find(|l| l.starts_with("ferrite: seed "))
        .unwrap_or_else(|| panic!("no seed printed: {stderr}"));
    line["ferrite: seed ".len()..]
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}

#[test]
fn sampling_draws_a_new_seed_each_run_and_prints_it() {
    let (model, tok) = llama2c();
    let base = [
        "run", &model, "-z", &tok, "-p", "Once", "-n", "40", "--temp", "1.5",
    ];
    let verbose = [&base[..], &["--verbose"]].concat();
    let (a, a_err) = ok(&ferrite(&verbose, None));
    let (b, b_err) = ok(&ferrite(&verbose, None));
    let (seed_a, seed_b) = (printed_seed(&a_err), printed_seed(&b_err));
    assert_ne!(seed_a, seed_b);
    // 40 tokens sampled at temperature 1.5 from 512: two runs agreeing by
    // chance is out of the question.
    assert_ne!(a, b, "two unseeded runs gave the same text");
    // The printed seed repeats the run, and an explicit seed is
    // reproducible.
    let again = ok(&ferrite(&[&base[..], &["--seed", &seed_a]].concat(), None)).0;
    assert_eq!(again, a);
    let seeded = [&base[..], &["--seed", "7"]].concat();
    assert_eq!(ok(&ferrite(&seeded, None)).0, ok(&ferrite(&seeded, None)).0);
    // Without --verbose, or greedy (no draws), no seed line.
    let quiet = ok(&ferrite(&base, None)).1;
    assert!(!quiet.contains("seed"), "{quiet}");
    let greedy = [
        "run",
        &model,
        "-z",
        &tok,
        "-p",
        "Once",
        "-n",
        "4",
        "--temp",
        "0",
        "--verbose",
    ];
    let greedy = ok(&ferrite(&greedy, None)).1;
    assert!(!greedy.contains("seed"), "{greedy}");
}

#[test]
fn a_text_file_where_the_model_belongs_is_named_as_such() {
    let dir = scratch("text-as-model");
    let texts = dir.join("texts.txt");
    std::fs::write(&texts, "The first text.\nThe second.\n").unwrap();
    let texts = texts.to_str().unwrap();
    for (args, hint) in [
        (
            vec!["embed", texts],
            format!("ferrite embed minilm {texts}"),
        ),
        (
            vec!["translate", texts],
            "model directory first".to_string(),
        ),
        (vec!["run", texts, "-p", "x"], format!("-f {texts}")),
        (vec!["chat", texts], "ferrite chat --help".to_string()),
    ] {
        let out = ferrite(&args, Some(""));
        let stderr = stderr_of(&out);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(
            stderr.contains(&format!("{texts} is a text file, not a model")),
            "{args:?}: {stderr}"
        );
        assert!(stderr.contains(&hint), "{args:?}: {stderr}");
    }
}

#[test]
fn chat_refuses_a_base_model_and_says_to_run_it() {
    for model in ["gemma3-270m", &llama2c().0] {
        let out = ferrite(&["chat", model], Some("What is the capital of France?\n"));
        let stderr = stderr_of(&out);
        assert_eq!(out.status.code(), Some(1), "{model}: {stderr}");
        assert!(stderr.contains("has no chat template"), "{stderr}");
        assert!(stderr.contains(&format!("ferrite run {model}")), "{stderr}");
        assert!(out.stdout.is_empty());
    }
    let out = ferrite(
        &["chat", "gemma3-270m", "--chat-template", "vicuna"],
        Some(""),
    );
    assert_says(&out, "expected chatml or gemma");
}

#[test]
fn tokenize_reads_embedding_models() {
    // bert-base-uncased's vocabulary (MiniLM's, and nomic-embed's GGUF):
    // [CLS] hello world [SEP], as `ferrite embed` tokenizes its inputs.
    for model in ["minilm", "nomic-embed-v1.5"] {
        let ids = ok(&ferrite(&["tokenize", model, "Hello world"], None)).0;
        assert_eq!(ids.trim(), "[101, 7592, 2088, 102]", "{model}");
        let pieces = ok(&ferrite(
            &["tokenize", model, "Hello world", "--pieces"],
            None,
        ))
        .0;
        assert_eq!(
            pieces.trim(),
            r#"["[CLS]", "hello", "world", "[SEP]"]"#,
            "{model}"
        );
    }
    let out = ferrite(&["tokenize", "minilm", "x", "--no-parse-special"], None);
    assert!(!out.status.success());
}

#[test]
fn ferrite_kernels_names_are_checked() {
    let (model, tok) = llama2c();
    let out = ferrite_env(
        &["run", &model, "-z", &tok, "-p", "x", "-n", "2"],
        &[("FERRITE_KERNELS", "avx3")],
    );
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("FERRITE_KERNELS=avx3: no such kernel set (expected scalar, avx2, avx512"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());
    // A set named in capitals is the set; bench says which set ran.
    let out = ferrite_env(
        &["bench", &model, "-p", "8", "-n", "2", "-r", "1", "--json"],
        &[("FERRITE_KERNELS", "SCALAR")],
    );
    let (stdout, _) = ok(&out);
    let json: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(json["kernels"], "scalar");
}

#[test]
fn translate_warns_about_lines_it_cuts_and_caps_beams() {
    let marian = td("translation/tiny-marian");
    // tiny-marian has 128 positions: 300 words cannot fit.
    let long = vec!["word"; 300].join(" ");
    let input = format!("Hello.\n{long}\n");
    let out = ferrite(&["translate", &marian, "--beams", "1"], Some(&input));
    let (stdout, stderr) = ok(&out);
    assert_eq!(stdout.lines().count(), 2);
    assert!(
        stderr.contains("warning: input 2 is longer than 128 tokens; truncated"),
        "{stderr}"
    );
    assert!(!stderr.contains("input 1 "), "{stderr}");
    for beams in ["0", "17", "1000"] {
        let out = ferrite(&["translate", &marian, "--beams", beams], Some("Hello.\n"));
        assert_eq!(out.status.code(), Some(1));
        assert_says(&out, "--beams must be 1 to 16");
    }
    ok(&ferrite(
        &["translate", &marian, "--beams", "16"],
        Some("Hello.\n"),
    ));
}

#[test]
fn inspect_sees_an_hf_directory_chat_template() {
    // tiny-qwen2 has chat_template.jinja (and none in tokenizer_config.json),
    // which `chat` uses.
    let dir = td("hf-decoders/tiny-qwen2");
    let text = ok(&ferrite(&["inspect", &dir], None)).0;
    assert!(text.contains("chat template yes"), "{text}");
    let json: serde_json::Value =
        serde_json::from_str(&ok(&ferrite(&["inspect", &dir, "--json"], None)).0).unwrap();
    assert_eq!(json["chat_template"], true);
    let bert = ok(&ferrite(&["inspect", &td("embed/bert-tiny")], None)).0;
    assert!(bert.contains("chat template no"), "{bert}");
}

#[test]
fn bf16_help_states_the_tested_bar() {
    // The bar tests/embed_bf16.rs (crates/ferrite) holds every text to,
    // the same in the help and in the book's `embed` page.
    let help = ok(&ferrite(&["embed", "--help"], None)).0;
    let help = help.split_whitespace().collect::<Vec<_>>().join(" ");
    let readme =
        std::fs::read_to_string(common::testdata().join("../docs/src/commands/embed.md")).unwrap();
    let readme = readme.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        help.contains("(cosine >= 0.9999 to them on MiniLM, mpnet and nomic-embed)"),
        "{help}"
    );
    assert!(readme.contains("cosine >= 0.9999 to sentence-transformers' f32 vectors"));
    assert!(!readme.contains(">= 0.99995"));
    let test =
        std::fs::read_to_string(common::testdata().join("../crates/ferrite/tests/embed_bf16.rs"))
            .unwrap();
    assert!(test.contains("assert!(min_cos >= 0.9999, "));
}
