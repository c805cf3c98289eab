//! The batched forward pass (several sequences' rows in one call, as the
//! server's continuous batching runs them) gives every sequence the very
//! bits it gets alone, whatever it is batched with, whether it is
//! prefilling or decoding, and a forked (cloned) cache continues exactly
//! as a sequence that was never forked.

mod common;

use common::argmax;

use ferrite::models::decoder::Logits;
use ferrite::models::open_causal_lm;
use ferrite::models::transformer::{BatchItem, Decoder};
use ferrite::parallel::Threads;

/// Prompt ids of three sequences (well inside every vocabulary).
fn prompts() -> [Vec<u32>; 3] {
    let ids = |n: u32, seed: u32| {
        (0..n)
            .map(|i| 100 + (i * 7919 + seed * 104_729) % 40000)
            .collect()
    };
    [ids(5, 1), ids(12, 2), ids(3, 3)]
}

/// One sequence alone: its prompt, then `steps` greedy tokens one at a
/// time; every step's logits bits.
fn alone(model: &Decoder, prompt: &[u32], steps: usize) -> Vec<Vec<u32>> {
    let threads = Threads::new(2);
    let mut cache = model.new_cache(64).unwrap();
    let mut ws = model.new_workspace(64, threads.count());
    let mut logits = Vec::new();
    let mut out = Vec::new();
    let mut next = prompt.to_vec();
    for _ in 0..=steps {
        let items = &mut [BatchItem {
            tokens: &next,
            cache: &mut cache,
            logits: Logits::Last,
        }];
        model
            .forward_batch(items, &mut ws, &threads, &mut logits)
            .unwrap();
        out.push(logits.iter().map(|v| v.to_bits()).collect());
        next = vec![argmax(&logits)];
    }
    out
}

fn check(short_name: &str) {
    let (_file, lm) = open_causal_lm(&common::real_model(short_name)).unwrap();
    let model = lm.decoder();
    let nv = lm.n_vocab();
    let steps = 4;
    let prompts = prompts();
    let want: Vec<_> = prompts.iter().map(|p| alone(model, p, steps)).collect();

    // Sequence 2 joins one step late: its prompt is prefilled in the same
    // pass as the others' first decode step.
    let threads = Threads::new(2);
    let mut caches: Vec<_> = (0..3).map(|_| model.new_cache(64).unwrap()).collect();
    let mut ws = model.new_workspace(64, threads.count());
    let mut next: Vec<Vec<u32>> = prompts.to_vec();
    let mut got: Vec<Vec<Vec<u32>>> = vec![Vec::new(); 3];
    let mut logits = Vec::new();
    for round in 0..=steps + 1 {
        let active: Vec<usize> = (0..3)
            .filter(|&s| if s == 2 { round >= 1 } else { round <= steps })
            .collect();
        let mut items: Vec<BatchItem> = Vec::new();
        for (s, cache) in caches.iter_mut().enumerate() {
            if active.contains(&s) {
                items.push(BatchItem {
                    tokens: &next[s],
                    cache,
                    logits: Logits::Last,
                });
            }
        }
        model
            .forward_batch(&mut items, &mut ws, &threads, &mut logits)
            .unwrap();
        for (i, &s) in active.iter().enumerate() {
            let row = &logits[i * nv..(i + 1) * nv];
            got[s].push(row.iter().map(|v| v.to_bits()).collect());
            next[s] = vec![argmax(row)];
        }
    }
    for s in 0..3 {
        assert_eq!(got[s].len(), want[s].len());
        for (step, (g, w)) in got[s].iter().zip(&want[s]).enumerate() {
            assert!(
                g == w,
                "{short_name}: sequence {s} step {step}: batched logits differ from alone"
            );
        }
    }

    // A fork continues exactly as a sequence that was never forked.
    let mut cache = model.new_cache(64).unwrap();
    let mut logits_a = Vec::new();
    let items = &mut [BatchItem {
        tokens: &prompts[1],
        cache: &mut cache,
        logits: Logits::Last,
    }];
    model
        .forward_batch(items, &mut ws, &threads, &mut logits_a)
        .unwrap();
    let mut fork = cache.clone();
    let continuation = [prompts[0][0]];
    let (mut la, mut lb) = (Vec::new(), Vec::new());
    for (c, out) in [(&mut cache, &mut la), (&mut fork, &mut lb)] {
        let items = &mut [BatchItem {
            tokens: &continuation,
            cache: c,
            logits: Logits::Last,
        }];
        model.forward_batch(items, &mut ws, &threads, out).unwrap();
    }
    let mut whole = prompts[1].clone();
    whole.extend_from_slice(&continuation);
    let mut fresh = model.new_cache(64).unwrap();
    let mut lf = Vec::new();
    let items = &mut [BatchItem {
        tokens: &whole,
        cache: &mut fresh,
        logits: Logits::Last,
    }];
    model
        .forward_batch(items, &mut ws, &threads, &mut lf)
        .unwrap();
    assert!(
        la == lf && lb == lf,
        "{short_name}: a forked cache diverged"
    );
}

#[test]
fn smollm2_batched_rows_are_bit_identical_to_alone() {
    check("smollm2");
}

#[test]
fn gemma3_batched_rows_are_bit_identical_to_alone() {
    check("gemma3-270m");
}

#[test]
fn qwen2_batched_rows_are_bit_identical_to_alone() {
    check("qwen2.5-0.5b");
}

#[test]
fn oversized_or_empty_batches_are_errors() {
    let (_file, lm) = open_causal_lm(&common::real_model("smollm2")).unwrap();
    let model = lm.decoder();
    let threads = Threads::new(1);
    let mut ws = model.new_workspace(600, 1);
    let mut logits = Vec::new();
    let mut cache = model.new_cache(600).unwrap();
    let big = vec![100u32; 300];
    let items = &mut [BatchItem {
        tokens: &big,
        cache: &mut cache,
        logits: Logits::Last,
    }];
    let err = model
        .forward_batch(items, &mut ws, &threads, &mut logits)
        .unwrap_err();
    assert!(err.to_string().contains("larger than"), "{err}");
    let items = &mut [BatchItem {
        tokens: &[],
        cache: &mut cache,
        logits: Logits::Last,
    }];
    let err = model
        .forward_batch(items, &mut ws, &threads, &mut logits)
        .unwrap_err();
    assert!(err.to_string().contains("no tokens"), "{err}");
    let mut small = model.new_cache(4).unwrap();
    let items = &mut [BatchItem {
        tokens: &big[..5],
        cache: &mut small,
        logits: Logits::Last,
    }];
    let err = model
        .forward_batch(items, &mut ws, &threads, &mut logits)
        .unwrap_err();
    assert!(err.to_string().contains("do not fit"), "{err}");
}

/// `Decoder::kv_bytes` is what a full cache holds: whole blocks of
/// `KV_BLOCK` positions, in full layers and in sliding-window rings
/// (Gemma 3's hold 767 positions, not a whole number of blocks), as the
/// pool counts them. `kv_block_bytes` of the first positions is exactly
/// what storing them allocates, and of a later range at least what it
/// adds (what the server reserves for a reply).
#[test]
fn kv_bytes_is_what_a_full_cache_allocates() {
    for (short_name, n_ctx) in [("gemma3-270m", 1001), ("smollm2", 1001), ("smollm2", 64)] {
        let (_file, lm) = open_causal_lm(&common::real_model(short_name)).unwrap();
        let model = lm.decoder();
        let pool = ferrite::kv_cache::KvPool::new();
        let mut cache = model.new_cache_in(n_ctx, &pool).unwrap();
        let mut fill = |range: std::ops::Range<usize>| {
            for layer in cache.layers_mut() {
                let dim = layer.row_bytes() / if layer.is_f32() { 4 } else { 2 };
                let row = vec![0.5f32; dim];
                for pos in range.clone() {
                    layer.store(pos, &row, &row);
                }
            }
        };
        let split = n_ctx / 3 + 1;
        fill(0..split);
        let first = pool.bytes();
        assert_eq!(first, model.kv_block_bytes(0..split, n_ctx), "{short_name}");
        fill(split..n_ctx);
        assert_eq!(
            pool.bytes(),
            model.kv_bytes(n_ctx),
            "{short_name} n_ctx {n_ctx}"
        );
        assert!(pool.bytes() - first <= model.kv_block_bytes(split..n_ctx, n_ctx));
    }
}
