//! Determinism checks of a decoder's forward passes (mixture-of-experts
//! tests): a row's logits must not depend on which other rows share the
//! batch, on the thread count, or on whether it was fed alone (decoding)
//! or within a prompt chunk.

use ferrite::models::decoder::Logits;
use ferrite::models::transformer::BatchItem;
use ferrite::models::CausalLm;
use ferrite::parallel::Threads;

/// Every position's logits of `tokens` fed as one chunk, with `n` threads.
pub fn logits_with_threads(model: &dyn CausalLm, tokens: &[u32], n: usize) -> Vec<f32> {
    let mut st = model.new_state(64, Threads::new(n)).unwrap();
    let mut out = Vec::new();
    model
        .forward(tokens, &mut st, Logits::All, &mut out)
        .unwrap();
    out
}

/// Whether two runs' values have the same bits.
pub fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

/// Asserts that the sequences `seqs`, run together in one forward pass
/// (so experts run over rows of different sequences gathered together),
/// give each sequence exactly the logits it gets alone; that one thread
/// gives two threads' bits on `seqs[0]`; and that `seqs[0]` decoded one
/// token at a time (one row per pass: the decoding path) gives the bits of
/// the whole of it fed as one chunk.
pub fn assert_batch_independent(model: &dyn CausalLm, seqs: &[&[u32]], what: &str) {
    let d = model.decoder();
    let threads = Threads::new(2);
    let run = |items: &mut [BatchItem], ws: &mut _| {
        let mut out = Vec::new();
        d.forward_batch(items, ws, &threads, &mut out).unwrap();
        out
    };
    let alone: Vec<Vec<f32>> = seqs
        .iter()
        .map(|s| {
            let mut cache = d.new_cache(64).unwrap();
            let mut ws = d.new_workspace(64, 2);
            let items = &mut [BatchItem {
                tokens: s,
                cache: &mut cache,
                logits: Logits::All,
            }];
            run(items, &mut ws)
        })
        .collect();
    let mut caches: Vec<_> = seqs.iter().map(|_| d.new_cache(64).unwrap()).collect();
    let mut ws = d.new_workspace(64, 2);
    let mut items: Vec<BatchItem> = seqs
        .iter()
        .zip(caches.iter_mut())
        .map(|(s, cache)| BatchItem {
            tokens: s,
            cache,
            logits: Logits::All,
        })
        .collect();
    let out = run(&mut items, &mut ws);
    assert!(
        same_bits(&out, &alone.concat()),
        "{what}: batched logits differ from each sequence alone"
    );
    let one = logits_with_threads(model, seqs[0], 1);
    let two = logits_with_threads(model, seqs[0], 2);
    assert!(same_bits(&one, &two), "{what}: one thread against two");
    // Token by token: each pass has one row.
    for n in [1, 2] {
        let mut st = model.new_state(64, Threads::new(n)).unwrap();
        let mut stepped = Vec::new();
        for &t in seqs[0] {
            let mut out = Vec::new();
            model.forward(&[t], &mut st, Logits::All, &mut out).unwrap();
            stepped.extend(out);
        }
        assert!(
            same_bits(&stepped, &two),
            "{what}: decoded token by token ({n} threads) against one chunk"
        );
    }
}
