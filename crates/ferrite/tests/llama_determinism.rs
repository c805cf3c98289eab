//! The bits of the logits depend only on the model and the tokens: not on
//! the thread count, nor on how the prompt is split into chunks, nor on
//! whether tokens arrive one forward call at a time.

mod common;

use ferrite::models::decoder::Logits;
use ferrite::models::open_causal_lm;
use ferrite::parallel::Threads;

/// A fixed token sequence (ids well inside SmolLM2's vocabulary).
fn tokens() -> Vec<u32> {
    (0..37u32).map(|i| 100 + (i * 7919) % 40000).collect()
}

fn all_logits(threads: usize, chunk: usize) -> Vec<u32> {
    let (_file, model) = open_causal_lm(&common::real_model("smollm2")).unwrap();
    let mut st = model.new_state(64, Threads::new(threads)).unwrap();
    st.set_chunk_size(chunk);
    let mut logits = Vec::new();
    model
        .forward(&tokens(), &mut st, Logits::All, &mut logits)
        .unwrap();
    logits.iter().map(|v| v.to_bits()).collect()
}

#[test]
fn logits_do_not_depend_on_threads_or_chunking() {
    let reference = all_logits(1, 256);
    assert_eq!(reference.len(), tokens().len() * 49152);
    assert!(reference.iter().all(|&b| f32::from_bits(b).is_finite()));
    for (threads, chunk) in [(2, 256), (2, 1), (1, 7), (2, 64), (3, 5)] {
        assert!(
            all_logits(threads, chunk) == reference,
            "logits differ with {threads} threads and chunks of {chunk}"
        );
    }
}

#[test]
fn one_call_per_token_matches_one_batch() {
    let (_file, model) = open_causal_lm(&common::real_model("smollm2")).unwrap();
    let toks = tokens();
    let mut batch = model.new_state(64, Threads::new(2)).unwrap();
    let mut batch_logits = Vec::new();
    model
        .forward(&toks, &mut batch, Logits::Last, &mut batch_logits)
        .unwrap();

    let mut single = model.new_state(64, Threads::new(1)).unwrap();
    let mut logits = Vec::new();
    for &t in &toks {
        model
            .forward(&[t], &mut single, Logits::Last, &mut logits)
            .unwrap();
    }
    assert!(logits == batch_logits, "last-token logits differ");
}

#[test]
fn context_overflow_is_an_error_not_a_panic() {
    let (_file, model) = open_causal_lm(&common::real_model("smollm2")).unwrap();
    let mut st = model.new_state(8, Threads::new(1)).unwrap();
    let mut logits = Vec::new();
    let err = model
        .forward(&tokens()[..9], &mut st, Logits::Last, &mut logits)
        .unwrap_err();
    assert!(
        err.to_string().contains("do not fit in the context"),
        "{err}"
    );
    let err = model
        .forward(&[999_999], &mut st, Logits::Last, &mut logits)
        .unwrap_err();
    assert!(err.to_string().contains("outside the vocabulary"), "{err}");
}
