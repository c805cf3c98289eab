//! `--dump DIR [--dump-filter PATTERN]` on `ferrite run`, `translate` and
//! `embed`: the same output as without it, the named tensors written, and
//! clear errors for combinations it does not take.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn testdata() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata")
}

/// `ferrite ARGS` with `input` on stdin: (status ok, stdout, stderr).
fn ferrite(args: &[&str], input: &str) -> (bool, String, String) {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_ferrite"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("ferrite runs");
    let _ = child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input.as_bytes());
    let out = child.wait_with_output().expect("ferrite ends");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ferrite-cli-dump-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .expect("the dump directory exists")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// Runs `args` without and with `--dump DIR` (+ `extra`): the same
/// stdout; returns the files written.
fn same_output_with_dump(name: &str, args: &[&str], input: &str, extra: &[&str]) -> Vec<String> {
    let dir = scratch(name);
    let (ok, plain, err) = ferrite(args, input);
    assert!(ok, "{err}");
    let mut with: Vec<&str> = args.to_vec();
    let d = dir.to_str().expect("path");
    with.extend(["--dump", d]);
    with.extend(extra);
    let (ok, dumped, err) = ferrite(&with, input);
    assert!(ok, "{err}");
    assert_eq!(plain, dumped, "output changed by --dump");
    assert!(err.contains("dumped"), "{err}");
    let files = names(&dir);
    std::fs::remove_dir_all(&dir).expect("cleans up");
    files
}

#[test]
fn run_dumps_every_pass() {
    let args = [
        "run",
        "smollm2",
        "-p",
        "The capital of France is",
        "-n",
        "3",
        "--temp",
        "0",
        "-t",
        "2",
    ];
    let files = same_output_with_dump("run", &args, "", &[]);
    // The prompt's pass and one per generated token (each is fed back).
    for f in [
        "inp_embd.step0.npy",
        "attn_norm-0.step0.npy",
        "l_out-29.step0.npy",
        "result_output.step0.npy",
        "result_output.step2.npy",
    ] {
        assert!(files.contains(&f.to_string()), "{f} missing: {files:?}");
    }
    assert!(files.contains(&"result_output.step3.npy".to_string()));
    assert!(!files.iter().any(|f| f.contains(".step4.")), "{files:?}");
    let files = same_output_with_dump("run-filter", &args, "", &["--dump-filter", "*-0"]);
    assert!(!files.is_empty());
    assert!(files.iter().all(|f| f.contains("-0.step")), "{files:?}");
}

#[test]
fn translate_and_embed_dump() {
    let marian = testdata().join("translation/tiny-marian");
    let files = same_output_with_dump(
        "translate",
        &[
            "translate",
            marian.to_str().expect("path"),
            "--beams",
            "2",
            "-t",
            "2",
        ],
        "The river is wide and slow in the summer.\n",
        &[],
    );
    for f in [
        "enc.inp_embd.step0.npy",
        "enc.result_norm.step0.npy",
        "l_out-0.step1.npy",
    ] {
        assert!(files.contains(&f.to_string()), "{f} missing: {files:?}");
    }
    let bert = testdata().join("embed/bert-tiny");
    let files = same_output_with_dump(
        "embed",
        &["embed", bert.to_str().expect("path"), "-t", "2"],
        "one line\nand another one\n",
        &[],
    );
    for f in [
        "inp_norm.step0.npy",
        "kqv_out-0.step0.npy",
        "l_out-0.step0.npy",
    ] {
        assert!(files.contains(&f.to_string()), "{f} missing: {files:?}");
    }
}

#[test]
fn dump_options_it_does_not_take_are_refused() {
    let (ok, _, err) = ferrite(&["run", "smollm2", "-p", "x", "--dump-filter", "x"], "");
    assert!(!ok);
    assert!(err.contains("--dump"), "{err}");
    let dir = scratch("beams");
    let d = dir.to_str().expect("path");
    let (ok, _, err) = ferrite(
        &["run", "smollm2", "-p", "x", "--beams", "2", "--dump", d],
        "",
    );
    assert!(!ok);
    assert!(
        err.contains("--dump does not combine with --beams"),
        "{err}"
    );
    assert!(!dir.exists(), "nothing written for a refused command");
}
