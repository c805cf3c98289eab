//! Qwen2.5-Coder-0.5B-Instruct (Q4_K_M: Q5_0, Q8_0, Q6_K, Q4_K and F32
//! tensors; Q/K/V biases, neox RoPE, 14 query heads over 2 KV heads)
//! against llama.cpp on the same file, and against an exact float64
//! forward pass of the same weights (goldens from
//! scripts/make-llama-goldens.py).
//!
//! As for SmolLM2 and Gemma 3 (see llama_parity.rs), both engines quantize
//! activations to 8 bits before every matrix product, so neither matches
//! the other bit for bit; what the tests hold us to is being as close to
//! llama.cpp as llama.cpp is to itself (one token at a time vs one batch),
//! at least as close to exact arithmetic as llama.cpp is, and greedy
//! divergences only at near-ties.

mod common;

use common::parity;

#[test]
fn qwen2_greedy_matches_llama_cpp() {
    let (_, _, tie) = parity::llama_cpp_self_agreement("qwen2.5-0.5b-logits");
    // A divergence counts as a tie if llama.cpp's own noise could flip it:
    // the largest top-2 margin change between its batched and
    // one-token-at-a-time runs (0.40 when measured).
    parity::check_greedy("qwen2.5-0.5b", tie);
}

#[test]
fn qwen2_logits_match_llama_cpp() {
    let (top1, nmse) = parity::logits_agreement("qwen2.5-0.5b", "qwen2.5-0.5b-logits");
    let (self_top1, self_nmse, _) = parity::llama_cpp_self_agreement("qwen2.5-0.5b-logits");
    eprintln!(
        "ours vs llama.cpp: top-1 {:.2}%, NMSE {nmse:.3e}; llama.cpp one token at a time vs one batch: top-1 {:.2}%, NMSE {self_nmse:.3e}",
        100.0 * top1,
        100.0 * self_top1
    );
    // Measured: top-1 97.66%, NMSE 2.42e-4; llama.cpp with itself 96.88%,
    // 2.14e-4.
    assert!(nmse < 1e-3, "NMSE {nmse:.3e} against llama.cpp");
    assert!(
        nmse <= 1.25 * self_nmse,
        "NMSE {nmse:.3e} against llama.cpp; llama.cpp against itself: {self_nmse:.3e}"
    );
    assert!(
        top1 >= self_top1 - 0.02,
        "top-1 agreement {top1} with llama.cpp; llama.cpp with itself: {self_top1}"
    );
}

#[test]
fn qwen2_is_as_close_to_exact_math_as_llama_cpp() {
    let (top1, nmse) = parity::logits_agreement("qwen2.5-0.5b", "qwen2.5-0.5b-f64");
    let (llama_top1, llama_nmse) = parity::llama_cpp_vs_exact("qwen2.5-0.5b-f64");
    eprintln!(
        "vs exact: ours top-1 {:.2}% NMSE {nmse:.3e}; llama.cpp top-1 {:.2}% NMSE {llama_nmse:.3e}",
        100.0 * top1,
        100.0 * llama_top1
    );
    assert!(
        top1 >= llama_top1 - 0.02,
        "top-1 {top1} vs llama.cpp's {llama_top1}"
    );
    assert!(
        nmse <= 1.5 * llama_nmse,
        "NMSE {nmse:.3e} vs llama.cpp's {llama_nmse:.3e}"
    );
}
