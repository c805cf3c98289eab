//! Issue 44: a model whose chat template builds huge intermediate values
//! (a string doubled forty times reached 14 GB) served by `ferrite serve`.
//! The template sandbox's budget now covers data, so the request gets a
//! 400 naming the budget, and the server goes on answering.

mod serve_common;

use std::path::{Path, PathBuf};

use serde_json::json;
use serve_common::Server;

/// A copy of testdata's tiny Llama 3 directory whose chat template doubles
/// a string forty times (a terabyte without a bound).
fn hostile_model_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ferrite-hostile-tpl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/hf-decoders/tiny-llama3");
    for e in std::fs::read_dir(&src).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), dir.join(e.file_name())).unwrap();
    }
    std::fs::write(
        dir.join("chat_template.jinja"),
        "{% set ns = namespace(s='a') %}{% for i in range(40) %}\
         {% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}",
    )
    .unwrap();
    dir
}

#[test]
fn a_memory_hungry_template_gets_a_400_and_the_server_keeps_serving() {
    let dir = hostile_model_dir();
    let server = Server::start(&[dir.to_str().unwrap()]);
    let chat = json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4});
    for _ in 0..3 {
        let r = server.post("/v1/chat/completions", &chat);
        assert_eq!(r.status, 400, "{}", r.text());
        assert!(r.text().contains("budget"), "{}", r.text());
    }
    let plain = json!({"prompt": "Hello", "max_tokens": 4, "temperature": 0});
    let r = server.post("/v1/completions", &plain);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(server.get("/health").status, 200);
    drop(server);
    std::fs::remove_dir_all(&dir).unwrap();
}
