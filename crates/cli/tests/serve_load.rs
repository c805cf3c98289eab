//! `ferrite serve` under pressure, with the real SmolLM2 and MiniLM: a
//! full queue answers 429 with Retry-After, a client that disconnects
//! mid-stream (or while queued) frees its sequence and KV memory within a
//! step (seen on `/metrics`), a request the KV budget cannot hold yet
//! waits for admission and then runs in full (one it could never hold is
//! 400), a client's large embedding batch is split by tokens with the
//! same vectors, and SIGTERM drains: `/ready` and new requests get 503,
//! the in-flight stream finishes (or is cut when the grace period ends),
//! the process exits 0.

mod serve_common;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use serve_common::{Server, Stream};

/// A streamed completion that would run for a long time.
fn long_stream(max_tokens: usize) -> Value {
    json!({"prompt": "Write a very long story about a dragon.", "max_tokens": max_tokens,
           "temperature": 0.8, "seed": 1, "stream": true})
}

#[test]
fn full_queue_429_and_disconnect_frees_the_slot() {
    let s = Server::start(&["smollm2", "--max-seqs", "1", "--max-queue", "1"]);
    // A takes the only sequence slot (end tokens banned: only the
    // disconnect can end it early).
    let mut a_body = long_stream(3000);
    a_body["logit_bias"] = no_end();
    let mut a = Stream::open(&s, "/v1/completions", &a_body);
    assert_eq!(a.status, 200);
    assert!(a.next_data().is_some());
    assert_eq!(s.metric("ferrite_running_sequences"), 1.0);
    assert!(s.metric("ferrite_kv_cache_usage") > 0.0);
    // B waits in the queue; C finds it full.
    let b = Stream::open(&s, "/v1/completions", &long_stream(3000));
    assert!(s.wait_metric("ferrite_queue_length", 1.0, Duration::from_secs(10)));
    let c = s.post("/v1/completions", &json!({"prompt": "hi", "max_tokens": 2}));
    assert_eq!(c.status, 429);
    assert_eq!(c.header("retry-after"), Some("1"));
    assert_eq!(c.json()["error"]["type"], "rate_limit_error");
    // B disconnects while queued: it leaves the queue.
    drop(b);
    assert!(s.wait_metric("ferrite_queue_length", 0.0, Duration::from_secs(10)));
    // A disconnects mid-stream: its slot and memory are freed within a
    // few decode steps (the server learns of the close when a write to
    // the socket fails), long before its 3000 tokens could have run.
    let before = s.metric("ferrite_generated_tokens_total");
    let t = Instant::now();
    drop(a);
    assert!(s.wait_metric("ferrite_running_sequences", 0.0, Duration::from_secs(10)));
    assert_eq!(s.metric("ferrite_kv_cache_usage"), 0.0);
    let after = s.metric("ferrite_generated_tokens_total");
    eprintln!(
        "disconnect: freed after {:?}, {} tokens after the close ({before} before)",
        t.elapsed(),
        after - before
    );
    assert!(
        after - before <= 8.0,
        "{} tokens after the close",
        after - before
    );
    assert!(after < 3000.0, "{after}");
    // The slot serves the next request.
    let d = s.post(
        "/v1/completions",
        &json!({"prompt": "hi", "max_tokens": 2, "temperature": 0}),
    );
    assert_eq!(d.status, 200);
    assert_eq!(d.json()["usage"]["completion_tokens"], 2);
}

#[test]
fn sigterm_drains_then_exits_zero() {
    let mut s = Server::start(&["smollm2", "--grace", "60"]);
    let mut a = Stream::open(
        &s,
        "/v1/completions",
        &json!({"prompt": "Once upon a time", "max_tokens": 48, "temperature": 0, "stream": true}),
    );
    assert!(a.next_data().is_some());
    s.terminate();
    // Ready goes 503 at once; new work is refused with 503.
    let deadline = Instant::now() + Duration::from_secs(5);
    while s.get("/ready").status != 503 {
        assert!(Instant::now() < deadline, "/ready still 200 after SIGTERM");
        std::thread::sleep(Duration::from_millis(10));
    }
    let refused = s.post("/v1/completions", &json!({"prompt": "hi", "max_tokens": 2}));
    assert_eq!(refused.status, 503);
    refused.error_message();
    // The in-flight stream runs to its end.
    let mut frames = Vec::new();
    while let Some(d) = a.next_data() {
        frames.push(d);
    }
    assert_eq!(frames.last().map(String::as_str), Some("[DONE]"));
    let last: Value = serde_json::from_str(&frames[frames.len() - 2]).unwrap();
    assert_eq!(last["choices"][0]["finish_reason"], "length");
    let status = s.wait_exit(Duration::from_secs(30));
    assert!(status.success(), "{status}");
}

/// SmolLM2's end tokens (`<|endoftext|>`, `<|im_end|>`), banned so a reply
/// runs to `max_tokens`.
fn no_end() -> Value {
    json!({"0": -100, "2": -100})
}

#[test]
fn kv_budget_makes_admission_wait() {
    // 8 MiB of KV cache: SmolLM2 (30 layers, 3 KV heads of 64, f16) takes
    // 22.5 KiB a position, so A (~310 positions) and B (~110) do not fit
    // together, though 64 sequences are allowed.
    let s = Server::start(&["smollm2", "--kv-cache-mib", "8"]);
    let a_body = json!({"prompt": "Write a very long story about a dragon.", "max_tokens": 300,
                        "temperature": 0, "stream": true, "logit_bias": no_end()});
    let b_body = json!({"prompt": "The capital of France is", "max_tokens": 100,
                        "temperature": 0, "logit_bias": no_end()});
    // A request that could never fit is refused at once.
    let mut huge = b_body.clone();
    huge["max_tokens"] = json!(400);
    let r = s.post("/v1/completions", &huge);
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.error_message().contains("KV cache"), "{}", r.text());
    let b_alone = s.post("/v1/completions", &b_body).json();
    let mut a = Stream::open(&s, "/v1/completions", &a_body);
    let first = a.next_data().expect("A's first chunk");
    let usage = s.metric("ferrite_kv_cache_usage");
    assert!(usage > 0.5 && usage <= 1.0, "{usage}");
    let b_together = std::thread::scope(|scope| {
        let b = scope.spawn(|| s.post("/v1/completions", &b_body));
        // B waits in the queue while A holds the memory.
        assert!(s.wait_metric("ferrite_queue_length", 1.0, Duration::from_secs(10)));
        assert_eq!(s.metric("ferrite_running_sequences"), 1.0);
        let mut frames = vec![first];
        while let Some(d) = a.next_data() {
            frames.push(d);
        }
        assert_eq!(frames.last().map(String::as_str), Some("[DONE]"));
        let texts = serve_common::stream_texts(&frames);
        let whole = s.post(
            "/v1/completions",
            &json!({"prompt": a_body["prompt"],
            "max_tokens": 300, "temperature": 0, "logit_bias": no_end()}),
        );
        assert_eq!(texts, serve_common::full_texts(&whole.json()));
        b.join().unwrap()
    });
    // B then ran in full, and gave what it gives alone.
    assert_eq!(b_together.status, 200, "{}", b_together.text());
    let b_together = b_together.json();
    assert_eq!(b_together["usage"]["completion_tokens"], 100);
    assert_eq!(
        b_together["choices"][0]["text"],
        b_alone["choices"][0]["text"]
    );
    assert_eq!(s.metric("ferrite_kv_cache_usage"), 0.0);
}

#[test]
fn large_embedding_batches_are_split_by_tokens() {
    // Batches of at most 16 tokens: two inputs of ~7 tokens each.
    let s = Server::start(&["minilm", "--embed-batch-tokens", "16"]);
    let many: Vec<String> = (0..40)
        .map(|i| format!("sentence number {i} about things"))
        .collect();
    let all = s.post("/v1/embeddings", &json!({"input": many})).json();
    // Well over ten batches' worth of tokens.
    assert!(all["usage"]["prompt_tokens"].as_u64().unwrap() > 16 * 10);
    for (i, text) in many.iter().enumerate() {
        let one = s.post("/v1/embeddings", &json!({"input": text})).json();
        assert_eq!(
            all["data"][i]["embedding"], one["data"][0]["embedding"],
            "{i}"
        );
        assert_eq!(all["data"][i]["index"], i);
    }
}

#[test]
fn sigterm_grace_period_ends_what_is_left() {
    let mut s = Server::start(&["smollm2", "--grace", "1"]);
    let mut body = long_stream(3000);
    body["logit_bias"] = no_end();
    let mut a = Stream::open(&s, "/v1/completions", &body);
    assert!(a.next_data().is_some());
    let t = Instant::now();
    s.terminate();
    // The process exits 0 soon after the 1 s grace, not after 3000 tokens.
    let status = s.wait_exit(Duration::from_secs(30));
    assert!(status.success(), "{status}");
    let waited = t.elapsed();
    assert!(waited >= Duration::from_secs(1), "{waited:?}");
    let mut frames = 0;
    let mut last = String::new();
    while let Some(d) = a.next_data() {
        frames += 1;
        last = d;
    }
    assert_ne!(last, "[DONE]", "the stream ran to its end");
    assert!(frames < 3000, "{frames}");
    eprintln!("exited {waited:?} after SIGTERM; {frames} frames after it");
}
