//! `ferrite serve --lookup` changes no output: the same requests (greedy
//! and seeded sampling, penalties, a JSON schema, stop strings, `n` = 2,
//! logprobs, chat and text, one at a time and all at once) give the same
//! JSON bodies from a server with prompt-lookup speculation as from one
//! without, on real models, one of them (Gemma 3) with sliding-window
//! layers whose ring caches limit how far a rejected draft can be rolled
//! back. The metrics prove drafts were both accepted and rejected, and a
//! request with `"speculate": false` drafts nothing.

mod serve_common;

use serde_json::{json, Value};
use serve_common::Server;

/// A passage the replies are asked to quote (so lookup drafts well).
const PASSAGE: &str = "The lighthouse keeper climbed the stairs at dusk. He trimmed \
the wick, wiped the lens, and wrote the time in the log: seven minutes past six. \
Ships passed in the night, and the beam turned, and turned, and turned again.";

/// Request bodies (path, body) covering the sampler's paths.
fn requests() -> Vec<(&'static str, Value)> {
    let quote = format!("Repeat this text exactly, word for word:\n\n{PASSAGE}");
    let chat = |content: &str| json!({"messages": [{"role": "user", "content": content}]});
    let mut out = Vec::new();
    // Greedy quoting: much is accepted.
    let mut b = chat(&quote);
    b["max_tokens"] = json!(60);
    b["temperature"] = json!(0);
    out.push(("/v1/chat/completions", b));
    // Seeded sampling with top-k/top-p/min-p and a repeat penalty, two
    // choices, logprobs.
    let mut b = chat(&quote);
    b["max_tokens"] = json!(40);
    b["temperature"] = json!(0.8);
    b["top_k"] = json!(40);
    b["top_p"] = json!(0.9);
    b["min_p"] = json!(0.05);
    b["repeat_penalty"] = json!(1.1);
    b["seed"] = json!(7);
    b["n"] = json!(2);
    b["logprobs"] = json!(true);
    b["top_logprobs"] = json!(3);
    out.push(("/v1/chat/completions", b));
    // A stop string inside the quoted text.
    let mut b = chat(&quote);
    b["max_tokens"] = json!(60);
    b["temperature"] = json!(0);
    b["stop"] = json!(["wrote"]);
    out.push(("/v1/chat/completions", b));
    // A JSON schema.
    let mut b = chat(&format!(
        "Give the keeper's log entry of this text as JSON.\n\n{PASSAGE}"
    ));
    b["max_tokens"] = json!(50);
    b["temperature"] = json!(0);
    b["response_format"] = json!({"type": "json_schema", "json_schema": {"name": "log", "schema": {
        "type": "object",
        "properties": {"time": {"type": "string"}, "task": {"type": "string"}},
        "required": ["time", "task"]
    }}});
    out.push(("/v1/chat/completions", b));
    // Text completion of a repetitive prompt, little to quote at first.
    out.push((
        "/v1/completions",
        json!({"prompt": format!("{PASSAGE}\n\n{PASSAGE}\n\nThe lighthouse"),
               "max_tokens": 40, "temperature": 0}),
    ));
    // Open text: drafts mostly rejected.
    out.push((
        "/v1/completions",
        json!({"prompt": "Once upon a time, in a country far away,", "max_tokens": 30,
               "temperature": 0.9, "seed": 3}),
    ));
    out
}

/// The body of a reply, without what differs between any two runs or
/// orders of requests.
fn body(s: &Server, path: &str, b: &Value) -> Value {
    let r = s.post(path, b);
    assert_eq!(r.status, 200, "{}", r.text());
    let mut v = r.json();
    let o = v.as_object_mut().expect("an object");
    for k in ["id", "created", "system_fingerprint"] {
        o.remove(k);
    }
    // How much of the prompt came from the prefix cache depends on which
    // requests ran before.
    if let Some(u) = o.get_mut("usage").and_then(Value::as_object_mut) {
        u.remove("prompt_tokens_details");
    }
    v
}

/// Every request one at a time, then all at once, on `s`.
fn replies(s: &Server, reqs: &[(&'static str, Value)]) -> (Vec<Value>, Vec<Value>) {
    let alone: Vec<Value> = reqs.iter().map(|(p, b)| body(s, p, b)).collect();
    let together = std::thread::scope(|scope| {
        let handles: Vec<_> = reqs
            .iter()
            .map(|(p, b)| scope.spawn(move || body(s, p, b)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a request thread"))
            .collect::<Vec<_>>()
    });
    (alone, together)
}

fn check_model(model: &str) {
    let reqs = requests();
    let plain = Server::start(&[model]);
    let (want, want_together) = replies(&plain, &reqs);
    assert_eq!(
        want, want_together,
        "{model}: plain server, alone vs together"
    );
    drop(plain);

    let spec = Server::start(&[model, "--lookup"]);
    let (alone, together) = replies(&spec, &reqs);
    for (i, (w, got)) in want.iter().zip(&alone).enumerate() {
        assert_eq!(w, got, "{model}: request {i} alone, with --lookup");
    }
    for (i, (w, got)) in want.iter().zip(&together).enumerate() {
        assert_eq!(
            w, got,
            "{model}: request {i} among the others, with --lookup"
        );
    }
    let drafted = spec.metric("ferrite_speculative_drafted_tokens_total");
    let accepted = spec.metric("ferrite_speculative_accepted_tokens_total");
    assert!(
        accepted > 0.0,
        "{model}: no draft accepted ({drafted} drafted)"
    );
    assert!(
        accepted < drafted,
        "{model}: every draft accepted ({drafted})"
    );
    let ratio = spec.metric("ferrite_speculative_acceptance_ratio");
    assert!((ratio - accepted / drafted).abs() < 1e-9, "{ratio}");

    // The same quoting request opted out: no draft, the same reply.
    let (path, mut b) = reqs[0].clone();
    b["speculate"] = json!(false);
    assert_eq!(body(&spec, path, &b), want[0], "{model}: speculate false");
    assert_eq!(
        spec.metric("ferrite_speculative_drafted_tokens_total"),
        drafted,
        "{model}: a request with speculate false drafted"
    );
}

#[test]
fn lookup_changes_no_reply_smollm2() {
    check_model("smollm2");
}

/// Gemma 3's sliding-window layers keep ring caches: a draft is never
/// longer than the ring lets the cache roll back.
#[test]
fn lookup_changes_no_reply_gemma3() {
    check_model("gemma3-270m");
}

#[test]
fn bad_speculation_flags_are_refused() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ferrite"))
        .args(["serve", "smollm2", "--draft-max", "4"])
        .output()
        .expect("run ferrite");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--draft-max needs --lookup"), "{err}");
}
