//! `ferrite chat` on the default model (Qwen2.5-Coder-0.5B-Instruct): right
//! answers that end by themselves, replies that cannot run away, and a chat
//! that outlives its context. Each test is one process fed several lines.

mod common;

use common::{ferrite, ok, testdata};

use ferrite::serving::{model_template, turn_end_tokens};
use ferrite::tools::GgufFile;
use ferrite::tools::Tokenizer;
use serde_json::Value as Json;

/// One `prompt: ... | generated: ... | stop: ...` line of `--verbose`.
#[derive(Debug)]
struct Stats {
    prompt: usize,
    generated: usize,
    stop: String,
}

fn number_after(line: &str, key: &str) -> usize {
    let rest = &line[line.find(key).unwrap_or_else(|| panic!("{line}")) + key.len()..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().unwrap_or_else(|_| panic!("{line}"))
}

fn stats_lines(stderr: &str) -> Vec<Stats> {
    stderr
        .lines()
        .filter(|l| l.starts_with("prompt:"))
        .map(|l| Stats {
            prompt: number_after(l, "prompt: "),
            generated: number_after(l, "generated: "),
            stop: l.rsplit("| stop: ").next().unwrap_or("").to_string(),
        })
        .collect()
}

const NOTICE: &str = "the context (256 tokens) is full";

/// `--logit-bias ID=-inf` for every token that could end a reply.
fn forbid_every_end() -> Vec<String> {
    let path = ferrite::tools::resolve("qwen2.5-0.5b").unwrap_or_else(|e| {
        panic!("{e}\n(the test suite needs the real models: run scripts/fetch-models.sh)")
    });
    let file = GgufFile::open(path).unwrap();
    let tok = Tokenizer::from_gguf(file.metadata()).unwrap();
    let template = model_template(&file, &tok).unwrap();
    let mut ids: Vec<u32> = tok.end_of_generation_ids().collect();
    ids.extend(turn_end_tokens(&tok, &template));
    assert!(ids.contains(&tok.token_id("<|im_end|>").unwrap()));
    ids.iter()
        .flat_map(|id| ["--logit-bias".to_string(), format!("{id}=-inf")])
        .collect()
}

#[test]
fn the_default_model_answers_and_ends_each_reply_by_itself() {
    let set: Json =
        serde_json::from_slice(&std::fs::read(testdata().join("chat/questions.json")).unwrap())
            .unwrap();
    let qa: Vec<(&str, &str)> = set["questions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| {
            (
                q["question"].as_str().unwrap(),
                q["answer"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(qa[0], ("What is the capital of France?", "Paris"));
    assert!(qa.len() >= 4);
    let input: String = qa.iter().map(|(q, _)| format!("{q}\n")).collect();

    // No model named: the default; no --max-tokens: the default cap, 1024.
    let out = ferrite(&["chat", "--temp", "0", "--verbose"], Some(&input));
    let (stdout, stderr) = ok(&out);
    let replies: Vec<&str> = stdout.lines().collect();
    assert_eq!(replies.len(), qa.len(), "one line per reply: {stdout}");
    for ((question, answer), reply) in qa.iter().zip(&replies) {
        assert!(reply.contains(answer), "{question} -> {reply}");
    }
    let stats = stats_lines(&stderr);
    assert_eq!(stats.len(), qa.len(), "{stderr}");
    for s in &stats {
        assert_eq!(s.stop, "end of generation", "{stderr}");
        assert!((1..=64).contains(&s.generated), "{stderr}");
    }
    // Nothing else on stderr: no banner (stdin is not a terminal), no notice.
    assert_eq!(stderr.lines().count(), qa.len(), "{stderr}");
}

#[test]
fn replies_that_would_not_end_stop_at_the_cap() {
    let mut args: Vec<String> = ["chat", "--temp", "0", "--verbose", "--max-tokens", "40"]
        .map(String::from)
        .to_vec();
    args.extend(forbid_every_end());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = ferrite(
        &args,
        Some("What is the capital of France?\nAnd of Italy?\n"),
    );
    let (stdout, stderr) = ok(&out);
    let stats = stats_lines(&stderr);
    assert_eq!(stats.len(), 2, "both lines answered: {stderr}");
    for s in &stats {
        assert_eq!(
            (s.generated, s.stop.as_str()),
            (40, "max tokens"),
            "{stderr}"
        );
    }
    assert!(stdout.contains("Paris"), "{stdout}");

    let help = ok(&ferrite(&["chat", "--help"], None)).0;
    assert!(
        help.contains("--max-tokens <N>") && help.contains("[default: 1024]"),
        "{help}"
    );
    assert!(
        help.contains("-1: no cap") && help.contains("n-predict"),
        "{help}"
    );
    assert!(help.contains("--verbose"), "{help}");
}

#[test]
fn a_long_chat_drops_its_oldest_turns_when_the_context_fills() {
    let lines = [
        "What is the capital of France?",
        "What is the capital of Italy?",
        "What is the capital of Spain?",
        "What is the capital of Germany?",
        "What is the capital of Japan?",
        "What is the capital of Egypt?",
        "What is the capital of Canada?",
        "What is the capital of Peru?",
        "Who wrote Romeo and Juliet?",
        "What is the largest ocean on Earth?",
    ];
    let input: String = lines.iter().map(|l| format!("{l}\n")).collect();
    let out = ferrite(
        &["chat", "--temp", "0", "--verbose", "--ctx", "256"],
        Some(&input),
    );
    let (stdout, stderr) = ok(&out);
    let stats = stats_lines(&stderr);
    assert_eq!(stats.len(), lines.len(), "every line answered: {stderr}");
    assert_eq!(stderr.matches(NOTICE).count(), 1, "told once: {stderr}");
    assert!(stats.iter().all(|s| s.generated > 0 && s.prompt <= 256));
    let shrank = stats.windows(2).any(|w| w[1].prompt < w[0].prompt);
    assert!(shrank, "old turns were dropped: {stderr}");
    assert!(
        stdout.contains("Paris") && stdout.contains("Pacific"),
        "{stdout}"
    );

    // Replies that run until the context is full do not end the chat
    // either (and -1 means no cap).
    let mut args: Vec<String> = [
        "chat",
        "--temp",
        "0",
        "--verbose",
        "--ctx",
        "256",
        "-n",
        "-1",
    ]
    .map(String::from)
    .to_vec();
    args.extend(forbid_every_end());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = ferrite(
        &args,
        Some("What is the capital of France?\nAnd of Italy?\n"),
    );
    let (_, stderr) = ok(&out);
    let stats = stats_lines(&stderr);
    assert_eq!(stats.len(), 2, "every line answered: {stderr}");
    assert_eq!(stderr.matches(NOTICE).count(), 1, "told once: {stderr}");
    for s in &stats {
        assert_eq!(s.stop, "context full", "{stderr}");
        // 256 positions filled, and one more token sampled from the last.
        assert_eq!(s.prompt + s.generated, 257, "{stderr}");
    }
}
