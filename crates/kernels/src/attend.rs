//! The two inner loops of attention over an f16 KV cache: the scores of
//! one query against a run of cached keys, and the probability-weighted
//! sum of cached values.
//!
//! Both have one fixed order of f32 operations per output value, written
//! here in scalar code; the AVX2 versions (`crate::x86::avx2::attend`) give
//! the same bits:
//!
//! - a score is the float dot product of `crate::dot` (32 lanes, products
//!   and sums rounded separately, lanes folded in halves), times `scale`;
//! - `out[d]` starts at 0 and adds `p[j] * v_j[d]` (a rounded product, then
//!   a rounded sum) for the rows in order.
//!
//! The f16 -> f32 conversion is exact, so a score equals the float kernel
//! applied to the f16 bytes directly.

use crate::dispatch::scalar_vec_dot_kernel;
use crate::quant::float::f16_le;
use crate::GgmlType;

/// `n` rows of f16 values, row `j` starting at byte `j * stride` of
/// `bytes` (little-endian f16; a row is `head_dim` values, so the last one
/// only needs `2 * head_dim` bytes).
#[derive(Clone, Copy, Debug)]
pub struct F16Rows<'a> {
    pub bytes: &'a [u8],
    pub stride: usize,
    pub n: usize,
    /// The rows are probably in no cache (a decoder's cache in a decode
    /// step: each row is read once per token, and the weights streamed
    /// since evict it): a kernel may ask for rows ahead of the one it
    /// reads. A hint only: no result depends on it. Where the rows were
    /// just read or written (a prompt's many queries), the hints only cost
    /// time (5% of a prompt's speed).
    pub cold: bool,
}

impl<'a> F16Rows<'a> {
    /// Row `j`: `2 * head_dim` bytes (shorter if `bytes` ends first).
    #[inline]
    pub(crate) fn row(&self, j: usize, head_dim: usize) -> &'a [u8] {
        let start = (j * self.stride).min(self.bytes.len());
        let end = (start + 2 * head_dim).min(self.bytes.len());
        &self.bytes[start..end]
    }
}

/// For each of `heads` query heads `q_h` (`q` holds them one after the
/// other, `head_dim` values each): `out[h * n + j] = (k_j . q_h) * scale`
/// for every row `k_j` of `runs`, in order, `n` being the rows of the runs
/// (`out` holds at least `heads * n` values). The heads of a group that
/// share these keys: a kernel may convert each key once for all of them.
pub fn scores_f16(
    q: &[f32],
    heads: usize,
    runs: &[F16Rows],
    head_dim: usize,
    scale: f32,
    out: &mut [f32],
) {
    (crate::table::active().scores_f16.f)(q, heads, runs, head_dim, scale, out);
}

/// For each of `heads` heads `h` (weights `p[h * n..(h + 1) * n]`, `n` the
/// rows of `runs`; results `out[h * head_dim..]`, `head_dim = out.len() /
/// heads`): `out[d] = sum_j p[j] * v_j[d]` over the rows `v_j` of `runs` in
/// order, starting from 0. The heads of a group that share these values: a
/// kernel may convert each row once for all of them.
pub fn weighted_sum_f16(p: &[f32], heads: usize, runs: &[F16Rows], out: &mut [f32]) {
    (crate::table::active().weighted_sum_f16.f)(p, heads, runs, out);
}

/// The scalar reference of the two loops (public for tests).
pub mod reference {
    use super::*;

    /// As [`super::scores_f16`], in scalar code: each head on its own.
    pub fn scores_f16(
        q: &[f32],
        heads: usize,
        runs: &[F16Rows],
        head_dim: usize,
        scale: f32,
        out: &mut [f32],
    ) {
        let dot = scalar_vec_dot_kernel(GgmlType::F16)
            .expect("the f16 dot product always exists")
            .dot;
        let n: usize = runs.iter().map(|r| r.n).sum();
        for h in 0..heads {
            let q = q.get(h * head_dim..).unwrap_or_default();
            let q = f32_bytes(&q[..head_dim.min(q.len())]);
            let out = out.get_mut(h * n..).unwrap_or_default();
            let rows = runs
                .iter()
                .flat_map(|run| (0..run.n).map(move |j| run.row(j, head_dim)));
            for (o, k) in out.iter_mut().zip(rows) {
                *o = dot(k, q) * scale;
            }
        }
    }

    /// As [`super::weighted_sum_f16`], in scalar code: each head on its own.
    pub fn weighted_sum_f16(p: &[f32], heads: usize, runs: &[F16Rows], out: &mut [f32]) {
        let head_dim = out.len() / heads.max(1);
        let n: usize = runs.iter().map(|r| r.n).sum();
        for (h, out) in out
            .chunks_exact_mut(head_dim.max(1))
            .take(heads)
            .enumerate()
        {
            out.fill(0.0);
            let p = p.get(h * n..).unwrap_or_default();
            let rows = runs
                .iter()
                .flat_map(|run| (0..run.n).map(move |j| run.row(j, head_dim)));
            for (&p, v) in p.iter().take(n).zip(rows) {
                for (o, b) in out.iter_mut().zip(v.chunks_exact(2)) {
                    *o += p * f16_le([b[0], b[1]]);
                }
            }
        }
    }
}

/// The bytes of an f32 slice.
pub(crate) fn f32_bytes(x: &[f32]) -> &[u8] {
    // SAFETY: f32 has no padding and any byte pattern may be read as u8;
    // the length is the same memory in bytes, the lifetime the input's.
    unsafe { std::slice::from_raw_parts(x.as_ptr().cast::<u8>(), std::mem::size_of_val(x)) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dispatch::KernelSet;

    fn f16_bits(x: f32) -> [u8; 2] {
        crate::quant::f16_bits_from_f32(x).to_le_bytes()
    }

    #[test]
    fn fast_loops_match_the_reference_bit_for_bit() {
        let mut rng = crate::xorshift(0x1234_5678_9abc_def0);
        let mut next = move || ((rng() >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0;
        for head_dim in [1, 7, 8, 31, 32, 64, 72, 256] {
            for n in [1usize, 2, 5, 33] {
                let kv_dim = head_dim * 3 + 5;
                let cache: Vec<u8> = (0..(n + 3) * kv_dim)
                    .flat_map(|_| f16_bits(next()))
                    .collect();
                let off = 2 * head_dim;
                // Two runs, as a wrapped ring gives them.
                let first = n / 2;
                let runs = [
                    F16Rows {
                        bytes: &cache[off + 2 * kv_dim * 3..],
                        stride: 2 * kv_dim,
                        n: first,
                        cold: n % 2 == 1,
                    },
                    F16Rows {
                        bytes: &cache[off..],
                        stride: 2 * kv_dim,
                        n: n - first,
                        cold: n % 2 == 1,
                    },
                ];
                // Up to seven heads of a group (one, pairs, fours, odd).
                let heads = 1 + head_dim % 7;
                let q: Vec<f32> = (0..heads * head_dim).map(|_| next()).collect();
                let p: Vec<f32> = (0..heads * n).map(|_| next().abs()).collect();
                let mut s_ref = vec![0f32; heads * n];
                reference::scores_f16(&q, heads, &runs, head_dim, 0.125, &mut s_ref);
                let mut o_ref = vec![2f32; heads * head_dim];
                reference::weighted_sum_f16(&p, heads, &runs, &mut o_ref);
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                for set in KernelSet::ALL {
                    let Some(t) = set.table() else {
                        eprintln!("SKIPPED {}: not supported by this CPU", set.name());
                        continue;
                    };
                    let mut s_fast = vec![0f32; heads * n];
                    (t.scores_f16.f)(&q, heads, &runs, head_dim, 0.125, &mut s_fast);
                    let mut o_fast = vec![1f32; heads * head_dim];
                    (t.weighted_sum_f16.f)(&p, heads, &runs, &mut o_fast);
                    let name = set.name();
                    assert_eq!(
                        bits(&s_fast),
                        bits(&s_ref),
                        "{name} scores hd={head_dim} n={n} heads={heads}"
                    );
                    assert_eq!(
                        bits(&o_fast),
                        bits(&o_ref),
                        "{name} sum hd={head_dim} n={n} heads={heads}"
                    );
                }
            }
        }
    }

    /// Extreme values: f16 subnormals, the largest finite f16, signed
    /// zeros, infinities and NaNs in the cache; huge, tiny and signed-zero
    /// queries and weights (sums that overflow to infinity, infinities
    /// meeting zeros). Every result has the reference's bits, or both are
    /// NaN.
    #[test]
    fn fast_loops_match_the_reference_on_extreme_values() {
        const F16: [u16; 11] = [
            0x0000, 0x8000, 0x0001, 0x8001, 0x03ff, 0x7bff, 0xfbff, 0x3c00, 0x7c00, 0xfc00, 0x7e00,
        ];
        const F32: [f32; 8] = [
            0.0,
            -0.0,
            1e-45,
            3.0e38,
            -3.0e38,
            1.0,
            f32::MIN_POSITIVE,
            -2.5,
        ];
        let same = |a: &[f32], b: &[f32]| {
            a.iter()
                .zip(b)
                .all(|(x, y)| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()))
        };
        for (case, head_dim) in [3usize, 16, 33, 64, 80].into_iter().enumerate() {
            // Finite-only caches (every other case), so that most sums
            // stay numbers, and caches with infinities and NaNs.
            let pick = if case % 2 == 0 { 8 } else { F16.len() };
            let n = 9;
            let cache: Vec<u8> = (0..n * head_dim)
                .flat_map(|i| F16[(i * 7 + case) % pick].to_le_bytes())
                .collect();
            let runs = [F16Rows {
                bytes: &cache,
                stride: 2 * head_dim,
                n,
                cold: case % 2 == 1,
            }];
            let heads = 7;
            let q: Vec<f32> = (0..heads * head_dim)
                .map(|i| F32[(i * 5 + case) % F32.len()])
                .collect();
            let p: Vec<f32> = (0..heads * n)
                .map(|i| F32[(i * 3 + case) % F32.len()])
                .collect();
            let mut s_ref = vec![0f32; heads * n];
            reference::scores_f16(&q, heads, &runs, head_dim, 0.5, &mut s_ref);
            let mut o_ref = vec![0f32; heads * head_dim];
            reference::weighted_sum_f16(&p, heads, &runs, &mut o_ref);
            for set in KernelSet::ALL {
                let Some(t) = set.table() else {
                    continue;
                };
                let mut s_fast = vec![0f32; heads * n];
                (t.scores_f16.f)(&q, heads, &runs, head_dim, 0.5, &mut s_fast);
                let mut o_fast = vec![0f32; heads * head_dim];
                (t.weighted_sum_f16.f)(&p, heads, &runs, &mut o_fast);
                assert!(same(&s_fast, &s_ref), "{} scores hd={head_dim}", set.name());
                assert!(same(&o_fast, &o_ref), "{} sums hd={head_dim}", set.name());
            }
        }
    }
}
