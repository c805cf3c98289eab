//! Fuzzes the chat-template sandbox: the input (as UTF-8, lossily) is a
//! template's source, rendered on a small fixed conversation with tools.
//! Any template must compile or fail, and render or fail, without a panic,
//! a hang, or memory past the sandbox's budget (about 64 MB of data for an
//! input this small; run with `-malloc_limit_mb` / `-rss_limit_mb`).

#![no_main]

use ferrite::generate::chat::ChatTemplate;
use libfuzzer_sys::fuzz_target;
use serde_json::json;

fuzz_target!(|data: &[u8]| {
    let source = String::from_utf8_lossy(data);
    let Ok(template) = ChatTemplate::new(&source, "<s>", "</s>") else {
        return;
    };
    let messages = [
        json!({"role": "system", "content": "Be brief."}),
        json!({"role": "user", "content": "What is 2 + 2?"}),
        json!({"role": "assistant", "content": "4", "tool_calls": [
            {"type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 2}}}
        ]}),
        json!({"role": "tool", "content": "4", "name": "add"}),
    ];
    let tools = json!([{"type": "function", "function": {
        "name": "add", "description": "Adds two numbers.",
        "parameters": {"type": "object", "properties": {
            "a": {"type": "number"}, "b": {"type": "number"}}}
    }}]);
    let _ = template.render_json(&messages, Some(&tools), true);
});
