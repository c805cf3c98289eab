//! Tiled attention's determinism contract on random caches: a row's bits
//! do not depend on the chunk of the prompt it comes in (one call, chunks
//! of 7, 64 or 256, or token by token: the decode path and its split-K),
//! nor on the thread count (1, 2, 3); and the results stay close to a
//! float64 evaluation of the same attention.

use super::{attention, attention_scratch_len, AttnShape, Positions};
use crate::kv_cache::{KvType, LayerKv};
use crate::parallel::Threads;
use ferrite_kernels::dispatch::f16_to_f32_row;

/// A case: heads, KV heads, head size, positions, window, soft-cap,
/// sinks, cache type.
struct Case {
    heads: usize,
    kv: usize,
    hd: usize,
    n: usize,
    window: Option<usize>,
    softcap: Option<f32>,
    sinks: bool,
    ty: KvType,
}

fn values(seed: u64, len: usize, scale: f32) -> Vec<f32> {
    let mut s = seed | 1;
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

/// The case's queries, cache (every position stored), and sinks.
fn setup(c: &Case) -> (Vec<f32>, LayerKv, Vec<f32>) {
    let kv_dim = c.kv * c.hd;
    // Large enough scores that the running maximum moves often.
    let q = values(11, c.n * c.heads * c.hd, 3.0);
    let k = values(22, c.n * kv_dim, 1.0);
    let v = values(33, c.n * kv_dim, 1.0);
    let mut cache = LayerKv::with_type(kv_dim, c.n, c.ty);
    for p in 0..c.n {
        cache.store(
            p,
            &k[p * kv_dim..(p + 1) * kv_dim],
            &v[p * kv_dim..(p + 1) * kv_dim],
        );
    }
    (q, cache, values(44, c.heads, 2.0))
}

/// Attention of every position, in calls of `chunk` tokens on `threads`
/// threads.
fn run(c: &Case, chunk: usize, threads: usize) -> Vec<f32> {
    let (q, cache, sinks) = setup(c);
    let shape = AttnShape {
        n_heads: c.heads,
        n_kv_heads: c.kv,
        head_dim: c.hd,
        scale: 1.0 / (c.hd as f32).sqrt(),
        window: c.window,
        softcap: c.softcap,
        sinks: c.sinks.then_some(&sinks[..]),
    };
    let pool = Threads::new(threads);
    let mut scratch = vec![0f32; threads * attention_scratch_len(c.hd, c.heads / c.kv)];
    let q_dim = c.heads * c.hd;
    let mut out = vec![0f32; c.n * q_dim];
    let mut start = 0;
    while start < c.n {
        let n = chunk.min(c.n - start);
        let rows = start * q_dim..(start + n) * q_dim;
        let at = Positions { start, n };
        attention(
            &q[rows.clone()],
            &cache,
            at,
            &shape,
            &mut scratch,
            &mut out[rows],
            &pool,
        );
        start += n;
    }
    out
}

/// The same attention in float64, each row on its own.
fn oracle(c: &Case) -> Vec<f64> {
    let (q, cache, sinks) = setup(c);
    let (hd, group, q_dim) = (c.hd, c.heads / c.kv, c.heads * c.hd);
    let key = |p: usize, g: usize| -> Vec<f64> {
        if cache.is_f32() {
            cache.key_f32(p)[g * hd..(g + 1) * hd]
                .iter()
                .map(|&x| x as f64)
                .collect()
        } else {
            let mut row = vec![0f32; hd];
            f16_to_f32_row(&cache.key(p)[2 * g * hd..], &mut row);
            row.into_iter().map(|x| x as f64).collect()
        }
    };
    let value = |p: usize, g: usize| -> Vec<f64> {
        if cache.is_f32() {
            cache.value_f32(p)[g * hd..(g + 1) * hd]
                .iter()
                .map(|&x| x as f64)
                .collect()
        } else {
            let mut row = vec![0f32; hd];
            f16_to_f32_row(&cache.value(p)[2 * g * hd..], &mut row);
            row.into_iter().map(|x| x as f64).collect()
        }
    };
    let scale = 1.0 / (c.hd as f32).sqrt();
    let mut out = vec![0f64; c.n * q_dim];
    for t in 0..c.n {
        let first = c.window.map_or(0, |w| (t + 1).saturating_sub(w));
        for h in 0..c.heads {
            let g = h / group;
            let qh = &q[t * q_dim + h * hd..t * q_dim + (h + 1) * hd];
            let mut s: Vec<f64> = (first..=t)
                .map(|p| {
                    let k = key(p, g);
                    let dot: f64 = qh.iter().zip(&k).map(|(&a, b)| a as f64 * b).sum();
                    let x = dot * scale as f64;
                    c.softcap
                        .map_or(x, |cap| (x / cap as f64).tanh() * cap as f64)
                })
                .collect();
            let sink = c.sinks.then(|| sinks[h] as f64);
            let m = s.iter().copied().chain(sink).fold(f64::NEG_INFINITY, f64::max);
            s.iter_mut().for_each(|x| *x = (*x - m).exp());
            let l: f64 = s.iter().sum::<f64>() + sink.map_or(0.0, |k| (k - m).exp());
            let o = &mut out[t * q_dim + h * hd..t * q_dim + (h + 1) * hd];
            for (p, w) in (first..=t).zip(&s) {
                for (o, v) in o.iter_mut().zip(value(p, g)) {
                    *o += w / l * v;
                }
            }
        }
    }
    out
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn check(c: &Case, chunks: &[usize]) {
    let want = run(c, c.n, 1);
    assert!(want.iter().all(|x| x.is_finite()));
    for &chunk in chunks {
        for threads in [1, 2, 3] {
            let got = run(c, chunk, threads);
            assert!(
                bits(&got) == bits(&want),
                "chunk {chunk}, {threads} threads: first difference at {:?}",
                got.iter().zip(&want).position(|(a, b)| a.to_bits() != b.to_bits())
            );
        }
    }
    let exact = oracle(c);
    let err = want
        .iter()
        .zip(&exact)
        .map(|(&a, &b)| (a as f64 - b).abs())
        .fold(0f64, f64::max);
    assert!(err < 2e-5, "max error vs float64 {err:.2e}");
}

/// GQA (4 query heads per KV head) over 2,200 f16 positions: three
/// split-K chunks, a partial last key block; one call, prompt chunks and
/// token by token (decode, split across threads) give the same bits.
#[test]
fn gqa_f16_rows_do_not_depend_on_chunks_or_threads() {
    let c = Case {
        heads: 8,
        kv: 2,
        hd: 64,
        n: 2200,
        window: None,
        softcap: None,
        sinks: false,
        ty: KvType::F16,
    };
    check(&c, &[1, 7, 256]);
}

/// MQA with a sliding window that starts inside key blocks and chunks,
/// soft-capped scores (Gemma 2/3), an odd head size (no constant-size
/// accumulator), f32 cache.
#[test]
fn windowed_softcapped_mqa_rows_do_not_depend_on_chunks_or_threads() {
    let c = Case {
        heads: 3,
        kv: 1,
        hd: 40,
        n: 1300,
        window: Some(1100),
        softcap: Some(5.0),
        sinks: false,
        ty: KvType::F32,
    };
    check(&c, &[1, 64, 100]);
}

/// Sink logits (gpt-oss), one query head per KV head, head size 128,
/// a short window (every row's positions in one or two key blocks).
#[test]
fn sinks_and_short_windows_do_not_depend_on_chunks_or_threads() {
    for window in [None, Some(3), Some(70)] {
        let c = Case {
            heads: 2,
            kv: 2,
            hd: 128,
            n: 1100,
            window,
            softcap: None,
            sinks: true,
            ty: KvType::F16,
        };
        check(&c, &[1, 33]);
    }
}

/// The per-row core's result (the decoders' attention before issue 46:
/// normalized probabilities, then the values summed with rounded
/// products) on the same (f16-rounded) keys and values, for comparison.
fn per_row_core(c: &Case) -> Vec<f32> {
    use super::core::{attend, F32Rows, Scoring};
    let (q, cache, sinks) = setup(c);
    let (hd, group, q_dim, kv_dim) = (c.hd, c.heads / c.kv, c.heads * c.hd, c.kv * c.hd);
    let decode = |row: &[u8]| {
        let mut v = vec![0f32; kv_dim];
        f16_to_f32_row(row, &mut v);
        v
    };
    let keys: Vec<f32> = (0..c.n).flat_map(|p| decode(cache.key(p))).collect();
    let vals: Vec<f32> = (0..c.n).flat_map(|p| decode(cache.value(p))).collect();
    let mut out = vec![0f32; c.n * q_dim];
    let mut scores = vec![0f32; c.n];
    for t in 0..c.n {
        let first = c.window.map_or(0, |w| (t + 1).saturating_sub(w));
        for h in 0..c.heads {
            let g = h / group;
            let src = F32Rows {
                keys: &keys[first * kv_dim + g * hd..],
                values: &vals[first * kv_dim + g * hd..],
                ld: kv_dim,
                n: t + 1 - first,
                head_dim: hd,
                rows: None,
            };
            let how = Scoring {
                scale: 1.0 / (hd as f32).sqrt(),
                bias: None,
                softcap: c.softcap,
                sinks: c.sinks.then(|| &sinks[h..h + 1]),
            };
            let qh = &q[t * q_dim + h * hd..t * q_dim + (h + 1) * hd];
            let o = &mut out[t * q_dim + h * hd..t * q_dim + (h + 1) * hd];
            attend(&src, qh, 1, &how, &mut scores, o);
        }
    }
    out
}

/// Root-mean-square and largest distance from the float64 result.
fn errors(got: &[f32], exact: &[f64]) -> (f64, f64) {
    let (mut sq, mut max) = (0f64, 0f64);
    for (&a, &b) in got.iter().zip(exact) {
        let e = (a as f64 - b).abs();
        sq += e * e;
        max = max.max(e);
    }
    ((sq / got.len() as f64).sqrt(), max)
}

/// Against float64, tiled attention's error (FMA chains, an online
/// softmax, one division at the end) is no larger than the per-row core's
/// (the order before issue 46), on long f16 caches with and without a
/// window, soft-cap and sinks.
#[test]
fn tiled_is_as_close_to_float64_as_the_per_row_core() {
    let cases = [
        (8, 2, 64, 2100, None, None, false),
        (3, 1, 40, 1300, Some(1100), Some(5.0), false),
        (2, 2, 128, 1100, Some(70), None, true),
    ];
    for (heads, kv, hd, n, window, softcap, sinks) in cases {
        let c = Case {
            heads,
            kv,
            hd,
            n,
            window,
            softcap,
            sinks,
            ty: KvType::F16,
        };
        let exact = oracle(&c);
        let (tiled_rms, tiled_max) = errors(&run(&c, 256, 2), &exact);
        let (core_rms, core_max) = errors(&per_row_core(&c), &exact);
        eprintln!(
            "hd {hd}, n {n}, window {window:?}, softcap {softcap:?}, sinks {sinks}: \
             tiled rms {tiled_rms:.3e} max {tiled_max:.3e}; per-row core rms {core_rms:.3e} \
             max {core_max:.3e}"
        );
        assert!(tiled_rms <= core_rms, "{tiled_rms:.3e} > {core_rms:.3e}");
    }
}
