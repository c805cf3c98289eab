//! AVX2 versions of the attention loops of `crate::attend`, bit-identical
//! to its scalar reference: the scores use the float kernel's own lane
//! order, and the weighted sum keeps 64 output values in eight registers
//! while the rows stream past, one multiply and one add (not an FMA) per
//! row and value, in row order.

use std::arch::x86_64::*;

use super::float::f16_dot;
use crate::attend::{f32_bytes, reference, F16Rows};

/// As `crate::attend::scores_f16`.
///
/// # Safety
///
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn scores_f16(
    q: &[f32],
    runs: &[F16Rows],
    head_dim: usize,
    scale: f32,
    out: &mut [f32],
) {
    let whole = |r: &F16Rows| r.n == 0 || (r.n - 1) * r.stride + 2 * head_dim <= r.bytes.len();
    let total: usize = runs.iter().map(|r| r.n).sum();
    if !head_dim.is_multiple_of(LANES)
        || q.len() < head_dim
        || out.len() < total
        || !runs.iter().all(whole)
    {
        // Partial lane chunks or short rows: the float kernel row by row.
        let q = f32_bytes(&q[..head_dim.min(q.len())]);
        let rows = runs
            .iter()
            .flat_map(|run| (0..run.n).map(move |j| run.row(j, head_dim)));
        for (o, k) in out.iter_mut().zip(rows) {
            *o = f16_dot(k, q) * scale;
        }
        return;
    }
    // The float kernel's order, written out for whole chunks of 32 values:
    // four 8-lane sums (value i in vector (i % 32) / 8), each product
    // rounded then added, folded 16, 8, 4, 2, 1.
    let mut o = 0;
    for run in runs {
        for j in 0..run.n {
            let k = &run.bytes[j * run.stride..][..2 * head_dim];
            let mut acc = [_mm256_setzero_ps(); 4];
            for (kc, qc) in k.chunks_exact(2 * LANES).zip(q.chunks_exact(LANES)) {
                for (v, a) in acc.iter_mut().enumerate() {
                    let h = &kc[16 * v..16 * v + 16];
                    // SAFETY: `h` is 16 readable bytes and `qc[8v..8v + 8]`
                    // 8 readable f32; `loadu` has no alignment requirement.
                    let (kv, qv) = unsafe {
                        (
                            _mm256_cvtph_ps(_mm_loadu_si128(h.as_ptr().cast())),
                            _mm256_loadu_ps(qc[8 * v..8 * v + 8].as_ptr()),
                        )
                    };
                    *a = _mm256_add_ps(*a, _mm256_mul_ps(kv, qv));
                }
            }
            let x = _mm256_add_ps(_mm256_add_ps(acc[0], acc[2]), _mm256_add_ps(acc[1], acc[3]));
            let x = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps::<1>(x));
            let x = _mm_add_ps(x, _mm_movehl_ps(x, x));
            let x = _mm_add_ss(x, _mm_shuffle_ps::<0b01>(x, x));
            out[o] = _mm_cvtss_f32(x) * scale;
            o += 1;
        }
    }
}

/// The float kernel's lane count.
const LANES: usize = 32;

/// Values per register block of the weighted sum.
const BLOCK: usize = 64;

/// As `crate::attend::weighted_sum_f16`.
///
/// # Safety
///
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn weighted_sum_f16(p: &[f32], runs: &[F16Rows], out: &mut [f32]) {
    let head_dim = out.len();
    let total: usize = runs.iter().map(|r| r.n).sum();
    let whole = |r: &F16Rows| r.n == 0 || (r.n - 1) * r.stride + 2 * head_dim <= r.bytes.len();
    if p.len() < total || !runs.iter().all(whole) {
        // Short rows or too few weights: the reference handles the edges.
        reference::weighted_sum_f16(p, runs, out);
        return;
    }
    let blocked = head_dim / BLOCK * BLOCK;
    for d0 in (0..blocked).step_by(BLOCK) {
        let mut acc = [_mm256_setzero_ps(); BLOCK / 8];
        let mut weights = p.iter();
        for run in runs {
            for (j, &pj) in (0..run.n).zip(&mut weights) {
                let row = &run.bytes[j * run.stride + 2 * d0..][..2 * BLOCK];
                let pv = _mm256_set1_ps(pj);
                for (k, a) in acc.iter_mut().enumerate() {
                    let h = &row[16 * k..16 * k + 16];
                    // SAFETY: `h` is 16 readable bytes; `loadu` has no
                    // alignment requirement.
                    let v = _mm256_cvtph_ps(unsafe { _mm_loadu_si128(h.as_ptr().cast()) });
                    *a = _mm256_add_ps(*a, _mm256_mul_ps(pv, v));
                }
            }
        }
        for (k, a) in acc.iter().enumerate() {
            let o = &mut out[d0 + 8 * k..d0 + 8 * k + 8];
            // SAFETY: `o` is 8 writable f32; `storeu` has no alignment
            // requirement.
            unsafe { _mm256_storeu_ps(o.as_mut_ptr(), *a) };
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
        reference::weighted_sum_f16(p, &shifted, &mut out[blocked..]);
    }
}
