//! Fuzzes the `pattern` regular-expression compiler: any input must give
//! a DFA or an error, never a panic, an abort (a stack overflow) or a
//! hang. An accepted pattern is then run over the input's tail: every
//! state a step reaches must still reach a match (as `Dfa::step`
//! promises), and a shortest completion from it must be found within
//! `dist` steps.
//!
//! Input: the pattern (UTF-8, invalid bytes replaced), then optionally a
//! 0 byte and the bytes to run.

#![no_main]

use ferrite::generate::json::regex::Dfa;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (pattern, input) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let pattern = String::from_utf8_lossy(pattern);
    // The schema compiler's budget of DFA states.
    let mut budget = 8192;
    let Ok(dfa) = Dfa::compile(&pattern, &mut budget) else {
        return;
    };
    let mut at = 0u32;
    for &b in input {
        let Some(next) = dfa.step(at, b) else {
            break;
        };
        at = next;
        assert!(dfa.dist(at) < u32::MAX as usize, "a live state with no match");
    }
    // Follow the distances down to a match: some byte always lowers it.
    let mut left = dfa.dist(at);
    while left > 0 {
        let next = (0..=255u8)
            .filter_map(|b| dfa.step(at, b))
            .find(|&t| dfa.dist(t) + 1 == left)
            .expect("a state one byte closer to a match");
        at = next;
        left -= 1;
    }
    assert!(dfa.is_accept(at));
});
