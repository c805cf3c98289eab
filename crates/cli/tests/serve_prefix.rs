//! The prefix cache of `ferrite serve` (real SmolLM2): a request whose
//! prompt starts like an earlier one copies that prefix's keys and values
//! instead of computing them, and answers with the same bytes as a server
//! without the cache (texts and logprobs, greedy and seeded sampling,
//! n > 1), alone, concurrently, over chat turns and under a budget so
//! small that blocks are evicted all the time.

mod serve_common;

use serde_json::{json, Value};
use serve_common::Server;

/// A system prompt of a few hundred tokens.
fn system_prompt() -> String {
    let words = [
        "You",
        "answer",
        "questions",
        "about",
        "gardens",
        "rivers",
        "copper",
        "lanterns",
        "and",
        "winter",
        "markets",
        "politely",
        "briefly",
    ];
    let mut s = String::from("You are a careful assistant. Rules:");
    for i in 0..60 {
        s.push_str(&format!(
            " {}. {} {} {}.",
            i + 1,
            words[i % 13],
            words[(i * 5) % 13],
            words[(i * 7 + 3) % 13]
        ));
    }
    s
}

/// Chat request `i` sharing the system prompt, with logprobs.
fn request(i: usize) -> Value {
    let questions = [
        "What is a lantern?",
        "Name a river.",
        "Why is copper useful?",
        "Describe winter.",
    ];
    let mut body = json!({
        "messages": [
            {"role": "system", "content": system_prompt()},
            {"role": "user", "content": questions[i % questions.len()]},
        ],
        "max_tokens": 12,
        "logprobs": true,
        "top_logprobs": 3,
    });
    if i.is_multiple_of(2) {
        body["temperature"] = json!(0);
    } else {
        body["temperature"] = json!(0.8);
        body["seed"] = json!(7 + i);
    }
    if i % 4 == 3 {
        body["n"] = json!(2);
    }
    body
}

/// The response's choices as sent (text, logprobs, finish reasons) and how
/// many prompt tokens came from the cache.
fn ask(s: &Server, body: &Value) -> (String, u64) {
    let r = s.post("/v1/chat/completions", body);
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    let cached = v["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .expect("usage.prompt_tokens_details.cached_tokens");
    (v["choices"].to_string(), cached)
}

#[test]
fn cached_prefixes_give_the_same_bytes_as_no_cache() {
    let cold = Server::start(&["smollm2", "--prefix-cache-mib", "0"]);
    let warm = Server::start(&["smollm2"]);
    let expect: Vec<String> = (0..8)
        .map(|i| {
            let (c, cached) = ask(&cold, &request(i));
            assert_eq!(cached, 0, "no cache, nothing cached");
            c
        })
        .collect();
    let prompt_tokens = warm.post("/v1/chat/completions", &request(0)).json()["usage"]
        ["prompt_tokens"]
        .as_u64()
        .unwrap();
    assert!(prompt_tokens > 300, "{prompt_tokens}");
    // Every request after the first finds at least the system prompt.
    for round in 0..2 {
        for (i, e) in expect.iter().enumerate() {
            let (c, cached) = ask(&warm, &request(i));
            assert_eq!(&c, e, "request {i}, round {round}");
            assert!(cached >= 300, "request {i}: {cached} cached");
        }
    }
    // The same request again reuses all of its prompt's whole blocks but
    // the one holding its last token.
    let (c, cached) = ask(&warm, &request(0));
    assert_eq!(c, expect[0]);
    assert_eq!(cached, (prompt_tokens - 1) / 16 * 16);
    assert!(warm.metric("ferrite_prompt_cached_tokens_total") >= 16.0 * 300.0);
    assert!(warm.metric("ferrite_prefix_cache_bytes") > 0.0);

    // A second turn holds the first turn's prompt and reply: both are in
    // the cache (the reply's tokens from the first turn's decoding).
    let mut turn = request(0);
    turn["max_tokens"] = json!(24);
    let first = warm.post("/v1/chat/completions", &turn).json();
    let reply = first["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_string();
    let first_prompt = first["usage"]["prompt_tokens"].as_u64().unwrap();
    turn["messages"].as_array_mut().unwrap().extend([
        json!({"role": "assistant", "content": reply}),
        json!({"role": "user", "content": "And another?"}),
    ]);
    let (c, cached) = ask(&warm, &turn);
    assert_eq!(c, ask(&cold, &turn).0);
    assert!(
        cached >= first_prompt / 16 * 16,
        "{cached} of a first prompt of {first_prompt}"
    );
    eprintln!("second turn: {cached} tokens cached, first prompt {first_prompt}");
}

#[test]
fn concurrent_requests_sharing_a_prefix_and_a_tiny_budget() {
    let cold = Server::start(&["smollm2", "--prefix-cache-mib", "0"]);
    // SmolLM2 keeps 23,040 bytes per position: 1 MiB holds two blocks.
    let tiny = Server::start(&["smollm2", "--prefix-cache-mib", "1"]);
    let warm = Server::start(&["smollm2"]);
    let expect: Vec<String> = (0..8).map(|i| ask(&cold, &request(i)).0).collect();
    for s in [&warm, &tiny] {
        for wave in 0..2 {
            let got: Vec<(String, u64)> = std::thread::scope(|scope| {
                let hs: Vec<_> = (0..8)
                    .map(|i| scope.spawn(move || ask(s, &request(i))))
                    .collect();
                hs.into_iter().map(|h| h.join().unwrap()).collect()
            });
            for (i, (c, _)) in got.iter().enumerate() {
                assert_eq!(c, &expect[i], "request {i}, wave {wave}");
            }
            if wave == 1 {
                assert!(
                    got.iter().all(|g| g.1 >= 16),
                    "{:?}",
                    got.iter().map(|g| g.1).collect::<Vec<_>>()
                );
            }
        }
    }
    assert!(warm.metric("ferrite_prefix_cache_evicted_blocks_total") == 0.0);
    // The shared chain is never evicted for its own next block (a parent
    // goes only after its children): two blocks stay cached.
    assert_eq!(
        tiny.metric("ferrite_prefix_cache_evicted_blocks_total"),
        0.0
    );
    // Distinct prompts through the tiny cache: still the same bytes.
    for i in 0..6 {
        let body = json!({"prompt": format!("{} Story number {i}:", "word ".repeat(40 + 10 * i)),
                          "max_tokens": 8, "temperature": 0, "logprobs": 2});
        let a = cold.post("/v1/completions", &body).json();
        let b = tiny.post("/v1/completions", &body).json();
        assert_eq!(
            a["choices"].to_string(),
            b["choices"].to_string(),
            "prompt {i}"
        );
    }
}

/// The process's resident memory, in bytes.
fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS in /proc/PID/status");
    kib << 10
}

#[test]
fn choices_sharing_the_prompts_blocks_give_the_bits_of_separate_requests() {
    for args in [&["smollm2", "--prefix-cache-mib", "0"][..], &["smollm2"]] {
        let s = Server::start(args);
        // Sampled (temperature 0.8, seed 8) with logprobs; choice i draws
        // with seed 8 + i, so it must be the request with that seed.
        let mut body = request(1);
        body["n"] = json!(4);
        let together = s.post("/v1/chat/completions", &body).json();
        let choices = together["choices"].as_array().unwrap();
        assert_eq!(choices.len(), 4);
        let mut texts = Vec::new();
        for (i, c) in choices.iter().enumerate() {
            let mut one = request(1);
            one["seed"] = json!(8 + i);
            let alone = s.post("/v1/chat/completions", &one).json();
            let a = &alone["choices"][0];
            assert_eq!(c["index"], i);
            for key in ["message", "logprobs", "finish_reason"] {
                assert_eq!(c[key], a[key], "{args:?}: choice {i}, {key}");
            }
            texts.push(c["message"]["content"].to_string());
        }
        texts.dedup();
        assert!(texts.len() > 1, "the seeds give different replies");
        // Every block went back to the pool but the prefix cache's.
        assert_eq!(
            s.metric("ferrite_kv_pool_bytes"),
            s.metric("ferrite_prefix_cache_bytes"),
            "{args:?}"
        );
    }
}

#[test]
fn a_burst_of_n16_requests_gives_its_memory_back() {
    let s = Server::start(&["smollm2", "--prefix-cache-mib", "0"]);
    let body = |n: usize, seed: usize| {
        let mut b = request(1);
        b["n"] = json!(n);
        b["seed"] = json!(seed);
        b["max_tokens"] = json!(48);
        b
    };
    assert_eq!(s.post("/v1/chat/completions", &body(1, 0)).status, 200);
    let before = rss_bytes(s.pid());
    let s = &s;
    let peak = std::thread::scope(|scope| {
        let hs: Vec<_> = (0..4)
            .map(|r| scope.spawn(move || s.post("/v1/chat/completions", &body(16, 100 * r))))
            .collect();
        let mut peak = 0u64;
        while !hs.iter().all(|h| h.is_finished()) {
            peak = peak.max(rss_bytes(s.pid()));
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        for h in hs {
            let r = h.join().unwrap();
            assert_eq!(r.status, 200, "{}", r.text());
            assert_eq!(r.json()["choices"].as_array().unwrap().len(), 16);
        }
        peak
    });
    assert_eq!(s.metric("ferrite_kv_pool_bytes"), 0.0);
    // Freed memory goes back to the system once the scheduler is idle.
    let bound = before + (16 << 20);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut after = rss_bytes(s.pid());
    while after > bound && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
        after = rss_bytes(s.pid());
    }
    let mib = |b: u64| b >> 20;
    eprintln!(
        "RSS before {} MiB, peak {} MiB, after {} MiB",
        mib(before),
        mib(peak),
        mib(after)
    );
    assert!(
        after <= bound,
        "RSS before {} MiB, after {} MiB",
        mib(before),
        mib(after)
    );
}
