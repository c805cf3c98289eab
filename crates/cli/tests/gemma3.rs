//! `ferrite run` and `ferrite chat` end to end on Gemma 3 270M.

mod common;

use common::{ferrite, ok};

use ferrite::tools::GgufFile;
use ferrite::tools::Tokenizer;

/// The numbers in a `prompt: N tokens (M new), ...` statistics line.
fn prompt_stats(stderr: &str) -> Vec<Vec<usize>> {
    stderr
        .lines()
        .filter(|l| l.starts_with("prompt:"))
        .map(|l| {
            l.split(|c: char| !c.is_ascii_digit())
                .filter_map(|s| s.parse().ok())
                .collect()
        })
        .collect()
}

#[test]
fn run_greedy_continues_the_prompt() {
    let out = ferrite(
        &[
            "run",
            "gemma3-270m",
            "--verbose",
            "-p",
            "The capital of France is",
            "--temp",
            "0",
            "-n",
            "8",
        ],
        None,
    );
    let (stdout, stderr) = ok(&out);
    // llama.cpp's greedy continuation on this file is " the capital of the
    // country of France." (testdata/llama/gemma3-270m-greedy.json); its
    // first four tokens win by clear margins, the fifth by a near tie.
    assert!(stdout.starts_with(" the capital of the"), "{stdout}");
    assert!(
        stdout
            .chars()
            .all(|c| c.is_ascii_alphabetic() || c.is_ascii_whitespace() || ".,'".contains(c)),
        "{stdout}"
    );
    assert_eq!(prompt_stats(&stderr)[0][..2], [6, 6], "{stderr}");
    assert!(stderr.contains("generated: 8 tokens"), "{stderr}");
}

#[test]
fn chat_template_gemma_gives_gemma_turns_to_a_file_without_one() {
    let path = ferrite::tools::resolve("gemma3-270m").unwrap();
    let file = GgufFile::open(&path).unwrap();
    assert!(file.metadata().get_str("tokenizer.chat_template").is_none());
    let tok = Tokenizer::from_gguf(file.metadata()).unwrap();
    // What the first turn must be: the system prompt folded into the user
    // turn, then the model's turn opened (BOS added by the tokenizer).
    let first = "<start_of_turn>user\nAnswer briefly.\n\nWhat is the capital of France?\
                 <end_of_turn>\n<start_of_turn>model\n";
    let want = tok.encode(first, true, true).len();

    let out = ferrite(
        &[
            "chat",
            "gemma3-270m",
            "--chat-template",
            "gemma",
            "--verbose",
            "--temp",
            "0",
            "-n",
            "16",
            "--system",
            "Answer briefly.",
        ],
        Some("What is the capital of France?\nAnd of Italy?\n"),
    );
    let (stdout, stderr) = ok(&out);
    assert!(!stdout.trim().is_empty(), "{stderr}");
    assert!(!stdout.contains("<|im_start|>"), "{stdout}");
    let stats = prompt_stats(&stderr);
    assert_eq!(stats.len(), 2, "{stderr}");
    assert_eq!(stats[0][..2], [want, want], "{stderr}");
    // The second turn re-uses the first from the cache.
    let (total, new) = (stats[1][0], stats[1][1]);
    assert!(
        new * 2 < total,
        "second turn recomputed {new} of {total} tokens"
    );
}
