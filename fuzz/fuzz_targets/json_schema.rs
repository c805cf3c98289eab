//! Fuzzes the JSON-schema compiler and the machine it drives: any input
//! must compile to a grammar or give an error, never a panic, an abort
//! (a stack overflow), or a hang. An accepted schema is then driven for
//! a bounded number of bytes, each chosen among the printable ASCII bytes
//! the machine allows (the input's tail picks which); a text that
//! completes must parse as JSON and, where the `jsonschema` crate can
//! judge it, validate against the schema.
//!
//! Input: the schema's JSON text, then optionally a 0 byte and the bytes
//! that pick the choices (without one, the schema's own bytes do).

#![no_main]

use ferrite::generate::json::JsonState;
use ferrite::Grammar;
use libfuzzer_sys::fuzz_target;

/// Most bytes driven through the machine per input.
const MAX_STEPS: usize = 400;

fuzz_target!(|data: &[u8]| {
    let (text, picks) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, data),
    };
    let Ok(schema) = serde_json::from_slice::<serde_json::Value>(text) else {
        return;
    };
    let Ok(g) = Grammar::from_schema(&schema) else {
        return;
    };
    let mut state = JsonState::new(&g);
    let mut out = Vec::new();
    let mut seed = 0x9e37_79b9_7f4a_7c15u64 ^ data.len() as u64;
    for step in 0..MAX_STEPS {
        if state.is_done() {
            break;
        }
        let allowed: Vec<u8> = (0x09u8..0x7f)
            .filter(|&b| state.clone().feed(&g, b))
            .collect();
        if allowed.is_empty() {
            // A dead end (the machine should avoid them; issue 44 item 5
            // tracks that), not a crash: stop here.
            return;
        }
        let pick = match picks.get(step) {
            Some(&p) => p as usize,
            None => {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed as usize
            }
        };
        let b = allowed[pick % allowed.len()];
        assert!(state.feed(&g, b), "an allowed byte was refused");
        out.push(b);
    }
    if !state.is_done() {
        return;
    }
    let value: serde_json::Value = match serde_json::from_slice(&out) {
        Ok(v) => v,
        // Valid JSON, but a number beyond f64 (a 15-digit exponent).
        Err(e) if e.to_string().contains("out of range") => return,
        Err(e) => panic!("{}: {e}", String::from_utf8_lossy(&out)),
    };
    // `oneOf` is followed as `anyOf` (the first member that may start
    // with the next byte): overlapping members are a known gap.
    if text.windows(5).any(|w| w == b"oneOf") {
        return;
    }
    if let Ok(validator) = jsonschema::validator_for(&schema) {
        if let Err(e) = validator.validate(&value) {
            panic!("{value} does not match {schema}: {e}");
        }
    }
});
