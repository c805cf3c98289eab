//! Constrained decoding for `response_format` `json_object` and
//! `json_schema`: before each token is sampled, every token whose bytes
//! cannot continue a JSON text the grammar allows gets logit -inf; once
//! the value is complete only end-of-generation tokens remain. So a reply
//! that ends by itself always parses and matches the schema (one cut by
//! `max_tokens` ends with finish_reason `length`, as OpenAI's do).

pub mod machine;
pub mod schema;

pub use machine::JsonState;
pub use schema::Grammar;

use crate::tokenize::Tokenizer;

/// Sets to -inf the logits of tokens that may not come next in `state`;
/// `is_end(id)` says whether a token ends generation. Returns whether any
/// token is left.
pub fn mask_logits(
    g: &Grammar,
    state: &JsonState,
    tok: &Tokenizer,
    is_end: &dyn Fn(u32) -> bool,
    logits: &mut [f32],
) -> bool {
    let done = state.is_done();
    // Which single bytes may come next: most tokens fail on their first.
    let mut first = [false; 256];
    if !done {
        for (b, ok) in first.iter_mut().enumerate() {
            *ok = state.clone().feed(g, b as u8);
        }
    }
    // Inside a string, a token of plain bytes that fits is allowed as is.
    let room = state.string_room(g);
    let plain = |bytes: &[u8]| {
        room.is_some_and(|r| bytes.len() <= r)
            && bytes.iter().all(|&b| b >= 0x20 && b != b'"' && b != b'\\')
    };
    let mut any = false;
    for (id, logit) in logits.iter_mut().enumerate() {
        let id = id as u32;
        let allowed = if is_end(id) {
            done
        } else if done || tok.is_control(id) {
            false
        } else {
            let bytes = tok.token_bytes(id);
            match bytes.split_first() {
                None => false,
                Some((&b, rest)) => {
                    first[b as usize]
                        && (rest.is_empty() || plain(bytes) || state.clone().feed_all(g, bytes))
                }
            }
        };
        if allowed {
            any |= *logit != f32::NEG_INFINITY;
        } else {
            *logit = f32::NEG_INFINITY;
        }
    }
    any
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn accepts(g: &Grammar, text: &str) -> bool {
        let mut s = JsonState::new(g);
        s.feed_all(g, text.as_bytes()) && s.is_done()
    }

    #[test]
    fn any_object_accepts_json_objects_only() {
        let g = Grammar::any_object();
        assert!(accepts(
            &g,
            r#"{"a": [1, -2.5e3, true, null, {"b": "x\"y\u00e9"}], "c": {}}"#
        ));
        assert!(accepts(&g, "{}"));
        assert!(accepts(&g, "{\n  \"k\": 0\n}"));
        for bad in [
            "[1]",
            "{a:1}",
            "{\"a\":01}",
            "{\"a\":1,}",
            "{\"a\" 1}",
            "{\"a\":tru}",
            "{}x",
        ] {
            assert!(!accepts(&g, bad), "{bad}");
        }
        // Too much whitespace in a row is refused (a reply cannot stall).
        assert!(!accepts(&g, "{          }"));
    }

    #[test]
    fn schema_fixes_keys_types_and_order() {
        let schema = json!({"type": "object", "properties": {
            "age": {"type": "integer"},
            "name": {"type": "string"},
            "pet": {"enum": ["cat", "dog"]},
            "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
            "x": {"type": ["number", "null"]}
        }, "required": ["name"]});
        let g = Grammar::from_schema(&schema).unwrap();
        assert!(accepts(
            &g,
            r#"{"age": 3, "name": "Al", "pet": "dog", "tags": ["a"], "x": null}"#
        ));
        assert!(accepts(
            &g,
            r#"{"age":-1,"name":"","pet":"cat","tags":[],"x":2.5}"#
        ));
        for bad in [
            r#"{"age": 3.5, "name": "Al", "pet": "dog", "tags": [], "x": 1}"#,
            r#"{"name": "Al", "age": 3, "pet": "dog", "tags": [], "x": 1}"#,
            r#"{"age": 3, "name": "Al", "pet": "cow", "tags": [], "x": 1}"#,
            r#"{"age": 3, "name": "Al", "pet": "dog", "tags": ["a","b","c"], "x": 1}"#,
            r#"{"age": 3, "name": "Al", "pet": "dog", "tags": []}"#,
            r#"{"age": 3, "name": "Al", "pet": "dog", "tags": [], "x": 1, "y": 2}"#,
        ] {
            assert!(!accepts(&g, bad), "{bad}");
        }
    }

    #[test]
    fn unsupported_schemas_are_refused() {
        for s in [
            json!({"type": "object", "properties": {"a": {"type": "string", "pattern": "x"}}}),
            json!({"type": "string"}),
            json!({"type": "object", "properties": {"a": {"type": "wat"}}}),
            json!({"type": "object", "properties": {}, "required": ["b"]}),
            json!({"$ref": "#/x"}),
        ] {
            assert!(Grammar::from_schema(&s).is_err(), "{s}");
        }
    }
}
