//! One client cannot hurt the others (issue 31), with the real models: a
//! `json_schema` with a 50,000-value `enum` costs another client's short
//! request little, and an embeddings request of hundreds of inputs is
//! interleaved with other clients' requests and stops when its client
//! leaves.

mod serve_common;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use serve_common::Server;

/// A short chat request's latency.
fn short(s: &Server) -> Duration {
    let t = Instant::now();
    let r = s.post(
        "/v1/completions",
        &json!({"prompt": "The capital of France is", "max_tokens": 4, "temperature": 0}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    t.elapsed()
}

#[test]
fn a_huge_enum_costs_other_clients_little() {
    let s = Server::start(&["smollm2"]);
    let alone: Vec<Duration> = (0..3).map(|_| short(&s)).collect();
    let alone = *alone.iter().min().unwrap();
    let values: Vec<String> = (0..50_000).map(|i| format!("item {i}")).collect();
    let attack = json!({
        "messages": [{"role": "user", "content": "Pick one."}],
        "max_tokens": 40, "temperature": 0.8, "seed": 3,
        // End tokens banned: the attacker decodes for all its 40 tokens.
        "logit_bias": {"0": -100, "2": -100},
        "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema":
            {"type": "object", "properties": {"v": {"enum": values}, "w": {"enum": values}},
             "required": ["v", "w"]}}}
    });
    let port = s.port;
    let attacker = std::thread::spawn(move || {
        let t = Instant::now();
        let body = attack.to_string();
        let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        std::io::Write::write_all(
            &mut c,
            &serve_common::request_bytes(
                "POST",
                "/v1/chat/completions",
                &[("content-type", "application/json")],
                body.as_bytes(),
            ),
        )
        .unwrap();
        let mut out = Vec::new();
        std::io::Read::read_to_end(&mut c, &mut out).unwrap();
        (String::from_utf8_lossy(&out).into_owned(), t.elapsed())
    });
    // Once the attacker runs, another client's request.
    assert!(s.wait_metric("ferrite_running_sequences", 1.0, Duration::from_secs(60)));
    let during = short(&s);
    let (answer, took) = attacker.join().unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let body: Value =
        serde_json::from_str(&answer[answer.find("\r\n\r\n").unwrap() + 4..]).unwrap();
    let text = body["choices"][0]["message"]["content"].as_str().unwrap();
    eprintln!("alone {alone:?}, during the 50,000-value enum {during:?}; the enum request took {took:?}: {text}");
    // The bound: the short request's own time a few times over (it shares
    // every forward pass with the attacker), not the minutes of before.
    let bound = alone * 4 + Duration::from_secs(2);
    assert!(during <= bound, "{during:?} > {bound:?}");
    if body["choices"][0]["finish_reason"] == "stop" {
        let v: Value = serde_json::from_str(text).unwrap();
        assert!(v["v"].as_str().unwrap().starts_with("item "), "{v}");
    }
}

/// Many long inputs, as one embeddings request's body.
fn big_embeddings(n: usize) -> String {
    let texts: Vec<String> = (0..n)
        .map(|i| {
            format!(
                "Sentence {i}: {}",
                "the quick brown fox jumps over the lazy dog ".repeat(10)
            )
        })
        .collect();
    json!({"model": "minilm", "input": texts}).to_string()
}

/// Sends a request on a raw connection without reading the answer.
fn send(s: &Server, path: &str, body: &str) -> std::net::TcpStream {
    let mut c = s.connect().unwrap();
    std::io::Write::write_all(
        &mut c,
        &serve_common::request_bytes(
            "POST",
            path,
            &[("content-type", "application/json")],
            body.as_bytes(),
        ),
    )
    .unwrap();
    c
}

#[test]
fn large_embedding_requests_share_the_worker_and_stop_when_their_client_leaves() {
    let s = Server::start(&[
        "minilm",
        "--embed-batch-tokens",
        "1024",
        "--max-embed-tokens",
        "100000",
    ]);
    // Over the per-request limit: 413 naming it.
    let r = s.request(
        "POST",
        "/v1/embeddings",
        &[("content-type", "application/json")],
        big_embeddings(2000).as_bytes(),
    );
    assert_eq!(r.status, 413);
    let message = r.error_message();
    assert!(message.contains("100000 tokens"), "{message}");
    // A large request, then a one-input one: the small one is answered
    // long before the large one ends.
    let big = big_embeddings(200);
    let t = Instant::now();
    let mut a = send(&s, "/v1/embeddings", &big);
    std::thread::sleep(Duration::from_millis(300));
    let small = s.post(
        "/v1/embeddings",
        &json!({"model": "minilm", "input": "hello"}),
    );
    let small_at = t.elapsed();
    assert_eq!(small.status, 200);
    let mut out = Vec::new();
    std::io::Read::read_to_end(&mut a, &mut out).unwrap();
    let big_at = t.elapsed();
    assert!(String::from_utf8_lossy(&out).starts_with("HTTP/1.1 200"));
    eprintln!("one input answered after {small_at:?}; 200 inputs after {big_at:?}");
    assert!(small_at * 3 < big_at, "{small_at:?} vs {big_at:?}");
    // A large request whose client leaves stops at its next batch: it is
    // counted as finished, and its tokens never are.
    let requests = s.metric("ferrite_requests_total");
    let tokens = s.metric("ferrite_prompt_tokens_total");
    let a = send(&s, "/v1/embeddings", &big);
    std::thread::sleep(Duration::from_millis(500));
    drop(a);
    let left = Instant::now();
    assert!(s.wait_metric("ferrite_requests_total", requests + 1.0, big_at));
    let stopped = left.elapsed();
    eprintln!("stopped {stopped:?} after its client left");
    assert!(stopped * 3 < big_at, "{stopped:?}");
    assert_eq!(s.metric("ferrite_prompt_tokens_total"), tokens);
}

/// The server's resident memory in MiB.
fn rss_mib(s: &Server) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", s.pid())).unwrap();
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kb / 1024.0
}

#[test]
fn n_choices_do_not_copy_the_whole_context_and_memory_returns() {
    let s = Server::start(&["smollm2"]);
    // Warm up (the forward pass's buffers), then the baseline.
    short(&s);
    let idle = rss_mib(&s);
    // Each choice's cache holds 3000 + prompt positions (70 MiB each for
    // SmolLM2): copying whole caches for n = 16 would commit over 1 GiB
    // per request. Each choice ends at once (`<|im_end|>` forced).
    let body = json!({"messages": [{"role": "user", "content": "Say hi."}], "n": 16,
                      "max_tokens": 3000, "temperature": 0.8, "seed": 1,
                      "logit_bias": {"2": 100}});
    let mut peak: f64 = 0.0;
    for _ in 0..4 {
        let r = s.post("/v1/chat/completions", &body);
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.json()["choices"].as_array().unwrap().len(), 16);
        peak = peak.max(rss_mib(&s));
    }
    std::thread::sleep(Duration::from_millis(200));
    let after = rss_mib(&s);
    eprintln!("RSS idle {idle:.0} MiB, after each request up to {peak:.0}, idle again {after:.0}");
    assert!(
        after < idle + 100.0,
        "idle {idle:.0} MiB, after {after:.0} MiB"
    );
}
