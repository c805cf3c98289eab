//! Issue 44, item 5: random schemas (empty objects, keys that need
//! escapes, optional and required properties, nested arrays and objects,
//! enums, `anyOf`, patterns, bounds, self-references) under random logits
//! through [`mask_logits`] with real vocabularies: every text that ends by
//! itself parses and validates (the `jsonschema` crate), no step is left
//! without a token, and the trie-walking mask allows exactly the tokens
//! the token-by-token one did.

use serde_json::{json, Map, Value};

use super::random_tests::Rng;
use super::*;
use crate::formats::gguf::GgufFile;

/// Property names, some of which JSON writes with escapes.
const NAMES: [&str; 12] = [
    "a",
    "b",
    "id",
    "name",
    "say \"hi\"",
    "back\\slash",
    "tab\there",
    "\u{1}ctl",
    "café",
    "日本",
    "a/b",
    "",
];

/// Patterns whose meaning ECMA-262 and the validator's regex engine agree
/// on.
const PATTERNS: [&str; 6] = [
    "^[a-z]{2,4}$",
    "^\\d{3}-\\d{2}$",
    "x+y",
    "^(cat|dog)s?$",
    "^[A-Z][a-z]*$",
    "^\\w[\\w ]*$",
];

fn pick<'a, T>(rng: &mut Rng, items: &'a [T]) -> &'a T {
    &items[rng.below(items.len())]
}

fn maybe(rng: &mut Rng, percent: usize) -> bool {
    rng.below(100) < percent
}

/// A random schema for a value `depth` levels down.
fn value(rng: &mut Rng, depth: usize) -> Value {
    let deep = depth >= 3;
    match rng.below(if deep { 9 } else { 14 }) {
        0 => json!({"type": "string"}),
        1 => json!({"type": "string", "pattern": pick(rng, &PATTERNS)}),
        2 => {
            let mut s = json!({"type": "integer"});
            if maybe(rng, 50) {
                s["minimum"] = json!(rng.below(20) as i64 - 10);
            }
            if maybe(rng, 50) {
                s["exclusiveMaximum"] = json!(rng.below(1000) as i64 + 11);
            }
            s
        }
        3 => match rng.below(3) {
            0 => json!({"type": "number"}),
            1 => json!({"type": "number", "minimum": -2.5, "maximum": 0.125}),
            _ => json!({"type": "number", "exclusiveMinimum": 0}),
        },
        4 => json!({"type": "boolean"}),
        5 => json!({"type": "null"}),
        6 => json!({"enum": ["x", "say \"hi\"", 3, null, {"k": [1]}, "日本"]}),
        7 => json!({"const": pick(rng, &[json!("c\\d"), json!(2.5), json!([true])])}),
        8 => json!({"type": ["string", "null"]}),
        9 => {
            let mut s = json!({"type": "array", "items": value(rng, depth + 1)});
            if maybe(rng, 40) {
                s["minItems"] = json!(rng.below(3));
            }
            if maybe(rng, 40) {
                s["maxItems"] = json!(3 + rng.below(3));
            }
            s
        }
        10 => {
            let n = 2 + rng.below(2);
            let members: Vec<Value> = (0..n).map(|_| value(rng, depth + 1)).collect();
            json!({"anyOf": members})
        }
        // The root, again: a self-reference.
        11 => json!({"$ref": "#"}),
        12 => json!({"anyOf": [{"$ref": "#"}, {"type": "null"}]}),
        _ => object(rng, depth + 1),
    }
}

/// A random object schema.
fn object(rng: &mut Rng, depth: usize) -> Value {
    let mut props = Map::new();
    for _ in 0..rng.below(5) {
        let name = *pick(rng, &NAMES);
        props.insert(name.to_string(), value(rng, depth));
    }
    let required: Vec<&String> = props.keys().filter(|_| maybe(rng, 50)).collect();
    let mut s = json!({"type": "object"});
    if !props.is_empty() || maybe(rng, 50) {
        s["required"] = json!(required);
        s["properties"] = Value::Object(props);
    }
    match rng.below(6) {
        0 => s["additionalProperties"] = json!(false),
        1 => s["additionalProperties"] = json!(true),
        2 => s["additionalProperties"] = json!({"type": "integer", "minimum": 0}),
        _ => {}
    }
    s
}

/// A tokenizer of the models directory (`FERRITE_MODELS`): the tests need
/// the real models, they do not skip.
pub(super) fn real_tokenizer(file: &str) -> crate::tokenize::Tokenizer {
    let path = crate::model_path::models_dir().join(file);
    let gguf = GgufFile::open(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (the tests need the real models: set FERRITE_MODELS)",
            path.display()
        )
    });
    crate::tokenize::Tokenizer::from_gguf(gguf.metadata()).unwrap()
}

/// Generates until an end token is picked; returns the text. Each token
/// is drawn uniformly among those the mask leaves (what the largest of
/// independent random logits picks); `stall` draws among those without a
/// closing byte (`"`, `}`, `]`, `,`) or the end while there are such, so
/// that the bounds alone must end the text. Every `check`-th mask is
/// compared with the token-by-token one, bit for bit.
fn generate(
    g: &Grammar,
    tok: &crate::tokenize::Tokenizer,
    low: &[bool],
    rng: &mut Rng,
    stall: bool,
    check: usize,
    steps: &mut usize,
) -> String {
    let n = tok.vocab_size();
    let is_end = |id: u32| tok.is_end_of_generation(id);
    let mut s = JsonState::new(g);
    let mut out = Vec::new();
    let mut logits = vec![0f32; n];
    loop {
        logits.fill(0.0);
        let any = mask_logits(g, &s, tok, &[], &mut logits);
        assert!(
            any,
            "no token may follow {:?}",
            String::from_utf8_lossy(&out)
        );
        *steps += 1;
        if (*steps).is_multiple_of(check) {
            let mut by_token = vec![0f32; n];
            let same_any = mask_logits_by_token(g, &s, tok, &is_end, &mut by_token);
            let same = by_token.iter().zip(&logits).all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(
                same && same_any,
                "the masks differ after {:?}",
                String::from_utf8_lossy(&out)
            );
        }
        let allowed: Vec<u32> = (0..n as u32)
            .filter(|&id| logits[id as usize] == 0.0)
            .collect();
        let open: Vec<u32> = allowed.iter().copied().filter(|&id| !low[id as usize]).collect();
        let pool = if stall && !open.is_empty() {
            open
        } else {
            allowed
        };
        let best = pool[rng.below(pool.len())];
        if is_end(best) {
            assert!(s.can_end());
            break;
        }
        assert!(s.feed_all(g, tok.token_bytes(best)));
        out.extend_from_slice(tok.token_bytes(best));
        assert!(out.len() < 1 << 16, "no end in sight");
    }
    String::from_utf8(out).expect("UTF-8")
}

/// Every text that ends by itself validates, for random schemas, random
/// logits and two real vocabularies (SmolLM2's 49k tokens, Qwen2.5's
/// 151k); and the mask is the token-by-token one, bit for bit (checked on
/// some steps: that one is slow).
#[test]
fn random_schemas_through_the_mask_always_validate() {
    let toks = [
        real_tokenizer("SmolLM2-135M-Instruct.Q4_1.gguf"),
        real_tokenizer("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"),
    ];
    let lows: Vec<Vec<bool>> = toks
        .iter()
        .map(|tok| {
            (0..tok.vocab_size() as u32)
                .map(|id| {
                    tok.is_end_of_generation(id)
                        || tok.token_bytes(id).iter().any(|b| b"\"}],".contains(b))
                })
                .collect()
        })
        .collect();
    let mut rng = Rng(0x5851_f42d_4c95_7f2d);
    let (mut texts, mut refused, mut steps) = (0, 0, 0);
    for round in 0..50 {
        let schema = object(&mut rng, 0);
        let mut g = match Grammar::from_schema(&schema) {
            Ok(g) => g,
            // Only schemas with no finite value are refused.
            Err(e) => {
                assert!(e.to_string().contains("no value"), "{schema}: {e}");
                refused += 1;
                continue;
            }
        };
        // Short caps keep stalling texts short (the test's time), and
        // make the caps end more of them.
        g.max_string = 12;
        g.max_items = 3;
        g.max_depth = 3;
        let validator = jsonschema::validator_for(&schema).unwrap();
        let t = round % 2;
        for stall in [false, true] {
            let text = generate(&g, &toks[t], &lows[t], &mut rng, stall, 53, &mut steps);
            let v: Value = serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("{schema}\n{e}: {text}"));
            assert!(validator.is_valid(&v), "{schema}\n{text} does not validate");
            texts += 1;
        }
    }
    assert!(texts >= 80 && refused < 8, "{texts} texts, {refused} refused");
    println!("{texts} texts in {steps} steps; {refused} schemas refused");
}
