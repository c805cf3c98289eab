//! The rules every command shares, as a user meets them (issue 32): where
//! prompts come from, input that is not UTF-8, thread counts, negative
//! numbers, seeds, a missing model argument. Each runs the real binary on
//! the small fixtures in testdata/.

mod common;

use std::path::PathBuf;

use common::{ferrite, ok};

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

fn stderr_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
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
