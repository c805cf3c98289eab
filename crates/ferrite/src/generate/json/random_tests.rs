//! Constrained output always validates: the constraint is driven by random
//! and by adversarial choices (bytes, and tokens of a real vocabulary
//! through [`mask_logits`]), and every finished text is checked by an
//! independent validator (the `jsonschema` crate) and for key order.

use std::path::Path;

use serde_json::{json, Value};

use super::*;
use crate::formats::gguf::GgufFile;

/// A small deterministic generator (xorshift).
pub(super) struct Rng(pub(super) u64);

impl Rng {
    pub(super) fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    pub(super) fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// How choices are made among what the constraint allows.
#[derive(Clone, Copy, Debug)]
enum Strategy {
    /// Uniformly.
    Random,
    /// Never closing a string, number, array or object while anything
    /// else is allowed: the caps alone must end the text.
    Stall,
}

fn closes(b: u8) -> bool {
    matches!(b, b'"' | b'}' | b']' | b',')
}

/// A text the grammar allows, byte by byte (ASCII choices only: free
/// strings take any byte, and a random byte is rarely valid UTF-8).
fn drive_bytes(g: &Grammar, rng: &mut Rng, how: Strategy) -> String {
    let mut s = JsonState::new(g);
    let mut out = Vec::new();
    while !s.is_done() {
        let allowed: Vec<u8> = (0x09u8..0x7f).filter(|&b| s.clone().feed(g, b)).collect();
        assert!(
            !allowed.is_empty(),
            "stuck after {:?}",
            String::from_utf8_lossy(&out)
        );
        let pool: Vec<u8> = match how {
            Strategy::Random => allowed,
            Strategy::Stall => {
                let open: Vec<u8> = allowed.iter().copied().filter(|&b| !closes(b)).collect();
                if open.is_empty() {
                    allowed
                } else {
                    open
                }
            }
        };
        let b = pool[rng.below(pool.len())];
        assert!(s.feed(g, b));
        out.push(b);
        assert!(out.len() < 1 << 20, "no end in sight");
    }
    String::from_utf8(out).expect("ASCII")
}

/// The keys of every object in `v` come in the order of the schema's
/// `properties` (declared keys first, in order; other keys after).
fn keys_in_order(schema: &Value, v: &Value) {
    let (Some(props), Some(obj)) = (
        schema.get("properties").and_then(Value::as_object),
        v.as_object(),
    ) else {
        return;
    };
    let declared: Vec<&String> = props.keys().collect();
    let mut last = 0;
    let mut extras = false;
    for (k, sub) in obj {
        match declared.iter().position(|d| *d == k) {
            Some(i) => {
                assert!(!extras && i >= last, "key '{k}' out of order in {v}");
                last = i + 1;
                keys_in_order(&props[k], sub);
            }
            None => extras = true,
        }
    }
}

fn schemas() -> Vec<Value> {
    vec![
        // Optional properties, bounds, patterns, additionalProperties.
        json!({
            "type": "object",
            "properties": {
                "id": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{3,5}$"},
                "nick": {"type": "string", "pattern": "x+y"},
                "age": {"type": "integer", "minimum": 0, "exclusiveMaximum": 130},
                "score": {"type": "number", "exclusiveMinimum": -1.5, "maximum": 2.25},
                "ratio": {"type": ["number", "null"], "minimum": 0.001, "maximum": 0.002},
                "big": {"type": "integer", "exclusiveMinimum": 1e12},
                "tags": {"type": "array", "items": {"enum": ["a", "b", 3]}, "minItems": 1, "maxItems": 3},
                "meta": {"type": "object", "additionalProperties": true, "properties": {
                    "v": {"const": 2}}},
            },
            "required": ["age", "tags"],
            "additionalProperties": {"type": "integer", "minimum": -3, "maximum": 3}
        }),
        // A map (Pydantic's Dict[str, ...]) and its values' patterns.
        json!({
            "type": "object",
            "properties": {"counts": {"type": "object",
                "additionalProperties": {"type": "string", "pattern": "^(cat|dog)s?$"}}},
            "required": ["counts"],
            "additionalProperties": false
        }),
        // Every property optional; nested Pydantic-style models.
        json!({
            "$defs": {"Item": {"type": "object", "properties": {
                "name": {"type": "string", "pattern": "^\\w[\\w ]*$"},
                "price": {"type": "number", "minimum": 0},
                "qty": {"anyOf": [{"type": "integer", "minimum": 1, "maximum": 9}, {"type": "null"}]}},
                "required": ["name"]}},
            "type": "object",
            "properties": {
                "items": {"type": "array", "items": {"$ref": "#/$defs/Item"}, "maxItems": 4},
                "note": {"anyOf": [{"type": "string"}, {"type": "null"}]},
                "when": {"type": "string", "pattern": "^\\d{4}-\\d{2}-\\d{2}$"}
            }
        }),
    ]
}

#[test]
fn random_and_stalling_bytes_always_validate() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for schema in schemas() {
        let g = Grammar::from_schema(&schema).unwrap();
        let validator = jsonschema::validator_for(&schema).unwrap();
        for round in 0..300 {
            let how = if round % 3 == 2 {
                Strategy::Stall
            } else {
                Strategy::Random
            };
            let text = drive_bytes(&g, &mut rng, how);
            let v: Value =
                serde_json::from_str(&text).unwrap_or_else(|e| panic!("{how:?}: {e}: {text}"));
            assert!(validator.is_valid(&v), "{how:?}: {text} does not validate");
            keys_in_order(&schema, &v);
        }
    }
}

/// The same with a real vocabulary's tokens (tiny-llama3's byte-level
/// BPE), chosen through [`mask_logits`] under random logits.
#[test]
fn random_tokens_through_the_mask_always_validate() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/hf-decoders/tiny-llama3.f32.gguf");
    let file = GgufFile::open(&path).unwrap();
    let tok = crate::tokenize::Tokenizer::from_gguf(file.metadata()).unwrap();
    let n = tok.vocab_size();
    let is_end = |id: u32| tok.is_end_of_generation(id);
    let mut rng = Rng(12345);
    for schema in schemas() {
        let g = Grammar::from_schema(&schema).unwrap();
        let validator = jsonschema::validator_for(&schema).unwrap();
        for round in 0..40 {
            let stall = round % 2 == 1;
            let mut s = JsonState::new(&g);
            let mut out = Vec::new();
            loop {
                let mut logits: Vec<f32> = (0..n)
                    .map(|id| {
                        let bytes = tok.token_bytes(id as u32);
                        let r = (rng.next() % 1000) as f32 / 100.0;
                        // Stalling: closers and the end score lowest.
                        let low = stall && (bytes.iter().any(|&b| closes(b)) || is_end(id as u32));
                        if low {
                            r - 100.0
                        } else {
                            r
                        }
                    })
                    .collect();
                assert!(mask_logits(&g, &s, &tok, &[], &mut logits), "stuck");
                let best = (0..n)
                    .max_by(|&a, &b| logits[a].total_cmp(&logits[b]))
                    .unwrap() as u32;
                if is_end(best) {
                    assert!(s.can_end());
                    break;
                }
                assert!(s.feed_all(&g, tok.token_bytes(best)));
                out.extend_from_slice(tok.token_bytes(best));
                assert!(out.len() < 1 << 20, "no end in sight");
            }
            let text = String::from_utf8(out).expect("UTF-8");
            let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
            assert!(validator.is_valid(&v), "{text} does not validate");
            keys_in_order(&schema, &v);
        }
    }
}

/// Time per mask over a real vocabulary (Qwen2.5's, 151k tokens) at a
/// few places (a key, a pattern string, a bounded number, a free string,
/// the start of a 128-member `anyOf`), for a small schema, one with 20,003
/// properties and one with a 128-member `anyOf`: the trie walk
/// ([`mask_logits`]) against the token-by-token mask it replaced. Printed,
/// not asserted (a timing; run with
/// `cargo test -p ferrite --lib mask_cost -- --ignored --nocapture`).
#[test]
#[ignore]
fn mask_cost_by_schema_size() {
    let tok = super::random_schemas::real_tokenizer("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf");
    let t0 = std::time::Instant::now();
    tok.json_index();
    println!(
        "vocabulary index: {:.1} ms (once per tokenizer)",
        t0.elapsed().as_secs_f64() * 1e3
    );
    let is_end = |id: u32| tok.is_end_of_generation(id);
    let small = json!({"type": "object", "properties": {
        "code": {"type": "string", "pattern": "^[A-Z]{3}-\\d{4}$"},
        "n": {"type": "number", "minimum": -2.5, "maximum": 1000},
        "note": {"type": "string"}}});
    let mut props = serde_json::Map::new();
    for i in 0..20_000 {
        props.insert(format!("field_{i}"), json!({"type": "integer"}));
    }
    props.insert("code".into(), small["properties"]["code"].clone());
    props.insert("n".into(), small["properties"]["n"].clone());
    props.insert("note".into(), json!({"type": "string"}));
    let big = json!({"type": "object", "properties": props});
    let members: Vec<Value> = (0..128)
        .map(|i| {
            json!({"type": "object", "properties": {format!("k{i}"): {"type": "integer"}},
                "required": [format!("k{i}")]})
        })
        .collect();
    let any_of = json!({"type": "object", "properties": {"v": {"anyOf": members},
        "note": {"type": "string"}}});
    for (name, schema) in [
        ("3 properties", small),
        ("20,003 properties", big),
        ("128-member anyOf", any_of),
    ] {
        let t0 = std::time::Instant::now();
        let g = Grammar::from_schema(&schema).unwrap();
        let compile = t0.elapsed();
        println!("{name}: compile {:.1} ms", compile.as_secs_f64() * 1e3);
        for prefix in [
            "",
            r#"{"fi"#,
            r#"{"code": "AB"#,
            r#"{"n": 12"#,
            r#"{"note": "ab"#,
            r#"{"v": "#,
            r#"{"v": {"k0": 1"#,
        ] {
            let mut s = JsonState::new(&g);
            if !s.feed_all(&g, prefix.as_bytes()) {
                continue;
            }
            let time = |f: &dyn Fn(&mut [f32])| {
                let mut times = Vec::new();
                for _ in 0..7 {
                    let mut logits = vec![0.0f32; tok.vocab_size()];
                    let t = std::time::Instant::now();
                    f(&mut logits);
                    times.push(t.elapsed().as_secs_f64() * 1e3);
                }
                times.sort_by(f64::total_cmp);
                times[3]
            };
            let old = time(&|l| {
                mask_logits_by_token(&g, &s, &tok, &is_end, l);
            });
            let new = time(&|l| {
                mask_logits(&g, &s, &tok, &[], l);
            });
            println!("  mask after {prefix:<16} token by token {old:7.2} ms, trie walk {new:6.3} ms");
        }
    }
}
