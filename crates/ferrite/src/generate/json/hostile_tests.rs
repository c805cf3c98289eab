//! Issue 44: hostile schemas get a clear error naming the keyword and
//! where it is, never a stack overflow, and every accepted keyword is
//! enforced.

use serde_json::{json, Value};

use super::*;

fn accepts(g: &Grammar, text: &str) -> bool {
    let mut s = JsonState::new(g);
    s.feed_all(g, text.as_bytes()) && s.is_done()
}

/// The error `schema` is refused with (panics if it is accepted).
fn refused(schema: &Value) -> String {
    match Grammar::from_schema(schema) {
        Ok(_) => panic!("accepted: {schema}"),
        Err(e) => e.to_string(),
    }
}

fn assert_refused(schema: &Value, says: &[&str]) {
    let err = refused(schema);
    for s in says {
        assert!(err.contains(s), "{schema}\n  error: {err}\n  lacks: {s}");
    }
}

/// Drives a value of `g` byte by byte, always taking the first allowed
/// byte of `prefer` (then any allowed one): with `prefer` opening
/// containers, it nests as deep as the machine lets it. Returns the text.
fn drive_greedy(g: &Grammar, prefer: &[u8]) -> String {
    let mut s = JsonState::new(g);
    let mut out = Vec::new();
    while !s.is_done() {
        let allowed = |b: u8| s.clone().feed(g, b);
        let b = prefer
            .iter()
            .copied()
            .find(|&b| allowed(b))
            .or_else(|| (0x20u8..0x7f).find(|&b| allowed(b)))
            .unwrap_or_else(|| panic!("stuck after {}", String::from_utf8_lossy(&out)));
        assert!(s.feed(g, b));
        out.push(b);
        assert!(out.len() < 100_000, "no end in sight");
    }
    String::from_utf8(out).expect("ASCII")
}

/// Item 1: `pattern` groups nested 1,000 deep overflowed the stack.
#[test]
fn deep_patterns_are_refused_with_the_path() {
    let deep = format!("{}a{}", "(".repeat(1000), ")".repeat(1000));
    let schema = json!({"type": "object", "properties": {"a": {"type": "string", "pattern": deep}}});
    assert_refused(
        &schema,
        &["'pattern'", "nests groups deeper than 64", "(at #/properties/a)"],
    );
    // 100,000 levels, unclosed: the same.
    let deeper = "(".repeat(100_000);
    let schema = json!({"type": "object", "properties": {"a": {"type": "string", "pattern": deeper}}});
    assert_refused(&schema, &["nests groups deeper than 64"]);
}

/// Item 1: schemas nested deeper than the compiler follows, by
/// properties, items, anyOf, type lists or `$ref` chains.
#[test]
fn deep_schemas_are_refused_with_the_path() {
    let mut s = json!({"type": "integer"});
    for _ in 0..40 {
        s = json!({"type": "object", "properties": {"a": s}});
    }
    let err = refused(&s);
    assert!(err.contains("nests deeper than 32"), "{err}");
    assert!(err.contains("#/properties/a/properties/a/"), "{err}");
    let mut s = json!({"type": "integer"});
    for _ in 0..40 {
        s = json!({"anyOf": [{"type": "null"}, {"type": "array", "items": s}]});
    }
    let s = json!({"type": "object", "properties": {"x": s}});
    assert_refused(&s, &["nests deeper than 32", "#/properties/x/anyOf/1/items/anyOf/1"]);
    // A chain of `$ref`s: errors name the definition they are in.
    let defs: serde_json::Map<String, Value> = (0..40)
        .map(|i| (format!("d{i}"), json!({"$ref": format!("#/$defs/d{}", i + 1)})))
        .collect();
    let s = json!({"type": "object", "properties": {"x": {"$ref": "#/$defs/d0"}}, "$defs": defs});
    assert_refused(&s, &["nests deeper than 32", "(at #/$defs/d"]);
}

/// Item 1: `enum` / `const` values a library caller built deeper than
/// serde_json would parse (printing them recurses).
#[test]
fn deep_enum_values_are_refused() {
    let mut v = json!(1);
    for _ in 0..200 {
        v = json!([v]);
    }
    let s = json!({"type": "object", "properties": {"a": {"const": v}}});
    assert_refused(&s, &["const nests deeper than 128", "#/properties/a"]);
}

/// Item 2: the issue's recursive `anyOf` was accepted, then overflowed
/// the scheduler's stack at the first byte the machine refused.
#[test]
fn left_recursion_is_refused() {
    let s = json!({"type": "object", "properties": {"v": {"$ref": "#/$defs/a"}},
                   "$defs": {"a": {"anyOf": [{"type": "integer"}, {"$ref": "#/$defs/a"}]}}});
    assert_refused(&s, &["left recursion", "#/"]);
    // A `$ref` to itself (free-form output before), and to the root.
    let s = json!({"type": "object", "properties": {"x": {"$ref": "#/$defs/a"}},
                   "$defs": {"a": {"$ref": "#/$defs/a"}}});
    assert_refused(&s, &["left recursion"]);
    let s = json!({"type": "object", "properties": {"x": {"$ref": "#/$defs/a"}},
                   "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"oneOf": [{"$ref": "#/$defs/a"}]}}});
    assert_refused(&s, &["left recursion"]);
    assert_refused(&json!({"$ref": "#"}), &["left recursion"]);
}

/// Item 2: `anyOf` / `$ref` chains are bounded even when each link is
/// compiled shallow (each `$ref` compiled once, deepest first).
#[test]
fn long_chains_are_refused() {
    let n = 100;
    let defs: serde_json::Map<String, Value> = (0..n)
        .map(|i| {
            let next = if i + 1 == n {
                json!({"type": "integer"})
            } else {
                json!({"$ref": format!("#/$defs/d{}", i + 1)})
            };
            (format!("d{i}"), json!({"anyOf": [next, {"type": "null"}]}))
        })
        .collect();
    let props: serde_json::Map<String, Value> = (0..n)
        .rev()
        .map(|i| (format!("p{i:03}"), json!({"$ref": format!("#/$defs/d{i}")})))
        .collect();
    let s = json!({"type": "object", "properties": props, "$defs": defs});
    assert_refused(&s, &["more than 64 deep before a value"]);
}

/// Item 2: a `$ref` cycle with no base case (every value would hold
/// another) is refused as unsatisfiable; recursion with a way out stays.
#[test]
fn cycles_without_a_base_case_are_refused() {
    let s = json!({"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]});
    assert_refused(&s, &["no value of the schema", "nesting"]);
    let s = json!({"type": "object", "properties": {"n": {"$ref": "#/$defs/n"}},
        "$defs": {"n": {"type": "array", "minItems": 1, "items": {"$ref": "#/$defs/n"}}}});
    assert_refused(&s, &["no value of the schema at #/"]);
    // Needing more nesting than the machine allows is refused alike.
    let mut s = json!({"type": "integer"});
    for _ in 0..14 {
        s = json!({"type": "object", "properties": {"a": s}, "required": ["a"]});
    }
    assert_refused(&s, &["fits within 12 levels"]);
}

/// Item 2: recursion through nesting stays allowed, bounded at run time:
/// a driver that opens a container whenever it may still finishes.
#[test]
fn recursion_through_nesting_is_bounded_at_run_time() {
    let s = json!({"type": "object", "properties": {"v": {"$ref": "#/$defs/n"}}, "required": ["v"],
        "$defs": {"n": {"anyOf": [
            {"type": "array", "minItems": 1, "items": {"$ref": "#/$defs/n"}},
            {"type": "object", "properties": {"k": {"$ref": "#/$defs/n"}}, "required": ["k"]},
            {"type": "integer"}]}}});
    let g = Grammar::from_schema(&s).unwrap();
    let text = drive_greedy(&g, b"[{\"k:]}1");
    let v: Value = serde_json::from_str(&text).unwrap();
    let depth = text.bytes().filter(|b| matches!(b, b'[' | b'{')).count();
    assert!((10..=13).contains(&depth), "{depth}: {v}");
}

/// Item 6: `required` without `properties`: the names must be there.
#[test]
fn required_without_properties_is_enforced() {
    let g = Grammar::from_schema(&json!({"type": "object", "required": ["a", "b"]})).unwrap();
    assert!(accepts(&g, r#"{"a": 1, "b": [true]}"#));
    for bad in [r#"{}"#, r#"{"a": 1}"#, r#"{"b": 1, "a": 1}"#, r#"{"c": 1}"#] {
        assert!(!accepts(&g, bad), "{bad}");
    }
    // A required name `properties` lacks follows additionalProperties.
    let g = Grammar::from_schema(&json!({"type": "object", "properties": {"x": {"type": "string"}},
        "required": ["a"], "additionalProperties": {"type": "integer"}}))
    .unwrap();
    assert!(accepts(&g, r#"{"x": "s", "a": 1}"#) && accepts(&g, r#"{"a": 1}"#));
    assert!(!accepts(&g, r#"{"a": "s"}"#) && !accepts(&g, r#"{"x": "s"}"#));
    assert_refused(
        &json!({"type": "object", "required": ["a"], "additionalProperties": false}),
        &["required property 'a'", "no object matches", "(at #)"],
    );
    assert_refused(
        &json!({"type": "object", "properties": {"b": {"required": "a"}}}),
        &["required must be a list", "#/properties/b"],
    );
}

/// Item 6: `enum` and `const` against `type`, and against each other.
#[test]
fn enum_and_const_are_checked_against_type() {
    for (s, says) in [
        (json!({"type": "string", "enum": ["a", 1]}), "enum value 1 (1)"),
        (json!({"type": "string", "const": 1}), "const (1) is not of the schema's type"),
        (json!({"type": "integer", "enum": [1.5]}), "enum value 0 (1.5)"),
        (json!({"type": ["string", "null"], "const": 2}), "not of the schema's type"),
        (json!({"type": "strin", "enum": ["a"]}), "type 'strin'"),
        (json!({"const": 1, "enum": [2, 3]}), "const is not one of enum's values"),
        (json!({"type": "integer", "minimum": 0, "enum": [1]}), "'enum' together with 'minimum'"),
    ] {
        let s = json!({"type": "object", "properties": {"a": s}});
        assert_refused(&s, &[says, "(at #/properties/a)"]);
    }
    let g = Grammar::from_schema(&json!({"type": "object", "properties": {
        "i": {"type": "integer", "enum": [1, 2.0]},
        "n": {"type": ["string", "null"], "enum": ["x", null]},
        "c": {"const": 3, "enum": [3, 4]}}}))
    .unwrap();
    assert!(accepts(&g, r#"{"i": 2.0, "n": null, "c": 3}"#));
    assert!(!accepts(&g, r#"{"c": 4}"#));
}

/// Item 6: counts are non-negative integers; keywords that would be
/// ignored beside `$ref` / `anyOf` are refused; keywords without `type`
/// still hold.
#[test]
fn every_keyword_is_enforced_or_refused() {
    for (s, says) in [
        (json!({"type": "array", "maxItems": -1}), "maxItems must be a non-negative integer, got -1"),
        (json!({"type": "array", "minItems": 1.5}), "minItems must be a non-negative integer, got 1.5"),
        (json!({"type": "array", "minItems": "2"}), "minItems must be"),
        (json!({"type": "array", "minItems": 3, "maxItems": 2}), "no array matches"),
        (json!({"$ref": "#/$defs/x", "type": "string"}), "'$ref' together with 'type'"),
        (json!({"anyOf": [{"type": "string"}], "type": "string"}), "'anyOf' together with 'type'"),
        (json!({"anyOf": [{"type": "string"}], "oneOf": [true]}), "'anyOf' together with 'oneOf'"),
        (json!({"type": []}), "empty list"),
        (json!({"type": ["string", 3]}), "type lists names"),
        (json!(false), "false matches nothing"),
    ] {
        let s = json!({"type": "object", "properties": {"a": s}, "$defs": {"x": true}});
        assert_refused(&s, &[says, "(at #/properties/a)"]);
    }
    let g = Grammar::from_schema(&json!({"type": "object", "properties": {
        "two": {"minItems": 2, "maxItems": 2.0},
        "none": {"additionalProperties": false}}, "required": ["two", "none"]}))
    .unwrap();
    assert!(accepts(&g, r#"{"two": [1, "x"], "none": {}}"#));
    for bad in [r#"{"two": [1], "none": {}}"#, r#"{"two": 1, "none": {}}"#, r#"{"two": [1, 2, 3], "none": {}}"#, r#"{"two": [1, 2], "none": {"k": 1}}"#] {
        assert!(!accepts(&g, bad), "{bad}");
    }
}

/// Tool parameters name their function in errors.
#[test]
fn tool_parameter_errors_name_the_function() {
    let bad = json!({"type": "object", "properties": {"n": {"type": "array", "maxItems": -1}}});
    let err = Grammar::tool_calls(&[("f".into(), bad)], &CallSyntax::hermes(false), 0)
        .unwrap_err()
        .to_string();
    assert!(err.contains("maxItems") && err.contains("#/properties/n in the parameters of function 'f'"), "{err}");
}
