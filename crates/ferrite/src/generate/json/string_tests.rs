//! Issue 51: `minLength` / `maxLength` (in Unicode characters) and
//! `format` (`date`, `time`, `date-time`, `uuid`, `email`) are enforced:
//! random and stalling outputs, byte by byte and through a real
//! vocabulary's mask, all validate under the `jsonschema` crate with
//! format validation on; hostile values get a clear error.

use serde_json::{json, Value};

use super::random_tests::Rng;
use super::*;

/// An object schema with one property of each new kind.
fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "short": {"type": "string", "maxLength": 3},
            "long": {"type": "string", "minLength": 5},
            "between": {"type": "string", "minLength": 2, "maxLength": 4},
            "exact": {"type": "string", "minLength": 3, "maxLength": 3},
            "empty": {"type": "string", "maxLength": 0},
            "huge": {"type": "string", "maxLength": 1_000_000_000u64},
            "maybe": {"type": ["string", "null"], "minLength": 1, "maxLength": 2},
            "day": {"type": "string", "format": "date"},
            "clock": {"type": "string", "format": "time"},
            "stamp": {"type": "string", "format": "date-time"},
            "id": {"type": "string", "format": "uuid"},
            "mail": {"type": "string", "format": "email"},
        },
        "required": ["short", "long", "between", "exact", "empty", "day", "clock", "stamp", "id", "mail"]
    })
}

fn validator(schema: &Value) -> jsonschema::Validator {
    jsonschema::options()
        .should_validate_formats(true)
        .build(schema)
        .unwrap()
}

fn accepts(g: &Grammar, text: &str) -> bool {
    let mut s = JsonState::new(g);
    s.feed_all(g, text.as_bytes()) && s.is_done()
}

/// Random bytes among those allowed, including multi-byte characters and
/// escapes (a length counts each as one character); `stall` avoids the
/// closing quote and brace while anything else is allowed.
fn drive(g: &Grammar, rng: &mut Rng, stall: bool) -> String {
    // Byte sequences tried as units: ASCII, 2-, 3- and 4-byte characters,
    // escapes (a surrogate pair among them).
    let units: Vec<Vec<u8>> = (0x20u8..0x7f)
        .map(|b| vec![b])
        .chain(["é", "日", "😀", "\\n", "\\u00e9", "\\ud83d\\ude00", "\\\""].map(|u| u.as_bytes().to_vec()))
        .collect();
    let mut s = JsonState::new(g);
    let mut out = Vec::new();
    while !s.is_done() {
        let allowed: Vec<&Vec<u8>> = units.iter().filter(|u| s.clone().feed_all(g, u)).collect();
        assert!(!allowed.is_empty(), "stuck after {}", String::from_utf8_lossy(&out));
        let open: Vec<&Vec<u8>> = allowed
            .iter()
            .copied()
            .filter(|u| !matches!(u[0], b'"' | b'}' | b','))
            .collect();
        let pool = if stall && !open.is_empty() { open } else { allowed };
        let u = pool[rng.below(pool.len())];
        assert!(s.feed_all(g, u));
        out.extend_from_slice(u);
        assert!(out.len() < 1 << 16, "no end in sight");
    }
    String::from_utf8(out).expect("UTF-8")
}

#[test]
fn lengths_and_formats_hold_for_random_and_stalling_text() {
    let schema = schema();
    let g = Grammar::from_schema(&schema).unwrap();
    let v = validator(&schema);
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let mut longest = 0;
    for round in 0..400 {
        let text = drive(&g, &mut rng, round % 2 == 1);
        let value: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
        assert!(v.is_valid(&value), "{text} does not validate");
        longest = longest.max(value["huge"].as_str().map_or(0, |h| h.chars().count()));
    }
    // `maxLength` 10^9 is bounded by the cap on a string's length (256
    // bytes as written, an escape counting one).
    assert!((100..=256).contains(&longest), "{longest}");
}

/// The same through the mask over Qwen2.5's 151k tokens (multi-byte
/// tokens, tokens holding a quote), with random logits.
#[test]
fn lengths_and_formats_hold_through_a_real_vocabulary() {
    let tok = super::random_schemas::real_tokenizer("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf");
    let schema = schema();
    let mut g = Grammar::from_schema(&schema).unwrap();
    // Short free strings keep the test quick (a date-time is 20 bytes).
    g.max_string = 40;
    let v = validator(&schema);
    let n = tok.vocab_size();
    let mut rng = Rng(77);
    for round in 0..6 {
        let stall = round % 2 == 1;
        let mut s = JsonState::new(&g);
        let mut out = Vec::new();
        loop {
            let mut logits: Vec<f32> = (0..n)
                .map(|id| {
                    let r = (rng.next() % 1000) as f32 / 100.0;
                    let closes = tok.token_bytes(id as u32).iter().any(|b| b"\"},".contains(b))
                        || tok.is_end_of_generation(id as u32);
                    if stall && closes { r - 100.0 } else { r }
                })
                .collect();
            assert!(mask_logits(&g, &s, &tok, &[], &mut logits), "stuck after {}", String::from_utf8_lossy(&out));
            let best = (0..n).max_by(|&a, &b| logits[a].total_cmp(&logits[b])).unwrap() as u32;
            if tok.is_end_of_generation(best) {
                assert!(s.can_end());
                break;
            }
            assert!(s.feed_all(&g, tok.token_bytes(best)));
            out.extend_from_slice(tok.token_bytes(best));
            assert!(out.len() < 1 << 16, "no end in sight");
        }
        let text = String::from_utf8(out).expect("UTF-8");
        let value: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
        assert!(v.is_valid(&value), "{text} does not validate");
    }
}

/// Lengths count characters, not bytes: an escape, a 4-byte character
/// and a surrogate pair are one each.
#[test]
fn lengths_count_characters() {
    let g = Grammar::from_schema(&json!({"type": "object", "properties": {
        "a": {"type": "string", "minLength": 2, "maxLength": 2}}, "required": ["a"]}))
    .unwrap();
    for ok in [r#"{"a": "ab"}"#, r#"{"a": "日本"}"#, r#"{"a": "😀\n"}"#, r#"{"a": "\ud83d\ude00x"}"#, r#"{"a": "\u00e9\""}"#] {
        assert!(accepts(&g, ok), "{ok}");
    }
    for bad in [r#"{"a": "a"}"#, r#"{"a": "abc"}"#, r#"{"a": "日"}"#, r#"{"a": "日本語"}"#, r#"{"a": ""}"#] {
        assert!(!accepts(&g, bad), "{bad}");
    }
}

#[test]
fn formats_refuse_what_is_not_one() {
    let g = Grammar::from_schema(&json!({"type": "object", "properties": {
        "d": {"type": "string", "format": "date"},
        "t": {"type": "string", "format": "date-time"},
        "u": {"type": "string", "format": "uuid"}}}))
    .unwrap();
    assert!(accepts(&g, r#"{"d": "2024-04-30", "t": "2024-01-31T23:59:59.5+05:30", "u": "123e4567-e89b-12d3-a456-426614174000"}"#));
    for bad in [r#"{"d": "2024-04-31"}"#, r#"{"d": "2024-13-01"}"#, r#"{"d": "24-01-01"}"#, r#"{"t": "2024-01-01T24:00:00Z"}"#, r#"{"t": "2024-01-01T10:00:00"}"#, r#"{"u": "123e4567e89b12d3a456426614174000"}"#] {
        assert!(!accepts(&g, bad), "{bad}");
    }
}

#[test]
fn hostile_lengths_and_formats_are_refused_clearly() {
    for (s, says) in [
        (json!({"type": "string", "minLength": 5, "maxLength": 2}), "minLength 5 is more than maxLength 2"),
        (json!({"type": "string", "minLength": 1_000_000_000u64}), "longest string ferrite writes"),
        (json!({"type": "string", "maxLength": -1}), "maxLength must be a non-negative integer"),
        (json!({"type": "string", "minLength": "3"}), "minLength must be a non-negative integer"),
        (json!({"type": "string", "format": "hostname"}), "'hostname' is not supported"),
        (json!({"type": "string", "format": 3}), "format must be a string"),
        (json!({"type": "string", "format": "date", "maxLength": 5}), "together with 'format'"),
        (json!({"type": "string", "pattern": "a+", "minLength": 2}), "together with 'pattern'"),
        (json!({"type": "string", "pattern": "a+", "format": "uuid"}), "'pattern' and 'format'"),
        (json!({"maxLength": 3}), "'maxLength' needs type string"),
        (json!({"maxLength": 3, "enum": ["a"]}), "'maxLength' needs type string"),
        (json!({"type": "string", "enum": ["a"], "maxLength": 3}), "'enum' together with 'maxLength'"),
        (json!({"anyOf": [{"type": "string"}], "format": "date"}), "'anyOf' together with 'format'"),
    ] {
        let s = json!({"type": "object", "properties": {"a": s}});
        let err = Grammar::from_schema(&s).err().unwrap_or_else(|| panic!("accepted: {s}")).to_string();
        assert!(err.contains(says) && err.contains("(at #/properties/a)"), "{s}: {err}");
    }
}
