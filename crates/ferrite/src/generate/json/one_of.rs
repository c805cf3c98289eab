//! `oneOf`: a value must match exactly one branch.
//!
//! The compiler follows a `oneOf` as an `anyOf` (the first branch that
//! fits the reply so far), and the reply then matches that branch. That
//! meets `oneOf` only if no value matches two branches, so a `oneOf` is
//! accepted when its branches are *provably disjoint*, pair by pair, and
//! refused otherwise, naming the two branches (an `anyOf` says the same
//! thing without the promise). Two branches are disjoint here when:
//!
//! - their values are of different JSON types (`string` / `integer`,
//!   an object / an array, ...; `integer` and `number` overlap);
//! - both list their values (`const`, `enum`) and none is in both;
//! - both are objects and a property that both require takes `const` /
//!   `enum` values in both with none in common: a tagged union, as
//!   pydantic writes one (its `discriminator` is an annotation beside);
//! - both are objects and one requires a property that the other, with
//!   `additionalProperties: false`, does not declare.
//!
//! Anything else (`number` and `integer`, two strings with different
//! `pattern`s, objects told apart only by optional properties) counts as
//! overlapping: refusing costs the caller an `anyOf`, accepting could
//! write a value that breaks the schema.

use serde_json::{Map, Value};

/// `$ref`s followed in a row when working out a branch's shape; deeper
/// (or cyclic) chains count as "any value".
const MAX_REFS: usize = 16;

/// JSON value kinds, one bit each.
const NULL: u8 = 1;
const BOOLEAN: u8 = 2;
const NUMBER: u8 = 4;
const STRING: u8 = 8;
const ARRAY: u8 = 16;
const OBJECT: u8 = 32;
const ANY: u8 = 63;

/// What a branch's values can be, as far as telling branches apart needs.
#[derive(Debug, Default)]
struct Shape {
    /// The kinds its values may have.
    kinds: u8,
    /// Every value it allows, when it lists them (`const`, `enum`), as
    /// canonical JSON text.
    values: Option<Vec<String>>,
    /// Required properties whose values are listed: (name, values).
    tags: Vec<(String, Vec<String>)>,
    /// Required property names.
    required: Vec<String>,
    /// Declared property names, when no other property is allowed
    /// (`additionalProperties: false`).
    closed: Option<Vec<String>>,
}

/// The first pair of `branches` (indexes) that may both match one value.
pub(super) fn overlapping(root: &Value, branches: &[Value]) -> Option<(usize, usize)> {
    let shapes: Vec<Shape> = branches.iter().map(|b| shape(root, b, 0)).collect();
    for (i, a) in shapes.iter().enumerate() {
        for (j, b) in shapes.iter().enumerate().skip(i + 1) {
            if !disjoint(a, b) {
                return Some((i, j));
            }
        }
    }
    None
}

/// Canonical text of a listed value: numbers by value (`1` and `1.0` are
/// the same JSON number), everything else as serde_json writes it.
fn canonical(v: &Value) -> String {
    match v {
        Value::Number(n) => match n.as_f64() {
            Some(f) => format!("{f:?}"),
            None => n.to_string(),
        },
        _ => v.to_string(),
    }
}

fn kind_of(v: &Value) -> u8 {
    match v {
        Value::Null => NULL,
        Value::Bool(_) => BOOLEAN,
        Value::Number(_) => NUMBER,
        Value::String(_) => STRING,
        Value::Array(_) => ARRAY,
        Value::Object(_) => OBJECT,
    }
}

fn kind_named(name: &str) -> u8 {
    match name {
        "null" => NULL,
        "boolean" => BOOLEAN,
        "number" | "integer" => NUMBER,
        "string" => STRING,
        "array" => ARRAY,
        "object" => OBJECT,
        _ => ANY,
    }
}

/// The shape of schema `s`, following `$ref`s into `root` at most
/// [`MAX_REFS`] deep (`refs` so far).
fn shape(root: &Value, s: &Value, refs: usize) -> Shape {
    let any = Shape {
        kinds: ANY,
        ..Shape::default()
    };
    let Value::Object(obj) = s else {
        return any; // `true` (`false` is refused by the compiler)
    };
    if let Some(r) = obj.get("$ref").and_then(Value::as_str) {
        let target = r.strip_prefix('#').and_then(|p| root.pointer(p));
        return match target {
            Some(t) if refs < MAX_REFS => shape(root, t, refs + 1),
            _ => any,
        };
    }
    let listed = match (obj.get("const"), obj.get("enum")) {
        (Some(c), _) => Some(vec![c.clone()]),
        (None, Some(Value::Array(e))) => Some(e.clone()),
        _ => None,
    };
    if let Some(values) = listed {
        return Shape {
            kinds: values.iter().fold(0, |k, v| k | kind_of(v)),
            values: Some(values.iter().map(canonical).collect()),
            ..Shape::default()
        };
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(Value::Array(members)) = obj.get(key) {
            let shapes: Vec<Shape> = members.iter().map(|m| shape(root, m, refs)).collect();
            let values = shapes
                .iter()
                .map(|s| s.values.clone())
                .collect::<Option<Vec<_>>>()
                .map(|v| v.concat());
            return Shape {
                kinds: shapes.iter().fold(0, |k, s| k | s.kinds),
                values,
                ..Shape::default()
            };
        }
    }
    let has = |keys: &[&str]| keys.iter().any(|k| obj.contains_key(*k));
    let kinds = match obj.get("type") {
        Some(Value::String(t)) => kind_named(t),
        Some(Value::Array(ts)) => ts
            .iter()
            .fold(0, |k, t| k | t.as_str().map_or(ANY, kind_named)),
        Some(_) => ANY,
        None if has(&["properties", "required", "additionalProperties"]) => OBJECT,
        None if has(&["items", "minItems", "maxItems"]) => ARRAY,
        None => ANY,
    };
    let mut shape = Shape {
        kinds,
        ..Shape::default()
    };
    if kinds == OBJECT {
        object_facts(root, obj, refs, &mut shape);
    }
    shape
}

/// The required names, tags and closedness of an object schema.
fn object_facts(root: &Value, obj: &Map<String, Value>, refs: usize, out: &mut Shape) {
    let empty = Map::new();
    let props = obj
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    if let Some(Value::Array(required)) = obj.get("required") {
        for name in required.iter().filter_map(Value::as_str) {
            out.required.push(name.to_string());
            if let Some(values) = props.get(name).and_then(|p| shape(root, p, refs).values) {
                out.tags.push((name.to_string(), values));
            }
        }
    }
    if obj.get("additionalProperties") == Some(&Value::Bool(false)) {
        out.closed = Some(props.keys().cloned().collect());
    }
}

/// Whether no value can match both `a` and `b` (see the module).
fn disjoint(a: &Shape, b: &Shape) -> bool {
    if a.kinds & b.kinds == 0 {
        return true;
    }
    if let (Some(x), Some(y)) = (&a.values, &b.values) {
        return !x.iter().any(|v| y.contains(v));
    }
    if a.kinds != OBJECT || b.kinds != OBJECT {
        return false;
    }
    let tagged_apart = a.tags.iter().any(|(name, xs)| {
        b.tags
            .iter()
            .any(|(other, ys)| other == name && !xs.iter().any(|v| ys.contains(v)))
    });
    let closed_out = |p: &Shape, q: &Shape| {
        q.closed
            .as_ref()
            .is_some_and(|declared| p.required.iter().any(|r| !declared.contains(r)))
    };
    tagged_apart || closed_out(a, b) || closed_out(b, a)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::grammar::Grammar;

    /// Compiles `schema` (as property `x` of an object unless it is one),
    /// giving the error's text.
    fn compiled(schema: serde_json::Value) -> Result<(), String> {
        let schema = if schema.get("type") == Some(&json!("object")) {
            schema
        } else {
            json!({"type": "object", "properties": {"x": schema}, "required": ["x"]})
        };
        Grammar::from_schema(&schema)
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    /// `oneOf`s whose branches cannot both match are accepted: different
    /// types, different listed values, pydantic's tagged union (through
    /// `$ref`s, with its `discriminator` annotation), and a closed object
    /// that does not declare the other's required property.
    #[test]
    fn disjoint_branches_are_accepted() {
        let tagged = json!({
            "type": "object",
            "properties": {"pet": {
                "oneOf": [{"$ref": "#/$defs/Cat"}, {"$ref": "#/$defs/Dog"}],
                "discriminator": {"propertyName": "pet_type",
                                  "mapping": {"cat": "#/$defs/Cat", "dog": "#/$defs/Dog"}}
            }},
            "required": ["pet"],
            "$defs": {
                "Cat": {"type": "object", "title": "Cat",
                        "properties": {"pet_type": {"const": "cat", "title": "Pet Type"},
                                       "meows": {"type": "integer"}},
                        "required": ["pet_type", "meows"]},
                "Dog": {"type": "object", "title": "Dog",
                        "properties": {"pet_type": {"enum": ["dog", "wolf"]},
                                       "barks": {"type": "number"}},
                        "required": ["pet_type", "barks"]}
            }
        });
        for schema in [
            json!({"oneOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}]}),
            json!({"oneOf": [{"const": 1}, {"const": 2}, {"enum": ["1", true]}]}),
            json!({"oneOf": [{"type": "array", "items": {"type": "string"}},
                             {"type": "object", "properties": {"a": {"type": "string"}}}]}),
            tagged,
            json!({"oneOf": [
                {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"],
                 "additionalProperties": false},
                {"type": "object", "properties": {"b": {"type": "string"}}, "required": ["b"],
                 "additionalProperties": false}
            ]}),
        ] {
            assert_eq!(compiled(schema.clone()), Ok(()), "{schema}");
        }
    }

    /// `oneOf`s with two branches one value could match are refused,
    /// naming the branches and the place (on main they were followed as
    /// `anyOf`, so `{"oneOf": [{"type": "number"}, {"type": "integer"}]}`
    /// could write `1`, which matches both and so breaks the schema).
    #[test]
    fn overlapping_branches_are_refused() {
        for (schema, branches) in [
            (
                json!({"oneOf": [{"type": "number"}, {"type": "integer"}]}),
                "branches 0 and 1",
            ),
            (
                json!({"type": "object", "properties": {"x": {"oneOf": [
                    {"type": "string"}, {"type": "boolean"}, {"type": "string", "pattern": "a+"}
                ]}}}),
                "branches 0 and 2",
            ),
            (json!({"oneOf": [{"enum": [1, 2]}, {"const": 2.0}]}), "branches 0 and 1"),
            (json!({"oneOf": [{"const": "a"}, {"type": "string"}]}), "branches 0 and 1"),
            (
                json!({"oneOf": [
                    {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
                    {"type": "object", "properties": {"b": {"type": "string"}}, "required": ["b"]}
                ]}),
                "branches 0 and 1",
            ),
            (
                json!({"oneOf": [
                    {"type": "object", "properties": {"t": {"const": "a"}}},
                    {"type": "object", "properties": {"t": {"const": "b"}}}
                ]}),
                "branches 0 and 1",
            ),
            (json!({"oneOf": [true, {"type": "null"}]}), "branches 0 and 1"),
        ] {
            let err = compiled(schema.clone()).expect_err(&schema.to_string());
            assert!(err.contains("'oneOf'"), "{schema}: {err}");
            assert!(err.contains(branches), "{schema}: {err}");
            assert!(err.contains("use anyOf"), "{schema}: {err}");
        }
        let err = compiled(json!({"type": "object", "properties": {"y": {"oneOf": [
            {"type": "number"}, {"type": "integer"}
        ]}}}))
        .unwrap_err();
        assert!(err.contains("(at #/properties/y)"), "{err}");
    }
}
