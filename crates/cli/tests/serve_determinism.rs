//! Same bits under load: 64 concurrent requests to `ferrite serve` (real
//! SmolLM2; mixed greedy and seeded sampling, chat and text, prompt lengths
//! from a few tokens to a few hundred, streamed and not) give exactly the
//! texts the same requests give one at a time.

mod serve_common;

use serde_json::{json, Value};
use serve_common::{full_texts, stream_texts, Server};

const WORDS: [&str; 12] = [
    "river", "stone", "quiet", "engine", "purple", "market", "winter", "signal", "garden",
    "copper", "lantern", "orbit",
];

/// Request `i`: its path and body (non-streamed).
fn request(i: usize) -> (&'static str, Value) {
    let len = [3, 10, 40, 100, 200][i % 5];
    let text: Vec<&str> = (0..len)
        .map(|k| WORDS[(i * 7 + k * 5) % WORDS.len()])
        .collect();
    let text = text.join(" ");
    let mut body = if i.is_multiple_of(3) {
        json!({"messages": [{"role": "user", "content": format!("Summarize: {text}")}]})
    } else {
        json!({"prompt": text})
    };
    body["max_tokens"] = json!(8 + i % 9);
    if i.is_multiple_of(2) {
        body["temperature"] = json!(0);
    } else {
        body["temperature"] = json!(0.9);
        body["seed"] = json!(1000 + i);
        body["top_k"] = json!(50);
    }
    if i % 8 == 5 {
        body["n"] = json!(2);
    }
    let path = if i.is_multiple_of(3) {
        "/v1/chat/completions"
    } else {
        "/v1/completions"
    };
    (path, body)
}

fn texts(s: &Server, i: usize, stream: bool) -> Vec<String> {
    let (path, mut body) = request(i);
    if stream {
        body["stream"] = json!(true);
        let r = s.post(path, &body);
        assert_eq!(r.status, 200);
        stream_texts(&r.sse())
    } else {
        let r = s.post(path, &body);
        assert_eq!(r.status, 200, "{}", r.text());
        full_texts(&r.json())
    }
}

#[test]
fn sixty_four_at_once_equal_one_at_a_time() {
    let s = Server::start(&["smollm2"]);
    let alone: Vec<Vec<String>> = (0..64).map(|i| texts(&s, i, false)).collect();
    let done = std::sync::atomic::AtomicBool::new(false);
    let (together, most_running) = std::thread::scope(|scope| {
        // Samples how many sequences run at once while the 64 are in flight.
        let sampler = scope.spawn(|| {
            let mut most = 0.0f64;
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                most = most.max(s.metric("ferrite_running_sequences"));
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            most
        });
        let handles: Vec<_> = (0..64)
            .map(|i| {
                let s = &s;
                scope.spawn(move || texts(s, i, i % 4 == 1))
            })
            .collect();
        let together: Vec<Vec<String>> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        (together, sampler.join().unwrap())
    });
    for i in 0..64 {
        assert_eq!(together[i], alone[i], "request {i}: {:?}", request(i));
    }
    // They did run together (a sequence of each choice), and nothing is
    // left running.
    eprintln!("most sequences running at once: {most_running}");
    assert!(most_running >= 8.0, "{most_running}");
    assert_eq!(s.metric("ferrite_running_sequences"), 0.0);
    let distinct: std::collections::HashSet<&Vec<String>> = alone.iter().collect();
    assert!(distinct.len() > 32, "outputs too alike to prove anything");
}
