//! `ferrite serve`: a model loaded by short name also answers to its file
//! name without `.gguf` (as the book's `serve` page says clients may
//! address it), and the log on a pipe has no colour codes.

mod serve_common;

use std::io::Read;
use std::process::Stdio;
use std::time::Duration;

use serde_json::json;
use serve_common::Server;

#[test]
fn a_model_loaded_by_short_name_answers_to_its_file_name_too() {
    let mut s = Server::spawn(&["minilm"], &[("FERRITE_LOG", "info")], Stdio::piped());
    s.wait_ready();
    assert_eq!(s.model_ids(), ["minilm"]);
    for name in ["minilm", "all-MiniLM-L6-v2"] {
        let r = s.post("/v1/embeddings", &json!({"model": name, "input": "hi"}));
        assert_eq!(r.status, 200, "{name}: {}", r.text());
        assert_eq!(r.json()["model"], "minilm", "{name}");
        let r = s.get(&format!("/v1/models/{name}"));
        assert_eq!(r.status, 200, "{name}: {}", r.text());
    }
    let r = s.post(
        "/v1/embeddings",
        &json!({"model": "all-MiniLM", "input": "hi"}),
    );
    assert_eq!(r.status, 404, "{}", r.text());

    // The log went to a pipe: plain text, no ANSI colour codes.
    let mut stderr = s.take_stderr().unwrap();
    s.terminate();
    assert!(s.wait_exit(Duration::from_secs(60)).success());
    let mut log = String::new();
    stderr.read_to_string(&mut log).unwrap();
    assert!(log.contains("loaded"), "{log}");
    assert!(
        !log.contains('\x1b'),
        "colour codes in a piped log: {log:?}"
    );
}

#[test]
fn one_model_given_twice_under_its_two_names_is_refused() {
    let path = ferrite::tools::resolve("minilm").unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_ferrite"))
        .args(["serve", "minilm", path.to_str().unwrap(), "--port", "0"])
        .env("FERRITE_LOG", "error")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The server must end by itself (a model failed to load), not serve.
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("the server did not refuse the second name");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(!status.success(), "{stderr}");
    assert!(
        stderr.contains("the model name 'all-MiniLM-L6-v2' is given twice"),
        "{stderr}"
    );
}
