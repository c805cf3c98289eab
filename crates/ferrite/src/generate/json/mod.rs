//! Constrained decoding for `response_format` `json_object` and
//! `json_schema`: before each token is sampled, every token whose bytes
//! cannot continue a JSON text the grammar allows gets logit -inf; once
//! the value is complete only end-of-generation tokens remain. So a reply
//! that ends by itself always parses and matches the schema (one cut by
//! `max_tokens` ends with finish_reason `length`, as OpenAI's do).

mod check;
pub mod feasible;
pub mod grammar;
pub mod machine;
pub mod number;
mod one_of;
pub mod regex;
pub mod schema;
mod string;
pub mod trie;
pub mod vocab;

pub use machine::JsonState;

#[cfg(test)]
mod dead_end_tests;
#[cfg(test)]
mod hostile_tests;
#[cfg(test)]
mod random_schemas;
#[cfg(test)]
mod random_tests;
pub use grammar::{CallSyntax, Grammar};

use crate::tokenize::Tokenizer;

/// Sets to -inf the logits of tokens that may not come next in `state`;
/// the tokenizer's end-of-generation tokens and `extra_ends` end
/// generation. Returns whether any token is left.
///
/// A token may come next when the machine takes all its bytes (so, by the
/// machine's construction, the text can still be finished after it); an
/// end token when the text may end; a control token only if it is one of
/// the grammar's markers. The tokens are walked as a byte trie
/// ([`vocab::VocabIndex`], built once per tokenizer), so a prefix is fed
/// once for all the tokens that share it, and a refused byte rules out
/// every token through it.
pub fn mask_logits(
    g: &Grammar,
    state: &JsonState,
    tok: &Tokenizer,
    extra_ends: &[u32],
    logits: &mut [f32],
) -> bool {
    let index = tok.json_index();
    let mut allowed = vec![0u64; logits.len().div_ceil(64)];
    allowed_tokens(g, state, index, &mut allowed);
    for &id in &index.control {
        if is_marker(g, tok, id) && state.clone().feed_all(g, tok.token_bytes(id)) {
            set_bit(&mut allowed, id, true);
        }
    }
    let done = state.can_end();
    for id in tok.end_of_generation_ids().chain(extra_ends.iter().copied()) {
        set_bit(&mut allowed, id, done);
    }
    let mut any = false;
    for (id, logit) in logits.iter_mut().enumerate() {
        if allowed[id / 64] >> (id % 64) & 1 == 1 {
            any |= *logit != f32::NEG_INFINITY;
        } else {
            *logit = f32::NEG_INFINITY;
        }
    }
    any
}

fn set_bit(bits: &mut [u64], id: u32, on: bool) {
    if let Some(w) = bits.get_mut(id as usize / 64) {
        if on {
            *w |= 1 << (id % 64);
        } else {
            *w &= !(1 << (id % 64));
        }
    }
}

/// Sets the bits of the non-control tokens whose bytes `state` takes.
fn allowed_tokens(g: &Grammar, state: &JsonState, index: &vocab::VocabIndex, bits: &mut [u64]) {
    // One state per depth of the walk, reused (cloning into them does not
    // allocate once they are grown).
    let mut states = vec![state.clone()];
    match state.string_room(g) {
        // Inside a string: plain text fits when short enough (set the
        // fitting ones, or all and clear the others: whichever are
        // fewer); the other tokens (quotes, escapes, partial characters)
        // are walked.
        Some(room) => {
            let plain = &index.plain;
            let fit = plain.partition_point(|&(len, _)| len as usize <= room);
            if fit <= plain.len() / 2 {
                for &(_, id) in &plain[..fit] {
                    set_bit(bits, id, true);
                }
            } else {
                for (w, p) in bits.iter_mut().zip(&index.plain_bits) {
                    *w |= p;
                }
                for &(_, id) in &plain[fit..] {
                    set_bit(bits, id, false);
                }
            }
            visit(g, &index.rest, 0, 0, &mut states, bits);
        }
        None => visit(g, &index.all, 0, 0, &mut states, bits),
    }
}

/// Feeds each child byte of trie node `node` to `states[depth]` (a copy,
/// in `states[depth + 1]`): where it is taken, the tokens ending there are
/// allowed and the walk goes on below.
fn visit(
    g: &Grammar,
    trie: &vocab::ByteTrie,
    node: u32,
    depth: usize,
    states: &mut Vec<JsonState>,
    bits: &mut [u64],
) {
    if states.len() == depth + 1 {
        let s = states[depth].clone();
        states.push(s);
    }
    for &(b, child) in trie.children(node) {
        let (done, next) = states.split_at_mut(depth + 1);
        let s = &mut next[0];
        s.clone_from(&done[depth]);
        if !s.feed(g, b) {
            continue;
        }
        for &id in trie.ids(child) {
            set_bit(bits, id, true);
        }
        if !trie.children(child).is_empty() {
            visit(g, trie, child, depth + 1, states, bits);
        }
    }
}

/// The mask as it was computed before [`vocab::VocabIndex`] (main's code
/// of issue 44's time): token by token, with a first-byte filter. The
/// tests check that both allow the same tokens, and time them.
#[cfg(test)]
pub(crate) fn mask_logits_by_token(
    g: &Grammar,
    state: &JsonState,
    tok: &Tokenizer,
    is_end: &dyn Fn(u32) -> bool,
    logits: &mut [f32],
) -> bool {
    let done = state.can_end();
    // Which single bytes may come next: most tokens fail on their first.
    let mut first = [false; 256];
    for (b, ok) in first.iter_mut().enumerate() {
        *ok = state.clone().feed(g, b as u8);
    }
    // Inside a string, a token of plain bytes (whole UTF-8 characters)
    // that fits is allowed as is.
    let room = state.string_room(g);
    let plain = |bytes: &[u8]| room.is_some_and(|r| bytes.len() <= r) && vocab::is_plain(bytes);
    let mut any = false;
    for (id, logit) in logits.iter_mut().enumerate() {
        let id = id as u32;
        let allowed = if is_end(id) {
            done
        } else if tok.is_control(id) && !is_marker(g, tok, id) {
            false
        } else {
            let bytes = tok.token_bytes(id);
            match bytes.split_first() {
                None => false,
                Some((&b, rest)) => {
                    first[b as usize]
                        && (rest.is_empty()
                            || plain(bytes)
                            || state
                                .pattern_accepts(g, bytes)
                                .unwrap_or_else(|| state.clone().feed_all(g, bytes)))
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

/// Whether control token `id` is one of the texts the grammar writes.
fn is_marker(g: &Grammar, tok: &Tokenizer, id: u32) -> bool {
    let bytes = tok.token_bytes(id);
    g.markers.iter().any(|m| m.as_bytes() == bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

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
            r#"{"age": 3, "name": "Al", "pet": "dog", "tags": [], "x": 1, "y": 2}"#,
            r#"{"age": 3, "pet": "dog"}"#,
            r#"{"name": "Al", "name": "Al"}"#,
        ] {
            assert!(!accepts(&g, bad), "{bad}");
        }
        // Properties not in `required` may be left out, in order still.
        for ok in [
            r#"{"age": 3, "name": "Al", "pet": "dog", "tags": []}"#,
            r#"{"name": "Al"}"#,
            r#"{"name": "Al", "x": null}"#,
            r#"{"age": 1, "name": "Al", "x": 2}"#,
        ] {
            assert!(accepts(&g, ok), "{ok}");
        }
    }

    /// `additionalProperties`: none by default and with `false`; with
    /// `true` or a schema, other keys after the declared ones, never one
    /// of theirs; without `properties`, a map.
    #[test]
    fn additional_properties() {
        let props = json!({"a": {"type": "integer"}, "ab": {"type": "string"}});
        let with = |extra: Option<Value>| {
            let mut s = json!({"type": "object", "properties": props, "required": ["a"]});
            if let Some(e) = extra {
                s["additionalProperties"] = e;
            }
            Grammar::from_schema(&s).unwrap()
        };
        for g in [with(None), with(Some(json!(false)))] {
            assert!(accepts(&g, r#"{"a": 1, "ab": "x"}"#));
            assert!(!accepts(&g, r#"{"a": 1, "z": 2}"#));
        }
        let g = with(Some(json!({"type": "boolean"})));
        assert!(accepts(
            &g,
            r#"{"a": 1, "ab": "x", "z": true, "zz": false}"#
        ));
        assert!(accepts(&g, r#"{"a": 1, "abc": true}"#));
        for bad in [
            r#"{"a": 1, "z": 2}"#,
            r#"{"z": true, "a": 1}"#,
            r#"{"a": 1, "z": true, "ab": "x"}"#,
            r#"{"a": 1, "a": true}"#,
            r#"{"a": 1, "": true}"#,
        ] {
            assert!(!accepts(&g, bad), "{bad}");
        }
        let g = with(Some(json!(true)));
        assert!(accepts(&g, r#"{"a": 1, "z": [1, {"q": null}]}"#));
        let map =
            json!({"type": "object", "additionalProperties": {"type": "integer", "maximum": 5}});
        let g = Grammar::from_schema(&map).unwrap();
        assert!(accepts(&g, r#"{"x": 1, "y": 5}"#) && accepts(&g, "{}"));
        assert!(!accepts(&g, r#"{"x": 6}"#));
        let none = json!({"type": "object", "additionalProperties": false});
        let g = Grammar::from_schema(&none).unwrap();
        assert!(accepts(&g, "{}") && !accepts(&g, r#"{"x": 1}"#));
    }

    /// Bounds on integers and floats, one-sided or not, and `pattern`.
    #[test]
    fn bounds_and_patterns() {
        let schema = json!({"type": "object", "properties": {
            "n": {"type": "integer", "minimum": 10},
            "f": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
            "code": {"type": "string", "pattern": "^[a-z]{3}[0-9]$"}
        }});
        let g = Grammar::from_schema(&schema).unwrap();
        assert!(accepts(&g, r#"{"n": 10, "f": 0.5, "code": "abc1"}"#));
        assert!(accepts(
            &g,
            r#"{"n": 123456789012345, "f": 0.999, "code": "xyz0"}"#
        ));
        for bad in [
            r#"{"n": 9}"#,
            r#"{"n": -10}"#,
            r#"{"f": 0}"#,
            r#"{"f": 1}"#,
            r#"{"f": 1e-3}"#,
            r#"{"code": "abcd"}"#,
            r#"{"code": "ab1"}"#,
            r#"{"code": "abc1 "}"#,
        ] {
            assert!(!accepts(&g, bad), "{bad}");
        }
        // A number must end in range: `0` cannot become `0.x` past the brace.
        let mut s = JsonState::new(&g);
        assert!(s.feed_all(&g, br#"{"f": 0"#) && !s.clone().feed(&g, b'}'));
    }

    #[test]
    fn unsupported_schemas_are_refused() {
        for (s, says) in [
            (
                json!({"type": "object", "properties": {"a": {"type": "string", "pattern": "(x)\\1"}}}),
                "'pattern' ('(x)\\1') is not supported: backreferences",
            ),
            (
                json!({"type": "object", "properties": {"a": {"type": "string", "format": "date"}}}),
                "'format'",
            ),
            (
                json!({"type": "object", "minProperties": 1}),
                "'minProperties'",
            ),
            (json!({"type": "string"}), "root"),
            (
                json!({"type": "object", "properties": {"a": {"type": "wat"}}}),
                "wat",
            ),
            (
                json!({"type": "object", "properties": {}, "required": ["b"], "additionalProperties": false}),
                "'b'",
            ),
            (json!({"$ref": "#/x"}), "#/x"),
            (
                json!({"$ref": "https://example.com/schema"}),
                "does not point",
            ),
            (
                json!({"type": "object", "properties": {"a": {"minimum": 0}}}),
                "needs a type",
            ),
            (
                json!({"type": "object", "properties": {"a": {"type": "integer", "minimum": 3, "maximum": 2}}}),
                "no integer",
            ),
            (
                json!({"type": "object", "properties": {"a": {"type": "number", "minimum": 1e20}}}),
                "no number of at most 15 digits",
            ),
            (
                json!({"type": "object", "properties": {"a": {"type": "string", "pattern": "^x{300}$"}}}),
                "shortest match",
            ),
        ] {
            let err = Grammar::from_schema(&s).unwrap_err().to_string();
            assert!(err.contains(says), "{s}: {err}");
        }
        // Patterns share one automaton budget.
        let many: serde_json::Map<String, Value> = (0..40)
            .map(|i| {
                (
                    format!("p{i}"),
                    json!({"type": "string", "pattern": "^[ab]*a[ab]{7}$"}),
                )
            })
            .collect();
        let s = json!({"type": "object", "properties": many});
        let err = Grammar::from_schema(&s).unwrap_err().to_string();
        assert!(err.contains("budget"), "{err}");
    }

    /// `$defs` and `$ref` as Pydantic writes nested models, including a
    /// recursive one (bounded: deep enough, the only way on is to close).
    #[test]
    fn refs_and_defs() {
        let schema = json!({
            "$defs": {
                "Pet": {"type": "object", "properties": {
                    "kind": {"enum": ["cat", "dog"]}, "age": {"type": "integer", "minimum": 0, "maximum": 30}},
                    "required": ["kind", "age"]},
                "Tree": {"type": "object", "properties": {
                    "v": {"const": 1}, "kids": {"type": "array", "items": {"$ref": "#/$defs/Tree"}}}}
            },
            "type": "object",
            "properties": {"pet": {"$ref": "#/$defs/Pet"}, "tree": {"$ref": "#/$defs/Tree"},
                           "maybe": {"anyOf": [{"$ref": "#/$defs/Pet"}, {"type": "null"}]}}
        });
        let g = Grammar::from_schema(&schema).unwrap();
        assert!(accepts(
            &g,
            r#"{"pet": {"kind": "cat", "age": 30}, "tree": {"v": 1, "kids": [{"v": 1, "kids": []}]}, "maybe": null}"#
        ));
        assert!(accepts(
            &g,
            r#"{"pet":{"kind":"dog","age":0},"tree":{"v":1,"kids":[]},"maybe":{"kind":"dog","age":7}}"#
        ));
        for bad in [
            r#"{"pet": {"kind": "cat", "age": 31}, "tree": {"v": 1, "kids": []}, "maybe": null}"#,
            r#"{"pet": {"kind": "cat", "age": -1}, "tree": {"v": 1, "kids": []}, "maybe": null}"#,
            r#"{"pet": {"kind": "cat", "age": 3}, "tree": {"v": 2, "kids": []}, "maybe": null}"#,
            r#"{"pet": {"kind": "cow", "age": 3}, "tree": {"v": 1, "kids": []}, "maybe": null}"#,
        ] {
            assert!(!accepts(&g, bad), "{bad}");
        }
        // Nesting past the bound cannot open another level.
        let mut deep = String::from(r#"{"pet":{"kind":"dog","age":1},"tree":"#);
        for _ in 0..20 {
            deep.push_str(r#"{"v":1,"kids":["#);
        }
        let mut s = JsonState::new(&g);
        assert!(!s.feed_all(&g, deep.as_bytes()));
    }

    /// An enum of 50,000 values: compiled once, and a state is as cheap to
    /// clone and feed as with two values; past the budget, refused.
    #[test]
    fn huge_enums_are_tries() {
        let values: Vec<String> = (0..50_000).map(|i| format!("value-{i}")).collect();
        let schema = json!({"type": "object", "properties": {"v": {"enum": values}}});
        let g = Grammar::from_schema(&schema).unwrap();
        assert!(accepts(&g, r#"{"v": "value-49999"}"#));
        assert!(accepts(&g, r#"{"v": "value-0"}"#));
        assert!(!accepts(&g, r#"{"v": "value-50000"}"#));
        assert!(!accepts(&g, r#"{"v": "value-"}"#));
        let mut s = JsonState::new(&g);
        assert!(s.feed_all(&g, br#"{"v": "value-1"#));
        let huge: Vec<String> = (0..200_000)
            .map(|i| format!("a-much-longer-value-{i}"))
            .collect();
        let schema = json!({"type": "object", "properties": {"v": {"enum": huge}}});
        let err = Grammar::from_schema(&schema).unwrap_err().to_string();
        assert!(err.contains("too large"), "{err}");
    }

    /// Function calls in Qwen2.5's format: the named function's schema
    /// governs its arguments; further calls only as many as allowed.
    #[test]
    fn tool_calls_follow_each_functions_schema() {
        let functions = vec![
            (
                "get_weather".to_string(),
                json!({"type": "object", "properties": {
                "city": {"type": "string"}, "unit": {"enum": ["c", "f"]}}, "required": ["city", "unit"]}),
            ),
            (
                "get_time".to_string(),
                json!({"type": "object", "properties": {
                "zone": {"type": "integer", "minimum": -12, "maximum": 14}}}),
            ),
        ];
        let g = Grammar::tool_calls(&functions, &CallSyntax::hermes(false), 1).unwrap();
        let one = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}}\n</tool_call>";
        let two = format!("{one}\n<tool_call>\n{{\"name\": \"get_time\", \"arguments\": {{\"zone\": -3}}}}\n</tool_call>");
        let ends = |text: &str| {
            let mut s = JsonState::new(&g);
            s.feed_all(&g, text.as_bytes()) && s.can_end()
        };
        assert!(ends(one));
        assert!(ends(&two));
        assert!(!ends(&format!("{two}\n<tool_call>")), "a third call");
        assert!(!ends(&one.replace("get_weather", "get_wether")));
        assert!(!ends(&one.replace("\"c\"", "\"k\"")));
        assert!(!ends(&two.replace("-3", "15")));
        assert!(!ends(&one[..one.len() - 3]));
        // After a reply opened the call itself.
        let g = Grammar::tool_calls(&functions, &CallSyntax::hermes(true), 0).unwrap();
        let mut s = JsonState::new(&g);
        assert!(s.feed_all(&g, &one.as_bytes()["<tool_call>".len()..]) && s.can_end());
        assert!(!s.clone().feed(&g, b'\n'));
    }
}
