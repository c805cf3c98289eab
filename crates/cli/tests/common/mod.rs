//! Running the `ferrite` binary from the CLI tests.
#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// Runs `ferrite ARGS` with `stdin` as its standard input (closed at once
/// if `None`).
pub fn ferrite(args: &[&str], stdin: Option<&str>) -> Output {
    ferrite_bytes(args, stdin.unwrap_or("").as_bytes())
}

/// As [`ferrite`], with raw bytes on standard input.
pub fn ferrite_bytes(args: &[&str], stdin: &[u8]) -> Output {
    ferrite_in(None, args, stdin)
}

/// As [`ferrite_bytes`], run in directory `dir` if given.
pub fn ferrite_in(dir: Option<&Path>, args: &[&str], stdin: &[u8]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ferrite"));
    if let Some(dir) = dir {
        command.current_dir(dir);
    }
    let mut child = command
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run ferrite");
    {
        let mut input = child.stdin.take().unwrap();
        // A run that fails before reading its input closes the pipe early.
        if let Err(e) = input.write_all(stdin) {
            assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "{e}");
        }
    }
    child.wait_with_output().unwrap()
}

/// Stdout and stderr of a run that must have succeeded.
pub fn ok(out: &Output) -> (String, String) {
    let (stdout, stderr) = (
        String::from_utf8(out.stdout.clone()).expect("stdout is UTF-8"),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(out.status.success(), "failed: {stderr}");
    (stdout, stderr)
}

/// The repository's testdata directory.
pub fn testdata() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata")
}
