//! `ferrite serve` starting: with no model it serves the default chat
//! model and MiniLM; while its models load it listens at once, `/health`
//! answers 200 and `/ready` 503, and every `/v1/*` request gets 503 in
//! OpenAI's error shape until the last model is in; a model that fails to
//! load ends the process with a non-zero status and an error naming the
//! file.
//!
//! A real load made slow on purpose, as a slow disk would: the served
//! MiniLM directory's `tokenizer.json` is a FIFO, so the loader blocks in
//! its read until the test writes the real file into it (or garbage).
//! The test knows when the loader has reached it (the FIFO's writer end
//! opens), so what it sees during loading does not depend on timing.
#![cfg(unix)]

mod serve_common;

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::json;
use serve_common::Server;

/// The real MiniLM directory (as the binary finds it).
fn minilm_dir() -> PathBuf {
    let models = std::env::var_os("FERRITE_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../models"));
    models.join("all-MiniLM-L6-v2")
}

/// A MiniLM directory whose `tokenizer.json` is a FIFO (the other files
/// link to the real ones), and the thread that will feed it.
struct SlowModel {
    root: PathBuf,
    dir: PathBuf,
    /// Fires once the server has opened the FIFO (it is loading MiniLM).
    reading: mpsc::Receiver<()>,
    /// What to write into the FIFO, when the test decides.
    feed: mpsc::Sender<Vec<u8>>,
}

impl SlowModel {
    fn new(tag: &str) -> SlowModel {
        let real = minilm_dir();
        assert!(
            real.join("tokenizer.json").is_file(),
            "{} missing: run scripts/fetch-models.sh minilm",
            real.display()
        );
        let root = std::env::temp_dir().join(format!(
            "ferrite-serve-startup-{}-{tag}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&root);
        let dir = root.join("minilm-slow");
        std::fs::create_dir_all(&dir).unwrap();
        for entry in std::fs::read_dir(&real).unwrap() {
            let name = entry.unwrap().file_name();
            if name != "tokenizer.json" {
                let target = std::fs::canonicalize(real.join(&name)).unwrap();
                std::os::unix::fs::symlink(target, dir.join(&name)).unwrap();
            }
        }
        let fifo = dir.join("tokenizer.json");
        let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
        assert!(made.success(), "mkfifo {}", fifo.display());
        let (reading_tx, reading) = mpsc::channel();
        let (feed, feed_rx) = mpsc::channel::<Vec<u8>>();
        // Opening a FIFO to write blocks until a reader opens it. The
        // thread is not joined: if the server never reaches the FIFO, the
        // test fails on its own and the thread ends with the process.
        std::thread::spawn(move || {
            let mut f = File::create(&fifo).unwrap();
            let _ = reading_tx.send(());
            if let Ok(bytes) = feed_rx.recv() {
                let _ = f.write_all(&bytes);
            }
        });
        SlowModel {
            root,
            dir,
            reading,
            feed,
        }
    }

    fn path(&self) -> &str {
        self.dir.to_str().unwrap()
    }

    /// Waits until the server's loader has opened the FIFO.
    fn wait_reading(&self) {
        self.reading
            .recv_timeout(Duration::from_secs(120))
            .expect("the server never started reading tokenizer.json");
    }
}

impl Drop for SlowModel {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// Checks a 503 in OpenAI's error shape, with Retry-After.
fn assert_unavailable(r: &serve_common::Response, what: &str) {
    assert_eq!(
        r.status,
        503,
        "{what}: {}",
        String::from_utf8_lossy(&r.body)
    );
    assert_eq!(r.json()["error"]["type"], "unavailable_error", "{what}");
    assert!(r.error_message().contains("loading"), "{what}");
    assert_eq!(r.header("retry-after"), Some("1"), "{what}");
}

#[test]
fn ready_is_503_while_a_model_loads() {
    let slow = SlowModel::new("ready");
    let mut s = Server::spawn(&["smollm2", slow.path()], &[], Stdio::inherit());
    s.wait_listening();
    // SmolLM2 is loaded and MiniLM is being read: the server is mid-load
    // for as long as the test holds the FIFO.
    slow.wait_reading();
    for _ in 0..5 {
        let health = s.get("/health");
        assert_eq!(health.status, 200);
        assert_eq!(health.json()["status"], "ok");
        let ready = s.get("/ready");
        assert_eq!(ready.status, 503);
        assert_eq!(ready.json()["status"], "loading");
        std::thread::sleep(Duration::from_millis(100));
    }
    let chat = json!({"model": "smollm2", "messages": [{"role": "user", "content": "Hi"}],
                      "max_tokens": 2});
    assert_unavailable(&s.post("/v1/chat/completions", &chat), "chat");
    assert_unavailable(
        &s.post("/v1/completions", &json!({"prompt": "Hi", "max_tokens": 2})),
        "completions",
    );
    assert_unavailable(
        &s.post(
            "/v1/embeddings",
            &json!({"model": "minilm-slow", "input": "Hi"}),
        ),
        "embeddings",
    );
    assert_unavailable(&s.get("/v1/models"), "models");
    assert_unavailable(&s.post("/tokenize", &json!({"content": "Hi"})), "tokenize");
    // The load finishes once the file arrives; then everything answers.
    let mut tokenizer = Vec::new();
    File::open(minilm_dir().join("tokenizer.json"))
        .unwrap()
        .read_to_end(&mut tokenizer)
        .unwrap();
    slow.feed.send(tokenizer).unwrap();
    s.wait_ready();
    assert_eq!(s.get("/ready").json()["status"], "ready");
    assert_eq!(s.model_ids(), ["smollm2", "minilm-slow"]);
    let r = s.post("/v1/chat/completions", &chat);
    assert_eq!(r.status, 200, "{}", r.text());
    let e = s
        .post(
            "/v1/embeddings",
            &json!({"model": "minilm-slow", "input": "Hi"}),
        )
        .json();
    assert_eq!(e["data"][0]["embedding"].as_array().unwrap().len(), 384);
}

#[test]
fn a_model_that_fails_to_load_ends_the_server() {
    let slow = SlowModel::new("fails");
    let mut s = Server::spawn(&[slow.path()], &[], Stdio::piped());
    let mut stderr = s.take_stderr().unwrap();
    s.wait_listening();
    slow.wait_reading();
    assert_eq!(s.get("/ready").status, 503);
    slow.feed
        .send(b"{ this is not a tokenizer".to_vec())
        .unwrap();
    let status = s.wait_exit(Duration::from_secs(60));
    assert!(!status.success(), "{status}");
    let mut text = String::new();
    stderr.read_to_string(&mut text).unwrap();
    let fifo = Path::new(slow.path()).join("tokenizer.json");
    assert!(
        text.contains(fifo.to_str().unwrap()),
        "the error does not name {}:\n{text}",
        fifo.display()
    );
}

#[test]
fn no_model_serves_the_default_chat_model_and_minilm() {
    let s = Server::start(&[]);
    assert_eq!(s.model_ids(), ["qwen2.5-0.5b", "minilm"]);
    let r = s.post(
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["model"], "qwen2.5-0.5b");
    let e = s.post("/v1/embeddings", &json!({"input": "Hi"})).json();
    assert_eq!(e["model"], "minilm");
    assert_eq!(e["data"][0]["embedding"].as_array().unwrap().len(), 384);
}
