//! AVX2 versions of the attention loops of `crate::attend`, bit-identical
//! to its scalar reference: the scores use the float kernel's own lane
//! order, each key converted once for two heads of a group (four in the
//! AVX-512 set's build of the same code, which has 32 registers), and the weighted sum keeps 64 output values in eight registers
//! while the rows stream past, one multiply and one add (not an FMA) per
//! row and value, in row order.

use std::arch::x86_64::*;

use crate::attend::{reference, F16Rows};

/// Defines `$name(q, heads, runs, head_dim, scale, out)`, as
/// `crate::attend::scores_f16`, compiled with the target features
/// `$features`: the heads in passes of `$wide` (then two, then one) over the
/// keys, each key chunk converted once per pass.
macro_rules! scores_with {
    ($name:ident, $wide:literal, $features:literal) => {
        /// As `crate::attend::scores_f16`.
        ///
        /// # Safety
        ///
        /// The CPU must support the target features named here.
        #[target_feature(enable = $features)]
        pub(crate) unsafe fn $name(
            q: &[f32],
            heads: usize,
            runs: &[F16Rows],
            head_dim: usize,
            scale: f32,
            out: &mut [f32],
        ) {
            let whole =
                |r: &F16Rows| r.n == 0 || (r.n - 1) * r.stride + 2 * head_dim <= r.bytes.len();
            let total: usize = runs.iter().map(|r| r.n).sum();
            if !head_dim.is_multiple_of(LANES)
                || q.len() < heads * head_dim
                || out.len() < heads * total
                || !runs.iter().all(whole)
            {
                // Partial lane chunks or short rows: the reference handles
                // the edges (the float kernel's order, so the same bits).
                return reference::scores_f16(q, heads, runs, head_dim, scale, out);
            }
            let mut h = 0;
            while h + $wide <= heads {
                pass::<$wide>(q, h, runs, head_dim, scale, out, total);
                h += $wide;
            }
            while h + 2 <= heads {
                pass::<2>(q, h, runs, head_dim, scale, out, total);
                h += 2;
            }
            if h < heads {
                pass::<1>(q, h, runs, head_dim, scale, out, total);
            }
        }
    };
}

scores_with!(scores_f16, 2, "avx2,fma,f16c");
scores_with!(
    scores_f16_512,
    4,
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni"
);

/// Heads `h0..h0 + G` against every key of `runs` (whole chunks and rows,
/// checked by the caller): `out[h * total + j]`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn pass<const G: usize>(
    q: &[f32],
    h0: usize,
    runs: &[F16Rows],
    head_dim: usize,
    scale: f32,
    out: &mut [f32],
    total: usize,
) {
    let qs: [&[f32]; G] = std::array::from_fn(|g| &q[(h0 + g) * head_dim..][..head_dim]);
    let qs = qs.map(|q| q.as_ptr());
    let chunks = head_dim / LANES;
    let mut o = 0;
    let cold = runs.first().is_some_and(|r| r.cold);
    if cold {
        prefetch_first_rows(runs, 2 * head_dim);
    }
    for (r, run) in runs.iter().enumerate() {
        for j in 0..run.n {
            if cold {
                prefetch_row(runs, r, j + ROWS_AHEAD, 2 * head_dim);
            }
            let k = &run.bytes[j * run.stride..][..2 * head_dim];
            // SAFETY: `k` holds `chunks` whole chunks of 32 f16 values and
            // each query as many of 32 f32 values (head_dim = 32 * chunks).
            let s = unsafe { key_scores::<G>(k.as_ptr(), qs, chunks) };
            for (g, s) in s.iter().enumerate() {
                out[(h0 + g) * total + o] = s * scale;
            }
            o += 1;
        }
    }
}

/// `k . q_g` for each of the `G` queries, in the float kernel's order for
/// whole chunks of 32 values: four 8-lane sums per query (value i in
/// vector (i % 32) / 8), each product rounded then added, folded 16, 8, 4,
/// 2, 1. Each chunk of the key is converted once for all the queries.
///
/// # Safety
///
/// AVX2, FMA and F16C; `k` readable for `64 * chunks` bytes (f16 values)
/// and every `qs[g]` for `32 * chunks` f32 values.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn key_scores<const G: usize>(k: *const u8, qs: [*const f32; G], chunks: usize) -> [f32; G] {
    let mut acc = [[_mm256_setzero_ps(); 4]; G];
    for c in 0..chunks {
        // SAFETY (the loads): chunk c of the key and of every query is in
        // bounds by the contract; `loadu` has no alignment requirement.
        let kv: [__m256; 4] = std::array::from_fn(|v| unsafe {
            _mm256_cvtph_ps(_mm_loadu_si128(k.add(2 * LANES * c + 16 * v).cast()))
        });
        for (a, q) in acc.iter_mut().zip(&qs) {
            for v in 0..4 {
                let qv = unsafe { _mm256_loadu_ps(q.add(LANES * c + 8 * v)) };
                a[v] = _mm256_add_ps(a[v], _mm256_mul_ps(kv[v], qv));
            }
        }
    }
    std::array::from_fn(|g| fold(acc[g]))
}

/// The float kernel's fold of its four 8-lane sums: 16, 8, 4, 2, 1.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn fold(acc: [__m256; 4]) -> f32 {
    let x = _mm256_add_ps(_mm256_add_ps(acc[0], acc[2]), _mm256_add_ps(acc[1], acc[3]));
    let x = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps::<1>(x));
    let x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    let x = _mm_add_ss(x, _mm_shuffle_ps::<0b01>(x, x));
    _mm_cvtss_f32(x)
}

/// How many rows ahead of the one being read the loops ask the memory
/// system for, when the rows are marked cold (`F16Rows::cold`). A decoder's cached keys and values are written once per
/// position and read once per token, and the weights streamed between two
/// reads evict them from every cache: without hints each row was a miss
/// waiting on memory (`perf` put most of the loops' samples on the f16
/// loads). With them, the two loops went from 6.1% to 3.7% of a one-thread
/// decode's samples on a Llama-3-shaped 0.44 B Q4_K_M, and tg128 gained
/// 3.7% there and 4.2% on a Qwen3-MoE (Zen 5; 32 rows ahead was slower).
const ROWS_AHEAD: usize = 16;

/// A prefetch hint for the first `len` bytes of row `j` of run `r`,
/// counting on into the next runs if run `r` has fewer rows; nothing past
/// the last row. A hint only: never faults, whatever the address.
#[inline(always)]
fn prefetch_row(runs: &[F16Rows], mut r: usize, mut j: usize, len: usize) {
    while let Some(run) = runs.get(r) {
        if j < run.n {
            let row = run.bytes.as_ptr().wrapping_add(j * run.stride);
            // Every line the row touches: one each 64 bytes, and the
            // line of its last byte (a row need not start on a line).
            for at in (0..len)
                .step_by(64)
                .chain(std::iter::once(len.saturating_sub(1)))
            {
                // SAFETY: SSE is part of x86_64; a prefetch never faults.
                unsafe { _mm_prefetch::<_MM_HINT_T0>(row.wrapping_add(at).cast()) };
            }
            return;
        }
        j -= run.n;
        r += 1;
    }
}

/// Hints for the rows the loops read before their own hints take over.
#[inline(always)]
fn prefetch_first_rows(runs: &[F16Rows], len: usize) {
    for j in 0..ROWS_AHEAD {
        prefetch_row(runs, 0, j, len);
    }
}

/// The float kernel's lane count.
const LANES: usize = 32;

/// Values per register block of the weighted sum.
const BLOCK: usize = 32;

/// Defines `$name(p, heads, runs, out)`, as
/// `crate::attend::weighted_sum_f16`, compiled with the target features
/// `$features`: the heads in passes of `$wide` (then two, then one) over
/// the value rows, each row's block converted once per pass.
macro_rules! weighted_sum_with {
    ($name:ident, $wide:literal, $features:literal) => {
        /// As `crate::attend::weighted_sum_f16`.
        ///
        /// # Safety
        ///
        /// The CPU must support the target features named here.
        #[target_feature(enable = $features)]
        pub(crate) unsafe fn $name(p: &[f32], heads: usize, runs: &[F16Rows], out: &mut [f32]) {
            let head_dim = out.len() / heads.max(1);
            let total: usize = runs.iter().map(|r| r.n).sum();
            let whole =
                |r: &F16Rows| r.n == 0 || (r.n - 1) * r.stride + 2 * head_dim <= r.bytes.len();
            if p.len() < heads * total || !runs.iter().all(whole) {
                // Short rows or too few weights: the reference handles the edges.
                reference::weighted_sum_f16(p, heads, runs, out);
                return;
            }
            let mut h = 0;
            while h + $wide <= heads {
                sum_pass::<$wide>(p, h, runs, out, head_dim, total);
                h += $wide;
            }
            while h + 2 <= heads {
                sum_pass::<2>(p, h, runs, out, head_dim, total);
                h += 2;
            }
            if h < heads {
                sum_pass::<1>(p, h, runs, out, head_dim, total);
            }
        }
    };
}

weighted_sum_with!(weighted_sum_f16, 2, "avx2,fma,f16c");
weighted_sum_with!(
    weighted_sum_f16_512,
    4,
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni"
);

/// Heads `h0..h0 + G` (weights `p[h * total..]`, results `out[h *
/// head_dim..]`) over every row of `runs` (whole rows, checked by the
/// caller): each output value starts at 0 and adds `p_j * v_j[d]` (a
/// rounded product, then a rounded sum) for the rows in order.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn sum_pass<const G: usize>(
    p: &[f32],
    h0: usize,
    runs: &[F16Rows],
    out: &mut [f32],
    head_dim: usize,
    total: usize,
) {
    let ps: [&[f32]; G] = std::array::from_fn(|g| &p[(h0 + g) * total..][..total]);
    let blocked = head_dim / BLOCK * BLOCK;
    let cold = runs.first().is_some_and(|r| r.cold);
    for d0 in (0..blocked).step_by(BLOCK) {
        let mut acc = [[_mm256_setzero_ps(); BLOCK / 8]; G];
        let mut j_all = 0;
        // The first block of values asks for whole rows; the later ones
        // find them in cache.
        if cold && d0 == 0 {
            prefetch_first_rows(runs, 2 * head_dim);
        }
        for (r, run) in runs.iter().enumerate() {
            for j in 0..run.n {
                if cold && d0 == 0 {
                    prefetch_row(runs, r, j + ROWS_AHEAD, 2 * head_dim);
                }
                let row = &run.bytes[j * run.stride + 2 * d0..][..2 * BLOCK];
                // SAFETY: `row` is 2 * BLOCK readable bytes; `loadu` has no
                // alignment requirement.
                let v: [__m256; BLOCK / 8] = std::array::from_fn(|k| unsafe {
                    _mm256_cvtph_ps(_mm_loadu_si128(row.as_ptr().add(16 * k).cast()))
                });
                for (a, pg) in acc.iter_mut().zip(&ps) {
                    let pv = _mm256_set1_ps(pg[j_all]);
                    for (a, &v) in a.iter_mut().zip(&v) {
                        *a = _mm256_add_ps(*a, _mm256_mul_ps(pv, v));
                    }
                }
                j_all += 1;
            }
        }
        for (g, a) in acc.iter().enumerate() {
            let o = &mut out[(h0 + g) * head_dim + d0..][..BLOCK];
            for (k, a) in a.iter().enumerate() {
                // SAFETY: `o[8k..8k + 8]` is 8 writable f32; `storeu` has
                // no alignment requirement.
                unsafe { _mm256_storeu_ps(o[8 * k..8 * k + 8].as_mut_ptr(), *a) };
            }
        }
    }
    if blocked < head_dim {
        // The last values: the reference's loop on shifted rows.
        let shifted: Vec<F16Rows> = runs
            .iter()
            .map(|r| F16Rows {
                bytes: r.bytes.get(2 * blocked..).unwrap_or_default(),
                ..*r
            })
            .collect();
        for (g, pg) in ps.iter().enumerate() {
            let o = &mut out[(h0 + g) * head_dim..][..head_dim];
            reference::weighted_sum_f16(pg, 1, &shifted, &mut o[blocked..]);
        }
    }
}
