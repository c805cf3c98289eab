//! `ferrite serve` against clients that send half a request: a request
//! head must arrive within `--header-timeout`, a body within
//! `--body-timeout` (408), and SIGTERM ends the process within `--grace`
//! whatever the open connections hold. Served on testdata's tiny Llama
//! (the model does not matter here, and it loads at once).

mod serve_common;

use std::io::{Read, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serve_common::Server;

fn tiny_llama() -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/hf-decoders/tiny-llama")
        .display()
        .to_string()
}

/// Reads until the server closes the connection (or 30 s pass); returns
/// what it sent and how long that took.
fn read_until_closed(s: &mut std::net::TcpStream) -> (Vec<u8>, Duration) {
    let t = Instant::now();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    (got, t.elapsed())
}

#[test]
fn a_half_sent_head_is_closed_after_the_header_timeout() {
    let model = tiny_llama();
    let s = Server::start(&[&model, "--header-timeout", "1"]);
    let mut c = s.connect().unwrap();
    c.write_all(b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-le")
        .unwrap();
    let (_, took) = read_until_closed(&mut c);
    assert!(took < Duration::from_secs(5), "closed after {took:?}");
    // An idle keep-alive connection is closed too.
    let mut idle = s.connect().unwrap();
    let (got, took) = read_until_closed(&mut idle);
    assert!(got.is_empty());
    assert!(took < Duration::from_secs(5), "idle closed after {took:?}");
    // The server still serves.
    assert_eq!(s.get("/health").status, 200);
}

#[test]
fn a_half_sent_body_gets_408_after_the_body_timeout() {
    let model = tiny_llama();
    let s = Server::start(&[&model, "--body-timeout", "1"]);
    let mut c = s.connect().unwrap();
    c.write_all(
        b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
          content-length: 100\r\n\r\n{\"prompt\": \"Once",
    )
    .unwrap();
    let (got, took) = read_until_closed(&mut c);
    assert!(took < Duration::from_secs(5), "answered after {took:?}");
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(text.contains("did not arrive within"), "{text}");
}

#[test]
fn sigterm_ends_within_the_grace_whatever_clients_send() {
    let model = tiny_llama();
    // Timeouts far longer than the grace: only the grace can end these.
    let mut s = Server::start(&[
        &model,
        "--grace",
        "2",
        "--header-timeout",
        "600",
        "--body-timeout",
        "600",
    ]);
    let mut head = s.connect().unwrap();
    head.write_all(b"POST /v1/completions HTTP/1.1\r\nhost: x\r\n")
        .unwrap();
    let mut body = s.connect().unwrap();
    body.write_all(
        b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
          content-length: 100\r\n\r\n{\"pro",
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let t = Instant::now();
    s.terminate();
    let status = s.wait_exit(Duration::from_secs(30));
    let took = t.elapsed();
    assert!(status.success(), "{status}");
    assert!(
        took < Duration::from_secs(5),
        "exited {took:?} after SIGTERM"
    );
    drop((head, body));
}
