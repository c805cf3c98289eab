//! Reductions over the rows of a matrix, one result per column: the
//! log-softmax and top-k of many hypotheses' next-token logits at once,
//! stored vocabulary-major (`values[v * width + c]` is token `v`'s logit
//! for hypothesis `c`, as [`store_columns`] writes a product's output).
//! Every column is reduced on its own by the same chain of operations in
//! row order, so a column's results do not depend on the width (how many
//! hypotheses share the matrix) or on which lane computes it.
//!
//! The loops are written once as scalar code over sixteen columns at a
//! time (`column_fns!`), compiled per kernel set like `crate::math`'s
//! (the compiler vectorizes over the sixteen columns; the last, narrower
//! chunk runs the same operations lane by lane), so every set gives the
//! scalar build's bits.

/// Columns handled together by the loops below.
pub const LANES: usize = 16;

/// A column's best rows: (row, score), best first, ties lower row first,
/// at most `k`.
pub type Top = Vec<(usize, f32)>;

/// Inserts `(row, score)` into `top` (kept as [`Top`] says, at most `k`
/// long) unless `k` are held and `score <= ` the k-th best: the rule of a
/// left-to-right scan that keeps the first of equal scores.
#[inline]
pub fn insert_top(top: &mut Top, k: usize, row: usize, score: f32) {
    if top.len() >= k && top.get(k.wrapping_sub(1)).is_some_and(|&(_, f)| score <= f) {
        return;
    }
    let at = top.partition_point(|&(_, s)| s >= score);
    top.insert(at, (row, score));
    top.truncate(k);
}

/// The body of every function below, compiled once per kernel set.
macro_rules! column_fns {
    () => {
        use $crate::columns::LANES;

        /// The columns `c0..c0 + w` (`w <= LANES`) of every row, lane by
        /// lane: `f(row, lane, value)`.
        #[inline(always)]
        fn chunks(
            values: &[f32],
            width: usize,
            c0: usize,
        ) -> impl Iterator<Item = (usize, &[f32])> {
            let w = (width - c0).min(LANES);
            values
                .chunks_exact(width)
                .enumerate()
                .map(move |(r, row)| (r, &row[c0..c0 + w]))
        }

        /// Columns `c0..c0 + LANES` of a row.
        #[inline(always)]
        fn lanes_mut(row: &mut [f32], c0: usize) -> &mut [f32; LANES] {
            (&mut row[c0..c0 + LANES]).try_into().expect("16 columns")
        }

        /// See `crate::columns::add_bias_max`.
        #[inline(always)]
        pub fn add_bias_max(
            values: &mut [f32],
            width: usize,
            bias: Option<&[f32]>,
            max: &mut [f32],
        ) {
            for c0 in (0..width).step_by(LANES) {
                let w = (width - c0).min(LANES);
                let rows = values.chunks_exact_mut(width).enumerate();
                if w < LANES {
                    // The last, narrower chunk: column by column.
                    for c in c0..width {
                        let mut m = max[c];
                        for (r, row) in values.chunks_exact_mut(width).enumerate() {
                            if let Some(bias) = bias {
                                row[c] += bias[r];
                            }
                            m = m.max(row[c]);
                        }
                        max[c] = m;
                    }
                    continue;
                }
                let mut m: [f32; LANES] = max[c0..c0 + LANES].try_into().expect("16 columns");
                if let Some(bias) = bias {
                    for (r, row) in rows {
                        let (row, b) = (lanes_mut(row, c0), bias[r]);
                        for i in 0..LANES {
                            row[i] += b;
                            m[i] = m[i].max(row[i]);
                        }
                    }
                } else {
                    for (_, row) in rows {
                        let row = lanes_mut(row, c0);
                        for i in 0..LANES {
                            m[i] = m[i].max(row[i]);
                        }
                    }
                }
                max[c0..c0 + LANES].copy_from_slice(&m);
            }
        }

        /// See `crate::columns::exp_sums`.
        #[inline(always)]
        pub fn exp_sums(values: &[f32], width: usize, max: &[f32], sums: &mut [f32]) {
            for c0 in (0..width).step_by(LANES) {
                let w = (width - c0).min(LANES);
                // A column whose maximum is -inf holds only -inf (or NaN):
                // its exponentials are 0 (e^(v - 0)).
                let mut m = [0f32; LANES];
                for (m, &x) in m.iter_mut().zip(&max[c0..c0 + w]) {
                    *m = if x == f32::NEG_INFINITY { 0.0 } else { x };
                }
                let mut s = [0f32; LANES];
                s[..w].copy_from_slice(&sums[c0..c0 + w]);
                if w == LANES {
                    for (_, row) in chunks(values, width, c0) {
                        let row: &[f32; LANES] = row.try_into().expect("a full chunk");
                        for i in 0..LANES {
                            s[i] += $crate::math::exp(row[i] - m[i]);
                        }
                    }
                } else {
                    // Fewer columns than lanes: per column, the
                    // exponentials of sixteen rows at once, then added in
                    // row order (the same operations).
                    let rows = values.len() / width;
                    for i in 0..w {
                        let (c, m) = (c0 + i, m[i]);
                        let mut r0 = 0;
                        while r0 < rows {
                            let n = (rows - r0).min(LANES);
                            let mut e = [m; LANES];
                            for (j, e) in e.iter_mut().enumerate().take(n) {
                                *e = values[(r0 + j) * width + c];
                            }
                            for e in e.iter_mut() {
                                *e = $crate::math::exp(*e - m);
                            }
                            for &e in &e[..n] {
                                s[i] += e;
                            }
                            r0 += n;
                        }
                    }
                }
                sums[c0..c0 + w].copy_from_slice(&s[..w]);
            }
        }

        /// See `crate::columns::rescaled_sums`.
        #[inline(always)]
        pub fn rescaled_sums(
            block_max: &[f32],
            block_sums: &[f32],
            width: usize,
            max: &[f32],
            sums: &mut [f32],
        ) {
            for c0 in (0..width).step_by(LANES) {
                let w = (width - c0).min(LANES);
                let mut m = [0f32; LANES];
                m[..w].copy_from_slice(&max[c0..c0 + w]);
                let mut s = [0f32; LANES];
                s[..w].copy_from_slice(&sums[c0..c0 + w]);
                let blocks = chunks(block_max, width, c0).zip(chunks(block_sums, width, c0));
                let term = |bm: f32, bs: f32, m: f32| {
                    if bm == f32::NEG_INFINITY {
                        // 0, or NaN if the block's sum is (NaN values).
                        bs * 0.0
                    } else {
                        bs * $crate::math::exp(bm - m)
                    }
                };
                if w == LANES {
                    for ((_, bm), (_, bs)) in blocks {
                        let bm: &[f32; LANES] = bm.try_into().expect("a full chunk");
                        let bs: &[f32; LANES] = bs.try_into().expect("a full chunk");
                        for i in 0..LANES {
                            s[i] += term(bm[i], bs[i], m[i]);
                        }
                    }
                } else {
                    // Fewer columns than lanes: per column, sixteen blocks'
                    // terms at once, then added in block order.
                    drop(blocks);
                    let n_blocks = block_max.len() / width;
                    for i in 0..w {
                        let c = c0 + i;
                        let mut b0 = 0;
                        while b0 < n_blocks {
                            let n = (n_blocks - b0).min(LANES);
                            let (mut bm, mut bs) = ([0f32; LANES], [0f32; LANES]);
                            for j in 0..n {
                                bm[j] = block_max[(b0 + j) * width + c];
                                bs[j] = block_sums[(b0 + j) * width + c];
                            }
                            let mut t = [0f32; LANES];
                            for j in 0..LANES {
                                t[j] = term(bm[j], bs[j], m[i]);
                            }
                            for &t in &t[..n] {
                                s[i] += t;
                            }
                            b0 += n;
                        }
                    }
                }
                sums[c0..c0 + w].copy_from_slice(&s[..w]);
            }
        }

        /// See `crate::columns::store_columns`.
        #[inline(always)]
        pub fn store_columns(
            part: &[[f32; 16]],
            span: usize,
            out: &mut [f32],
            width: usize,
            c0: usize,
        ) {
            for (r, o) in out.chunks_mut(width).take(span).enumerate() {
                for (o, p) in o[c0..c0 + part.len()].iter_mut().zip(part) {
                    *o = p[r];
                }
            }
        }
    };
}
pub(crate) use column_fns;

mod portable {
    crate::columns::column_fns!();
}

/// Adds `bias[r]` to every value of row `r` (if there is a bias), and
/// raises `max[c]` to the largest value of column `c` (NaNs
/// passed over, as by `f32::max`). `values` is rows of `width` values.
pub fn add_bias_max(values: &mut [f32], width: usize, bias: Option<&[f32]>, max: &mut [f32]) {
    assert!(
        width > 0 && values.len().is_multiple_of(width),
        "whole rows"
    );
    assert!(max.len() >= width, "one maximum per column");
    if let Some(b) = bias {
        assert!(b.len() >= values.len() / width, "one bias per row");
    }
    (crate::table::active().add_bias_max.f)(values, width, bias, max)
}

/// `sums[c] += e^(v - max[c])` for every value `v` of column `c`, row by
/// row (`crate::math::exp`); a column whose maximum is -inf (so that its
/// values are -inf, or NaN) takes `e^(v - 0)`: 0 for -inf.
pub fn exp_sums(values: &[f32], width: usize, max: &[f32], sums: &mut [f32]) {
    assert!(
        width > 0 && values.len().is_multiple_of(width),
        "whole rows"
    );
    assert!(max.len() >= width && sums.len() >= width, "one per column");
    (crate::table::active().exp_sums.f)(values, width, max, sums)
}

/// `sums[c] += s_b * e^(m_b - max[c])` for every row `b` of `block_max`
/// (m_b) and `block_sums` (s_b) in order, rows whose m_b is -inf adding
/// `s_b * 0` (nothing, or NaN if the block had NaNs): blocks' sums of `e^(v - m_b)` (each over its own maximum m_b)
/// brought to the common maximum `max[c]` and added up.
pub fn rescaled_sums(
    block_max: &[f32],
    block_sums: &[f32],
    width: usize,
    max: &[f32],
    sums: &mut [f32],
) {
    assert!(
        width > 0 && block_max.len().is_multiple_of(width),
        "whole rows"
    );
    assert_eq!(block_max.len(), block_sums.len(), "a sum per maximum");
    assert!(max.len() >= width && sums.len() >= width, "one per column");
    (crate::table::active().rescaled_sums.f)(block_max, block_sums, width, max, sums)
}

/// A product's results for up to sixteen tokens (`part[t][r]`: row `r` of
/// the weights against token `t`) stored vocabulary-major: `out[r * width
/// + c0 + t] = part[t][r]` for the first `span` rows.
pub fn store_columns(part: &[[f32; 16]], span: usize, out: &mut [f32], width: usize, c0: usize) {
    assert!(part.len() <= 16 && span <= 16, "at most a 16 x 16 tile");
    assert!(c0 + part.len() <= width, "the tile's columns fit the width");
    assert!(
        span == 0 || out.len() >= (span - 1) * width + c0 + part.len(),
        "the tile's rows fit the output"
    );
    (crate::table::active().store_columns.f)(part, span, out, width, c0)
}

/// The portable versions, for tests comparing kernel sets.
pub mod reference {
    pub use super::portable::{add_bias_max, exp_sums, rescaled_sums, store_columns};
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dispatch::KernelSet;

    fn random_matrix(rows: usize, width: usize, seed: u64) -> Vec<f32> {
        let mut next = crate::xorshift(seed);
        (0..rows * width)
            .map(|_| ((next() >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 20.0)
            .collect()
    }

    /// Every set's column functions against plain per-column loops over
    /// the rows (the scalar reference is such a loop), at widths around
    /// the sixteen lanes, with ties, NaNs and infinities.
    #[test]
    fn columns_equal_per_column_loops() {
        for width in [1, 3, 15, 16, 17, 33, 64] {
            let rows = 301;
            let mut m = random_matrix(rows, width, width as u64 + 7);
            // Ties (equal values down a column), a NaN and infinities.
            for r in (0..rows).step_by(37) {
                m[r * width] = 3.0;
            }
            m[5 * width + width / 2] = f32::NAN;
            m[9 * width] = f32::NEG_INFINITY;
            m[11 * width + width - 1] = f32::INFINITY;
            let bias: Vec<f32> = (0..rows).map(|r| (r % 7) as f32 * 0.25 - 0.5).collect();
            for set in KernelSet::ALL {
                let Some(t) = set.table() else {
                    eprintln!("SKIPPED {set:?}: not supported by this CPU");
                    continue;
                };
                // Bias and maximum.
                let mut got = m.clone();
                let mut max = vec![f32::NEG_INFINITY; width];
                (t.add_bias_max.f)(&mut got, width, Some(&bias), &mut max);
                for c in 0..width {
                    let mut want_max = f32::NEG_INFINITY;
                    for r in 0..rows {
                        let v = m[r * width + c] + bias[r];
                        assert_eq!(got[r * width + c].to_bits(), v.to_bits());
                        want_max = want_max.max(v);
                    }
                    assert_eq!(max[c], want_max, "{set:?} width {width} column {c}");
                }
                // Sums of exponentials, in row order.
                let finite: Vec<f32> = got
                    .iter()
                    .map(|&v| if v.is_finite() { v } else { 0.0 })
                    .collect();
                let mut sums = vec![0.5f32; width];
                (t.exp_sums.f)(&finite, width, &max, &mut sums);
                for c in 0..width {
                    let mut s = 0.5f32;
                    let m = if max[c] == f32::NEG_INFINITY {
                        0.0
                    } else {
                        max[c]
                    };
                    for r in 0..rows {
                        s += crate::math::exp(finite[r * width + c] - m);
                    }
                    assert_eq!(
                        sums[c].to_bits(),
                        s.to_bits(),
                        "{set:?} width {width} column {c}"
                    );
                }
                // Blocks' sums brought to a common maximum.
                let bm: Vec<f32> = finite.iter().map(|&v| v * 0.5).collect();
                let mut bm_inf = bm.clone();
                bm_inf[7 * width + width / 3] = f32::NEG_INFINITY;
                let mut sums2 = vec![0.25f32; width];
                (t.rescaled_sums.f)(&bm_inf, &finite, width, &max, &mut sums2);
                for c in 0..width {
                    let mut s = 0.25f32;
                    for r in 0..rows {
                        let m = bm_inf[r * width + c];
                        s += if m == f32::NEG_INFINITY {
                            finite[r * width + c] * 0.0
                        } else {
                            finite[r * width + c] * crate::math::exp(m - max[c])
                        };
                    }
                    assert_eq!(
                        sums2[c].to_bits(),
                        s.to_bits(),
                        "{set:?} width {width} column {c}"
                    );
                }
            }
        }
    }

    /// `insert_top` keeps the k best, best first, the first of equal
    /// scores first: a stable sort's first k.
    #[test]
    fn insert_top_is_a_stable_sorts_head() {
        let mut next = crate::xorshift(99);
        let scores: Vec<f32> = (0..500).map(|_| (next() % 40) as f32).collect();
        let mut top = Vec::new();
        for (r, &s) in scores.iter().enumerate() {
            insert_top(&mut top, 7, r, s);
        }
        let mut all: Vec<(usize, f32)> = scores.iter().copied().enumerate().collect();
        all.sort_by(|a, b| b.1.total_cmp(&a.1));
        assert_eq!(top, all[..7].to_vec());
    }

    /// Every set's tile store against the plain loop, for every tile size.
    #[test]
    fn store_columns_transposes_the_tile() {
        let mut next = crate::xorshift(5);
        let tile: Vec<[f32; 16]> = (0..16)
            .map(|_| std::array::from_fn(|_| (next() % 1000) as f32))
            .collect();
        for set in KernelSet::ALL {
            let Some(t) = set.table() else {
                continue;
            };
            for tokens in 0..=16 {
                for span in [0, 1, 8, 15, 16] {
                    let (width, c0) = (tokens + 5, 3);
                    let mut got = vec![-1f32; 16 * width];
                    (t.store_columns.f)(&tile[..tokens], span, &mut got, width, c0);
                    for r in 0..16 {
                        for c in 0..width {
                            let want = if r < span && c >= c0 && c < c0 + tokens {
                                tile[c - c0][r]
                            } else {
                                -1.0
                            };
                            assert_eq!(got[r * width + c], want, "{set:?} {tokens} x {span}");
                        }
                    }
                }
            }
        }
    }
}
