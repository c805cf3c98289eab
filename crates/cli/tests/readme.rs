//! Every `ferrite` command in the shell blocks of README.md and of the
//! book (`docs/src/**/*.md`), run as written on the real models and the
//! fixtures: the documented examples must work. The table below says, for
//! each command, what its placeholders stand for (`path/to/...`,
//! `texts.txt`, ...), what it reads on standard input and what its output
//! must show. A documented command missing from the table, or a table
//! entry no page has any more, fails the test, so the two stay in step.
//! Scripts (`scripts/*.sh`, which fetch or build references) are not run
//! here.
//!
//! The same files' links are checked too (no model needed, fast): every
//! relative link points to a file that exists, and a `#anchor` to one of
//! its headings; every book page is listed in `docs/src/SUMMARY.md`.

mod common;
mod serve_common;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};

use serde_json::Value;
use serve_common::Server;

/// How one documented command is run and checked.
struct Case {
    /// The command as README.md or a book page writes it (comment removed).
    line: &'static str,
    /// Placeholders and what replaces them (see [`placeholder`]).
    subs: &'static [&'static str],
    /// What must hold of its standard output.
    check: fn(&str),
}

/// What a placeholder of the documented commands stands for here.
fn placeholder(name: &str, scratch: &std::path::Path) -> String {
    let td = |rel: &str| common::testdata().join(rel).to_str().unwrap().to_string();
    let file = |name: &str, text: &str| {
        let p = scratch.join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_string()
    };
    match name {
        // A llama2.c checkpoint and its tokenizer: the Q8_0 fixture.
        "model.bin" => td("llama2c/v2-q8.bin"),
        "tokenizer.bin" => td("llama2c/tokenizer.bin"),
        // A save_pretrained Llama directory: the tiny fixture.
        "path/to/SmolLM2-135M-Instruct" => td("hf-decoders/tiny-llama"),
        // nomic-embed-text-v1.5: the GGUF scripts/fetch-models.sh fetches.
        "path/to/nomic-embed-text-v1.5" => "nomic-embed-v1.5".into(),
        "path/to/opus-mt-en-hi" => td("translation/tiny-marian"),
        "path/to/t5-small" => td("translation/tiny-t5"),
        "texts.txt" => file(
            "texts.txt",
            "The cat sits on the mat.\nA dog runs in the park.\nRoPE rotates query and key vectors.\n",
        ),
        // A cross-encoder: the random-weight one-label fixture.
        "path/to/ms-marco-MiniLM-L-6-v2" => td("rerank/bert-ce-1"),
        "docs.txt" => file(
            "docs.txt",
            "Berlin has 3.5 million inhabitants.\nParis is the capital of France.\nA dog runs.\n",
        ),
        "sentences.txt" => file("sentences.txt", "Hello.\nHow are you?\n"),
        // A model and its draft model with the same tokenizer: the tiny
        // Llama 3 fixture's two files.
        "model.Q8_0.gguf" => td("hf-decoders/tiny-llama3.q8_0.gguf"),
        "model.Q2_K.gguf" => td("hf-decoders/tiny-llama3.f32.gguf"),
        "prompt.txt" => file("prompt.txt", "Once upon a time, there was a\n"),
        "system.txt" => file("system.txt", "You are a helpful assistant.\n"),
        "out.npy" => scratch.join("out.npy").to_str().unwrap().to_string(),
        "dump-dir" => scratch.join("dump").to_str().unwrap().to_string(),
        // An F32 GGUF with a chat template: the tiny Qwen3 fixture; the
        // quantized file goes to the scratch directory (the next case
        // chats with it).
        "qwen2.5-0.5b-f32.gguf" => td("hf-decoders/tiny-qwen3.f32.gguf"),
        "qwen2.5-0.5b-q4_k_m.gguf" => scratch
            .join("qwen2.5-0.5b-q4_k_m.gguf")
            .to_str()
            .unwrap()
            .to_string(),
        // A Qwen directory: the tiny Qwen3 fixture (for `convert`, its
        // freshly trained tokenizer needs --pre-tokenizer: see run_case).
        "path/to/Qwen2.5-0.5B-Instruct" => td("hf-decoders/tiny-qwen3"),
        "qwen-q4_k_m.gguf" => scratch.join("qwen-q4_k_m.gguf").to_str().unwrap().to_string(),
        // `ferrite perplexity`: the committed text; base and compared
        // model both SmolLM2 (the KL divergence is then ~0).
        "text.txt" => td("perplexity/text.txt"),
        "base.kld" => scratch.join("base.kld").to_str().unwrap().to_string(),
        "model-f16.gguf" | "model-q4_k_m.gguf" => "smollm2".into(),
        other => panic!("no stand-in for placeholder {other}"),
    }
}

fn nonempty(out: &str) {
    assert!(!out.trim().is_empty(), "no output");
}

fn json_array(out: &str) {
    let v: Value = serde_json::from_str(out.trim()).expect("one JSON array");
    assert!(!v.as_array().unwrap().is_empty());
}

fn json_object(out: &str) {
    let v: Value = serde_json::from_str(out.trim()).expect("one JSON object");
    assert!(v.is_object());
}

/// One vector per line of texts.txt (3), of `dim` values.
fn vectors(out: &str, dim: usize, n: usize) {
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), n, "{out}");
    for l in lines {
        let v: Vec<f32> = serde_json::from_str(l).unwrap();
        assert_eq!(v.len(), dim);
    }
}

/// The `ferrite` commands of README.md and the book, with no network need.
const CASES: &[Case] = &[
    Case {
        line: r#"ferrite run model.bin -z tokenizer.bin -p "Once upon a time" -n 64 --temp 0"#,
        subs: &["model.bin", "tokenizer.bin"],
        check: nonempty,
    },
    Case {
        line: "ferrite quantize qwen2.5-0.5b-f32.gguf qwen2.5-0.5b-q4_k_m.gguf Q4_K_M",
        subs: &["qwen2.5-0.5b-f32.gguf", "qwen2.5-0.5b-q4_k_m.gguf"],
        // The summary goes to stderr; the file is read by the next case.
        check: |_| {},
    },
    Case {
        line: "ferrite chat qwen2.5-0.5b-q4_k_m.gguf",
        subs: &["qwen2.5-0.5b-q4_k_m.gguf"],
        check: nonempty,
    },
    Case {
        line: "ferrite perplexity smollm2 -f text.txt -c 128 --chunks 8",
        subs: &["text.txt"],
        check: |out| assert!(out.contains("[8]") && out.contains("Final estimate: PPL = "), "{out}"),
    },
    Case {
        line: "ferrite perplexity model-f16.gguf -f text.txt -c 128 --chunks 8 --kl-divergence-base base.kld",
        subs: &["model-f16.gguf", "text.txt", "base.kld"],
        // Writes the base file the next case reads.
        check: |out| assert!(out.contains("Final estimate"), "{out}"),
    },
    Case {
        line: "ferrite perplexity model-q4_k_m.gguf --kl-divergence-base base.kld --kl-divergence",
        subs: &["model-q4_k_m.gguf", "base.kld"],
        check: |out| assert!(out.contains("Mean    KLD:") && out.contains("Same top p:"), "{out}"),
    },
    Case {
        line: "ferrite convert path/to/Qwen2.5-0.5B-Instruct -o qwen-q4_k_m.gguf --outtype Q4_K_M",
        subs: &["path/to/Qwen2.5-0.5B-Instruct", "qwen-q4_k_m.gguf"],
        // The summary goes to stderr; the file is read by the next case.
        check: |_| {},
    },
    Case {
        line: "ferrite chat qwen-q4_k_m.gguf",
        subs: &["qwen-q4_k_m.gguf"],
        check: nonempty,
    },
    Case {
        line: "ferrite chat path/to/Qwen2.5-0.5B-Instruct --weights q4_k_m",
        subs: &["path/to/Qwen2.5-0.5B-Instruct"],
        check: nonempty,
    },
    Case {
        line: "ferrite chat path/to/SmolLM2-135M-Instruct",
        subs: &["path/to/SmolLM2-135M-Instruct"],
        check: nonempty,
    },
    Case {
        line: r#"ferrite run testdata/hf-decoders/tiny-llama -p "Once upon a time" --temp 0"#,
        subs: &[],
        check: nonempty,
    },
    Case {
        line: r#"ferrite tokenize testdata/hf-decoders/tiny-qwen2 "<|im_start|>user""#,
        subs: &[],
        check: json_array,
    },
    Case {
        line: "ferrite chat",
        subs: &[],
        // Sampled (a random seed each run): any answer.
        check: nonempty,
    },
    Case {
        line: r#"ferrite chat smollm2 --system "You are a helpful assistant." --temp 0"#,
        subs: &[],
        check: |out| assert!(out.contains("Paris"), "{out}"),
    },
    Case {
        line: "ferrite chat --max-tokens 256 --ctx 4096 --verbose",
        subs: &[],
        // Sampled (a random seed each run): any answer.
        check: nonempty,
    },
    Case {
        line: r#"ferrite run -p "The capital of France is" -n 32 --temp 0"#,
        subs: &[],
        check: |out| assert!(out.contains("Paris"), "{out}"),
    },
    Case {
        line: r#"ferrite run smollm2 -p "Once upon a time" --seed 7 -t 2"#,
        subs: &[],
        check: nonempty,
    },
    Case {
        line: "ferrite run smollm2 -f prompt.txt -n 64 --verbose",
        subs: &["prompt.txt"],
        check: nonempty,
    },
    Case {
        line: "ferrite run smollm2 -f prompt.txt --lookup -v",
        subs: &["prompt.txt"],
        check: nonempty,
    },
    Case {
        line: "ferrite run model.Q8_0.gguf -f prompt.txt --draft model.Q2_K.gguf -v",
        subs: &["model.Q8_0.gguf", "prompt.txt", "model.Q2_K.gguf"],
        check: nonempty,
    },
    Case {
        line: "ferrite chat smollm2 -f system.txt",
        subs: &["system.txt"],
        check: nonempty,
    },
    Case {
        line: r#"ferrite run gemma3-270m -p "The capital of France is" --temp 0"#,
        subs: &[],
        check: nonempty,
    },
    Case {
        line: r#"ferrite tokenize smollm2 "Hello world""#,
        subs: &[],
        check: json_array,
    },
    Case {
        line: "ferrite inspect smollm2",
        subs: &[],
        check: |out| assert!(out.contains("architecture  llama"), "{out}"),
    },
    Case {
        line: "ferrite inspect gemma3-270m --json",
        subs: &[],
        check: json_object,
    },
    Case {
        line: "ferrite inspect minilm",
        subs: &[],
        check: |out| assert!(out.contains("safetensors"), "{out}"),
    },
    Case {
        line: "ferrite inspect smollm2 --tensor blk.0.attn_q.weight --values 8",
        subs: &[],
        check: |out| {
            assert_eq!(out.lines().count(), 8, "{out}");
            for l in out.lines() {
                l.parse::<f32>().unwrap();
            }
        },
    },
    Case {
        line: "ferrite embed minilm texts.txt",
        subs: &["texts.txt"],
        check: |out| vectors(out, 384, 3),
    },
    Case {
        line: r#"echo "search_query: what is RoPE?" | ferrite embed path/to/nomic-embed-text-v1.5 - --dim 256"#,
        subs: &["path/to/nomic-embed-text-v1.5"],
        check: |out| vectors(out, 256, 1),
    },
    Case {
        line: r#"ferrite rerank path/to/ms-marco-MiniLM-L-6-v2 -q "how many people live in berlin?" docs.txt"#,
        subs: &["path/to/ms-marco-MiniLM-L-6-v2", "docs.txt"],
        check: |out| assert_eq!(out.lines().count(), 3, "{out}"),
    },
    Case {
        line: r#"ferrite rerank path/to/ms-marco-MiniLM-L-6-v2 -q "capital of france" docs.txt --top-n 2 --format json"#,
        subs: &["path/to/ms-marco-MiniLM-L-6-v2", "docs.txt"],
        check: |out| {
            let v: Value = serde_json::from_str(out.trim()).expect("one JSON object");
            assert_eq!(v["results"].as_array().unwrap().len(), 2, "{out}");
        },
    },
    Case {
        line: "ferrite embed minilm texts.txt --format npy -o out.npy",
        subs: &["texts.txt", "out.npy"],
        check: |_| {},
    },
    Case {
        line: "ferrite serve",
        subs: &[],
        check: |_| {},
    },
    Case {
        line: "ferrite serve smollm2 minilm --port 9000 --api-key sk-... -t 2",
        subs: &[],
        check: |_| {},
    },
    Case {
        line: "ferrite translate path/to/opus-mt-en-hi sentences.txt",
        subs: &["path/to/opus-mt-en-hi", "sentences.txt"],
        check: |out| assert_eq!(out.lines().count(), 2, "{out}"),
    },
    Case {
        line: r#"echo "translate English to German: Hello" | ferrite translate path/to/t5-small - --beams 4"#,
        subs: &["path/to/t5-small"],
        check: |out| assert_eq!(out.lines().count(), 1, "{out}"),
    },
    Case {
        line: r#"ferrite run smollm2 -p "The capital of France is" -n 4 --temp 0 --dump dump-dir --dump-filter "l_out-*""#,
        subs: &["dump-dir"],
        check: nonempty,
    },
    Case {
        line: "ferrite bench -t 2",
        subs: &[],
        check: |out| assert!(out.contains("pp512") && out.contains("tg128"), "{out}"),
    },
    Case {
        line: "ferrite bench smollm2 -p 128 -n 32 -r 3 --json",
        subs: &[],
        check: json_object,
    },
    Case {
        line: "ferrite bench smollm2 -p 64 -n 16 -d 512 -r 1",
        subs: &[],
        check: |out| {
            assert!(
                out.contains("pp64 @ d512") && out.contains("tg16 @ d512"),
                "{out}"
            )
        },
    },
    Case {
        line: "ferrite bench minilm --texts testdata/embed/bench-sentences.txt -t 1",
        subs: &[],
        check: |out| assert!(out.contains("sentences/s"), "{out}"),
    },
    Case {
        line: "ferrite bench smollm2 --lookup --prompt-file prompt.txt -n 64 -r 2",
        subs: &["prompt.txt"],
        check: |out| {
            assert!(
                out.contains("tg64 lookup") && out.contains("accepted"),
                "{out}"
            )
        },
    },
];

/// The repository's root (the README's paths are relative to it).
fn root() -> PathBuf {
    common::testdata().join("..")
}

/// README.md and every book page (`docs/src/**/*.md`), as paths relative
/// to the repository's root, in a fixed order.
fn documented_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "md") {
                out.push(path);
            }
        }
    }
    let mut pages = Vec::new();
    walk(&root().join("docs/src"), &mut pages);
    let mut files = vec![PathBuf::from("README.md")];
    let mut book: Vec<PathBuf> = pages
        .into_iter()
        .map(|p| p.strip_prefix(root()).unwrap().to_path_buf())
        .collect();
    book.sort();
    files.extend(book);
    files
}

/// The `ferrite` commands of one Markdown text's ```sh blocks, comments
/// removed.
fn sh_commands(markdown: &str) -> Vec<String> {
    let mut commands = Vec::new();
    let mut in_sh = false;
    for line in markdown.lines() {
        if line.starts_with("```") {
            in_sh = line == "```sh";
            continue;
        }
        let command = match line.find("  #") {
            Some(i) => &line[..i],
            None => line,
        }
        .trim();
        if in_sh
            && (command.starts_with("ferrite ")
                || command == "ferrite"
                || command.contains("| ferrite "))
        {
            commands.push(command.to_string());
        }
    }
    commands
}

/// The `ferrite` commands of README.md and the book.
fn documented_commands() -> Vec<String> {
    documented_files()
        .iter()
        .flat_map(|f| sh_commands(&std::fs::read_to_string(root().join(f)).unwrap()))
        .collect()
}

/// Words of a command line as a POSIX shell splits them (double quotes
/// only, which is all the README uses).
fn words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let (mut quoted, mut started) = (false, false);
    for c in line.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                started = true;
            }
            c if c.is_whitespace() && !quoted => {
                if started {
                    words.push(std::mem::take(&mut word));
                    started = false;
                }
            }
            c => {
                word.push(c);
                started = true;
            }
        }
    }
    assert!(!quoted, "unbalanced quotes: {line}");
    if started {
        words.push(word);
    }
    words
}

/// The questions piped into `chat` commands.
const QUESTION: &str = "What is the capital of France?\n";

/// `ferrite ARGS` in the repository's root (the README's paths are
/// relative to it).
fn run(args: &[String], stdin: &str) -> Output {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    common::ferrite_in(Some(&root()), &args, stdin.as_bytes())
}

fn run_case(case: &Case, scratch: &std::path::Path) {
    let (stdin, command) = match case.line.split_once(" | ") {
        Some((echo, cmd)) => {
            let w = words(echo);
            assert_eq!(w[0], "echo", "{}", case.line);
            (format!("{}\n", w[1..].join(" ")), cmd)
        }
        None => (String::new(), case.line),
    };
    let mut args: Vec<String> = words(command)[1..].to_vec();
    for sub in case.subs {
        let with = placeholder(sub, scratch);
        let at = args
            .iter()
            .position(|a| a == sub)
            .unwrap_or_else(|| panic!("{sub} is not in {}", case.line));
        args[at] = with;
    }
    if args.first().map(String::as_str) == Some("convert") {
        // The fixture's tokenizer is unknown to llama.cpp's converter
        // (a real Qwen's is known, and the flag is then ignored).
        args.extend(["--pre-tokenizer".to_string(), "gpt-2".to_string()]);
    }
    if args.first().map(String::as_str) == Some("serve") {
        // Any free port and 2 threads instead of the README's; then the
        // server must become ready and list what it serves.
        let mut kept = Vec::new();
        let mut it = args[1..].iter();
        while let Some(a) = it.next() {
            match a.as_str() {
                "--port" | "-t" => {
                    it.next();
                }
                _ => kept.push(a.as_str()),
            }
        }
        let key = kept
            .iter()
            .position(|a| *a == "--api-key")
            .map(|i| kept[i + 1].to_string());
        let mut s = Server::spawn(&kept, &[], Stdio::inherit());
        s.wait_ready();
        let auth = key.map(|k| format!("Bearer {k}"));
        let headers: Vec<(&str, &str)> =
            auth.iter().map(|a| ("authorization", a.as_str())).collect();
        let r = s.request("GET", "/v1/models", &headers, b"");
        assert_eq!(r.status, 200, "{}: {}", case.line, r.text());
        if !headers.is_empty() {
            let r = s.get("/v1/models");
            assert_eq!(r.status, 401, "{}: no key, {}", case.line, r.text());
        }
        s.terminate();
        assert!(s.wait_exit(std::time::Duration::from_secs(60)).success());
        return;
    }
    let stdin = if stdin.is_empty() && args.first().map(String::as_str) == Some("chat") {
        QUESTION.to_string()
    } else {
        stdin
    };
    let started = std::time::Instant::now();
    let out = run(&args, &stdin);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}: {stderr}", case.line);
    eprintln!("{:6.1} s  {}", started.elapsed().as_secs_f64(), case.line);
    (case.check)(&stdout);
    if case.line.contains("out.npy") {
        let npy = std::fs::read(scratch.join("out.npy")).unwrap();
        assert!(npy.starts_with(b"\x93NUMPY"), "{}", case.line);
        assert_eq!(npy.len(), 128 + 3 * 384 * 4, "{}", case.line);
    }
}

#[test]
fn every_documented_command_is_in_the_table() {
    let documented = documented_commands();
    for c in &documented {
        assert!(
            CASES.iter().any(|case| case.line == c),
            "command in README.md or docs/src not tested (add it to CASES): {c}"
        );
    }
    for case in CASES {
        assert!(
            documented.iter().any(|c| c == case.line),
            "no longer in README.md or docs/src: {}",
            case.line
        );
    }
}

#[test]
fn every_documented_command_runs() {
    let scratch: PathBuf =
        std::env::temp_dir().join(format!("ferrite-readme-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).unwrap();
    for case in CASES {
        run_case(case, &scratch);
    }
}

/// The lines of a Markdown text outside fenced code blocks, with inline
/// code spans blanked (a `[x](y)` or `# x` inside code is not a link or a
/// heading).
fn prose_lines(markdown: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut fenced = false;
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut prose = String::new();
        let mut in_code = false;
        for c in line.chars() {
            if c == '`' {
                in_code = !in_code;
                prose.push(c);
            } else {
                prose.push(if in_code { ' ' } else { c });
            }
        }
        lines.push(prose);
    }
    lines
}

/// The anchor a heading gets, as mdBook (and GitHub, for these headings)
/// makes it: lower case; letters, digits, `-` and `_` kept, spaces made
/// `-`, anything else dropped.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .chars()
        .filter_map(|c| match c {
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c.to_lowercase().next()?),
            c if c.is_whitespace() => Some('-'),
            _ => None,
        })
        .collect()
}

/// The anchors of a Markdown text's headings (outside code blocks; code
/// spans in a heading count by their text).
fn anchors(markdown: &str) -> HashSet<String> {
    let mut fenced = false;
    let mut out = HashSet::new();
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced && line.starts_with('#') {
            out.insert(anchor(line.trim_start_matches('#')));
        }
    }
    out
}

/// The targets of a Markdown text's inline links `[text](target)`.
fn link_targets(markdown: &str) -> Vec<String> {
    let mut targets = Vec::new();
    for line in prose_lines(markdown) {
        let mut rest = line.as_str();
        while let Some(i) = rest.find("](") {
            let after = &rest[i + 2..];
            let Some(end) = after.find(')') else { break };
            targets.push(after[..end].to_string());
            rest = &after[end..];
        }
    }
    targets
}

#[test]
fn every_relative_link_resolves() {
    let mut broken = Vec::new();
    for file in documented_files() {
        let text = std::fs::read_to_string(root().join(&file)).unwrap();
        for target in link_targets(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, fragment) = match target.split_once('#') {
                Some((p, f)) => (p, Some(f)),
                None => (target.as_str(), None),
            };
            let dest = if path.is_empty() {
                root().join(&file)
            } else {
                root().join(&file).parent().unwrap().join(path)
            };
            if !dest.exists() {
                broken.push(format!("{}: {target}: no such file", file.display()));
                continue;
            }
            if let Some(fragment) = fragment {
                let is_md = dest.extension().is_some_and(|e| e == "md");
                if is_md && !anchors(&std::fs::read_to_string(&dest).unwrap()).contains(fragment) {
                    broken.push(format!("{}: {target}: no such heading", file.display()));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn every_book_page_is_in_the_summary() {
    let src = root().join("docs/src");
    let summary = std::fs::read_to_string(src.join("SUMMARY.md")).unwrap();
    let listed: HashSet<PathBuf> = link_targets(&summary).iter().map(PathBuf::from).collect();
    for file in documented_files() {
        let Ok(page) = file.strip_prefix("docs/src") else {
            continue;
        };
        if page != Path::new("SUMMARY.md") {
            assert!(
                listed.contains(page),
                "docs/src/{} is not listed in docs/src/SUMMARY.md",
                page.display()
            );
        }
    }
}

#[test]
fn the_link_checker_finds_links_and_headings() {
    // The checker itself: links in prose are found, those in code are not,
    // and headings get mdBook's anchors.
    let text = "# The `--bf16` flag\n\nSee [a](b.md#c) and `[x](y)`.\n\n```sh\n# not a heading [p](q)\n```\n";
    assert_eq!(link_targets(text), ["b.md#c"]);
    let a = anchors(text);
    assert!(a.contains("the---bf16-flag"), "{a:?}");
    assert_eq!(a.len(), 1, "{a:?}");
    assert_eq!(
        anchor(" Quantizing at load: `--weights`"),
        "quantizing-at-load---weights"
    );
}
