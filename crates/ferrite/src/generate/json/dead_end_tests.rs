//! Issue 44, item 5: constrained output never dead-ends. Each case is one
//! that stopped mid-value (the machine took a byte after which nothing
//! could finish the text): a function without parameters, `"properties":
//! {}`, keys that need escapes, self-references (required, or through an
//! optional property past the nesting bound), lone surrogate escapes and
//! exponents no `f64` holds. Random walks over every byte the machine
//! allows must always reach the end, and what they write must parse and
//! validate.

use serde_json::{json, Value};

use super::random_tests::Rng;
use super::*;

/// A text `g` allows, byte by byte over all 256 byte values (each chosen
/// among the allowed ones; `stall`: never a closing byte while another
/// is allowed, so the bounds alone must end it). Panics if no byte is
/// allowed before the end.
pub(super) fn walk(g: &Grammar, rng: &mut Rng, stall: bool) -> Vec<u8> {
    let mut s = JsonState::new(g);
    let mut out = Vec::new();
    while !s.can_end() {
        let allowed: Vec<u8> = (0..=255u8).filter(|&b| s.clone().feed(g, b)).collect();
        assert!(
            !allowed.is_empty(),
            "dead end after {:?}",
            String::from_utf8_lossy(&out)
        );
        let open: Vec<u8> = allowed
            .iter()
            .copied()
            .filter(|b| !b"\"}],".contains(b))
            .collect();
        let pool = if stall && !open.is_empty() {
            open
        } else {
            allowed
        };
        let b = pool[rng.below(pool.len())];
        assert!(s.feed(g, b));
        out.push(b);
        assert!(out.len() < 1 << 20, "no end in sight");
    }
    out
}

/// Random and stalling walks over `schema`: each ends, parses and
/// validates.
fn walks_validate(schema: &Value, rounds: usize) {
    let g = Grammar::from_schema(schema).unwrap();
    let validator = jsonschema::validator_for(schema).unwrap();
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    for round in 0..rounds {
        let out = walk(&g, &mut rng, round % 2 == 1);
        let text = String::from_utf8(out).expect("UTF-8");
        let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
        assert!(validator.is_valid(&v), "{text} does not validate");
    }
}

fn accepts(g: &Grammar, text: &[u8]) -> bool {
    let mut s = JsonState::new(g);
    s.feed_all(g, text) && s.is_done()
}

/// `{"type": "object", "properties": {}}` stopped after `{\n    "`.
#[test]
fn no_properties_means_an_empty_object() {
    for schema in [
        json!({"type": "object", "properties": {}}),
        json!({"type": "object", "additionalProperties": false}),
        json!({"type": "object", "properties": {}, "additionalProperties": false}),
    ] {
        let g = Grammar::from_schema(&schema).unwrap();
        let mut s = JsonState::new(&g);
        assert!(s.feed_all(&g, b"{\n    "));
        assert!(!s.clone().feed(&g, b'"'), "{schema}: a key where none may come");
        assert!(s.feed(&g, b'}') && s.is_done());
        walks_validate(&schema, 20);
    }
}

/// A tool without parameters under `tool_choice: "required"` stopped at
/// `<tool_call>\n{"name": "f", "arguments": {"`.
#[test]
fn a_function_without_parameters_gets_empty_arguments() {
    let f = vec![
        ("f".to_string(), json!({"type": "object", "properties": {}})),
        ("g".to_string(), json!({"type": "object", "properties": {"x": {"type": "integer"}}})),
    ];
    let g = Grammar::tool_calls(&f, &CallSyntax::hermes(false), 1).unwrap();
    let mut s = JsonState::new(&g);
    assert!(s.feed_all(&g, b"<tool_call>\n{\"name\": \"f\", \"arguments\": {"));
    assert!(!s.clone().feed(&g, b'"'));
    assert!(s.feed_all(&g, b"}}\n</tool_call>") && s.can_end());
    let mut rng = Rng(7);
    for round in 0..40 {
        walk(&g, &mut rng, round % 2 == 1);
    }
}

/// Property names that JSON writes with escapes (a quote, a backslash,
/// control characters) or that are not ASCII stopped mid-key.
#[test]
fn keys_that_need_escapes_can_be_written() {
    let names = [
        "say \"hi\"",
        "back\\slash",
        "\"",
        "\\",
        "tab\there",
        "\u{1}ctl",
        "café",
        "日本",
        "a/b",
    ];
    let mut props = serde_json::Map::new();
    let mut value = serde_json::Map::new();
    for (i, n) in names.iter().enumerate() {
        props.insert(n.to_string(), json!({"type": "integer"}));
        value.insert(n.to_string(), json!(i));
    }
    let required: Vec<&str> = names.iter().step_by(2).copied().collect();
    let schema = json!({"type": "object", "properties": props, "required": required});
    let g = Grammar::from_schema(&schema).unwrap();
    let text = serde_json::to_string(&Value::Object(value)).unwrap();
    assert!(accepts(&g, text.as_bytes()), "{text}");
    // An escaped quote does not end the key.
    let mut s = JsonState::new(&g);
    assert!(s.feed_all(&g, br#"{"say \""#) && !s.clone().feed(&g, b':'));
    walks_validate(&schema, 60);
    // With other keys allowed too: those never take a backslash, and an
    // escape begun on a declared key is finished as that key.
    let mut open = schema.clone();
    open["additionalProperties"] = json!({"type": "boolean"});
    open["required"] = json!([]);
    let g = Grammar::from_schema(&open).unwrap();
    let mut s = JsonState::new(&g);
    assert!(s.feed_all(&g, br#"{"say \"#));
    assert!(!s.clone().feed(&g, b'x'), "an invalid escape");
    walks_validate(&open, 60);
}

/// A required self-reference has no finite value: refused, naming the
/// property (it used to be accepted, then stopped mid-object).
#[test]
fn unfinishable_schemas_are_refused() {
    for (schema, says) in [
        (
            json!({"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]}),
            "'/a",
        ),
        (
            json!({"$defs": {"n": {"type": "object", "properties": {"next": {"$ref": "#/$defs/n"}},
                "required": ["next"]}},
                "type": "object", "properties": {"head": {"$ref": "#/$defs/n"}}, "required": ["head"]}),
            "'/head/next",
        ),
        (
            json!({"type": "object", "properties": {"a": {"type": "array", "minItems": 1,
                "items": {"$ref": "#"}}}, "required": ["a"]}),
            "'/a/items",
        ),
    ] {
        // Refused with where: the grammar check (`check.rs`, first)
        // names the schema pointer, the feasibility pass the property path.
        let err = Grammar::from_schema(&schema).unwrap_err().to_string();
        assert!(
            err.contains(says) || err.contains("fits within 12 levels of nesting (a $ref cycle"),
            "{schema}: {err}"
        );
    }
    // Nesting deeper than the bound, without recursion.
    let mut deep = json!({"type": "integer"});
    for _ in 0..14 {
        deep = json!({"type": "object", "properties": {"x": deep}, "required": ["x"]});
    }
    assert!(Grammar::from_schema(&deep).is_err());
    let f = vec![(
        "f".to_string(),
        json!({"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]}),
    )];
    let err = Grammar::tool_calls(&f, &CallSyntax::hermes(false), 0)
        .unwrap_err()
        .to_string();
    assert!(err.contains("function 'f'"), "{err}");
}

/// Self-references that can end (optional, behind `anyOf` with a base
/// case, in arrays): near the bound only what can be closed is offered.
#[test]
fn recursion_ends_at_the_bound() {
    for schema in [
        // A linked list: past the bound, `next` is not offered.
        json!({"type": "object", "properties": {"v": {"type": "integer"}, "next": {"$ref": "#"}},
            "required": ["v"]}),
        // A required property that is itself or null.
        json!({"type": "object", "properties": {"a": {"anyOf": [{"$ref": "#"}, {"type": "null"}]}},
            "required": ["a"]}),
        // An optional array that needs an item.
        json!({"type": "object", "properties": {"kids": {"type": "array", "minItems": 1,
            "items": {"$ref": "#"}}, "n": {"type": "integer"}}}),
        // A map of itself.
        json!({"type": "object", "additionalProperties": {"$ref": "#"}}),
    ] {
        Grammar::from_schema(&schema).unwrap();
        walks_validate(&schema, 40);
    }
}

/// `\ud800` alone does not parse (serde_json refuses a lone surrogate),
/// nor does `1e999` (no `f64` holds it).
#[test]
fn strings_and_numbers_always_parse() {
    let schema = json!({"type": "object", "properties": {
        "s": {"type": "string"}, "n": {"type": "number"}}});
    let g = Grammar::from_schema(&schema).unwrap();
    assert!(accepts(&g, br#"{"s": "\ud83d\ude00\u00e9", "n": 1e99}"#));
    let mut s = JsonState::new(&g);
    assert!(s.feed_all(&g, br#"{"s": "\ud800"#));
    assert!(!s.clone().feed(&g, b'"') && !s.clone().feed(&g, b'x'));
    assert!(s.feed_all(&g, br#"\udc00""#));
    for bad in [&br#"{"s": "\udc"#[..], br#"{"s": "\ud800\u0041"#, br#"{"n": 1e999"#] {
        let mut s = JsonState::new(&g);
        assert!(!s.feed_all(&g, bad), "{}", String::from_utf8_lossy(bad));
    }
    walks_validate(&schema, 200);
}
