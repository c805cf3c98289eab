//! Gemma 3: the bits of the logits depend only on the model and the tokens,
//! not on the thread count, nor on how the prompt is split into chunks --
//! also past the sliding window, where the local layers' rings of cache
//! slots wrap around -- and rewinding a wrapped cache never reuses keys a
//! ring has overwritten.

mod common;

use ferrite::generate::session::Session;
use ferrite::models::decoder::{Logits, MAX_CHUNK};
use ferrite::models::open_causal_lm;
use ferrite::models::CausalLm;
use ferrite::parallel::Threads;
use ferrite::tokenize::Tokenizer;

/// Context of the states below: larger than a local layer's ring
/// (window 512 + MAX_CHUNK - 1 slots), so that the rings are in use.
const N_CTX: usize = 1024;
/// Long enough to pass the window and wrap the rings.
const LONG: usize = 800;
const WINDOW: usize = 512;

/// A fixed token sequence (ids well inside Gemma's vocabulary).
fn tokens(n: usize, seed: u32) -> Vec<u32> {
    (0..n as u32)
        .map(|i| 100 + (i * 7919 + seed * 104_729) % 200_000)
        .collect()
}

fn model() -> Box<dyn CausalLm> {
    open_causal_lm(&common::real_model("gemma3-270m"))
        .unwrap()
        .1
}

fn logits(
    model: &dyn CausalLm,
    toks: &[u32],
    which: Logits,
    threads: usize,
    chunk: usize,
) -> Vec<u32> {
    let mut st = model.new_state(N_CTX, Threads::new(threads)).unwrap();
    st.set_chunk_size(chunk);
    let mut out = Vec::new();
    model.forward(toks, &mut st, which, &mut out).unwrap();
    out.iter().map(|v| v.to_bits()).collect()
}

#[test]
fn local_layers_keep_only_the_window() {
    let model = model();
    let st = model.new_state(N_CTX, Threads::new(1)).unwrap();
    let caps: Vec<usize> = st.cache.layers().iter().map(|l| l.capacity()).collect();
    let ring = WINDOW + MAX_CHUNK - 1;
    // gemma3.attention.sliding_window_pattern is absent: llama.cpp's
    // default period of 6 makes every sixth layer global.
    let want: Vec<usize> = (0..18)
        .map(|l| if l % 6 == 5 { N_CTX } else { ring })
        .collect();
    assert_eq!(caps, want);
    // A context that fits in a ring needs no ring.
    let small = model.new_state(100, Threads::new(1)).unwrap();
    assert!(small.cache.layers().iter().all(|l| l.capacity() == 100));
}

#[test]
fn logits_do_not_depend_on_threads_or_chunking() {
    let model = model();
    let toks = tokens(37, 0);
    let reference = logits(model.as_ref(), &toks, Logits::All, 1, MAX_CHUNK);
    assert_eq!(reference.len(), toks.len() * model.n_vocab());
    assert!(reference.iter().all(|&b| f32::from_bits(b).is_finite()));
    for (threads, chunk) in [(2, MAX_CHUNK), (2, 1), (1, 7), (2, 64)] {
        assert!(
            logits(model.as_ref(), &toks, Logits::All, threads, chunk) == reference,
            "logits differ with {threads} threads and chunks of {chunk}"
        );
    }
}

#[test]
fn past_the_window_logits_do_not_depend_on_threads_or_chunking() {
    let model = model();
    let toks = tokens(LONG, 1);
    let reference = logits(model.as_ref(), &toks, Logits::Last, 1, MAX_CHUNK);
    for (threads, chunk) in [(2, MAX_CHUNK), (2, 1), (1, 7), (2, 64)] {
        assert!(
            logits(model.as_ref(), &toks, Logits::Last, threads, chunk) == reference,
            "last-token logits after {LONG} tokens differ with {threads} threads and chunks of {chunk}"
        );
    }
}

#[test]
fn one_call_per_token_matches_one_batch() {
    let model = model();
    let toks = tokens(37, 2);
    let batch = logits(model.as_ref(), &toks, Logits::Last, 2, MAX_CHUNK);
    let mut single = model.new_state(N_CTX, Threads::new(1)).unwrap();
    let mut out = Vec::new();
    for &t in &toks {
        model
            .forward(&[t], &mut single, Logits::Last, &mut out)
            .unwrap();
    }
    let out: Vec<u32> = out.iter().map(|v| v.to_bits()).collect();
    assert!(out == batch, "last-token logits differ");
}

#[test]
fn rewinding_a_wrapped_cache_recomputes_what_the_ring_lost() {
    let (file, model) = open_causal_lm(&common::real_model("gemma3-270m")).unwrap();
    let tok = Tokenizer::from_gguf(file.metadata()).unwrap();
    let long = tokens(LONG, 3);
    let fresh_logits = |prompt: &[u32]| {
        let mut s = Session::new(model.as_ref(), &tok, Some(N_CTX), Threads::new(2)).unwrap();
        s.set_prompt(prompt).unwrap();
        s.logits().to_vec()
    };
    let mut session = Session::new(model.as_ref(), &tok, Some(N_CTX), Threads::new(2)).unwrap();
    session.set_prompt(&long).unwrap();

    // Back by fewer than MAX_CHUNK positions: the rings still hold every
    // key the new tokens attend to, so the cache is reused.
    let mut near = long[..LONG - 100].to_vec();
    near.extend(tokens(5, 4));
    session.set_prompt(&near).unwrap();
    assert_eq!(session.stats.reused_tokens, LONG - 100);
    assert!(session.logits() == fresh_logits(&near).as_slice());

    // Back by more: the rings have overwritten keys of positions before
    // the cut, so everything is recomputed.
    let mut far = long[..300].to_vec();
    far.extend(tokens(5, 5));
    session.set_prompt(&far).unwrap();
    assert_eq!(session.stats.reused_tokens, 0);
    assert!(session.logits() == fresh_logits(&far).as_slice());
}
