//! Reductions over the rows of a matrix, one result per column: the
//! log-softmax statistics of many hypotheses' next-token logits at once,
//! stored vocabulary-major (`values[v * width + c]` is token `v`'s logit
//! for hypothesis `c`, as [`store_columns`] writes a product's output), in
//! tiles of [`TILE`] rows ([`tile_stats`]) whose sums are then brought
//! together ([`rescaled_sums`]). Every column is reduced on its own by one
//! fixed order of operations, so a column's results do not depend on the
//! width (how many hypotheses share the matrix) or on which lane computes
//! it.
//!
//! The loops are written once as scalar code (`column_fns!`), compiled per
//! kernel set like `crate::math`'s (the compiler vectorizes them, across
//! sixteen columns, or for fewer columns across sixteen rows of one), so
//! every set gives the scalar build's bits.

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
        const _: () = assert!(LANES == $crate::columns::TILE);

        /// Columns `c0..c0 + w` (`w <= LANES`, as many as there are) of
        /// every row, with the row's index.
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

        /// Pairwise sum of sixteen values: adjacent pairs, then pairs of
        /// those, and so on (the order `tile_stats` defines).
        #[inline(always)]
        fn tree_sum(mut e: [f32; LANES]) -> f32 {
            let mut step = 1;
            while step < LANES {
                for i in (0..LANES).step_by(2 * step) {
                    e[i] += e[i + step];
                }
                step *= 2;
            }
            e[0]
        }

        /// Sixteen columns of a tile and their shifts, for `tile_stats`'
        /// exponentials (0 past the tile's rows) summed as `tree_sum`
        /// does: pairs of rows, quadruples, octets.
        struct Tile<'a> {
            values: &'a [f32],
            width: usize,
            c0: usize,
            rows: usize,
            shift: [f32; LANES],
        }

        impl Tile<'_> {
            #[inline(always)]
            fn exps(&self, r: usize) -> [f32; LANES] {
                let mut e = [0f32; LANES];
                if r < self.rows {
                    let start = r * self.width + self.c0;
                    let row = &self.values[start..start + LANES];
                    for i in 0..LANES {
                        e[i] = $crate::math::exp(row[i] - self.shift[i]);
                    }
                }
                e
            }

            #[inline(always)]
            fn pair(&self, r: usize) -> [f32; LANES] {
                add(self.exps(r), self.exps(r + 1))
            }

            #[inline(always)]
            fn quad(&self, r: usize) -> [f32; LANES] {
                add(self.pair(r), self.pair(r + 2))
            }

            #[inline(always)]
            fn oct(&self, r: usize) -> [f32; LANES] {
                add(self.quad(r), self.quad(r + 4))
            }
        }

        #[inline(always)]
        fn add(a: [f32; LANES], b: [f32; LANES]) -> [f32; LANES] {
            let mut s = a;
            for i in 0..LANES {
                s[i] += b[i];
            }
            s
        }

        /// See `crate::columns::tile_stats`.
        #[inline(always)]
        pub fn tile_stats(
            values: &mut [f32],
            width: usize,
            bias: Option<&[f32]>,
            max: &mut [f32],
            sums: &mut [f32],
        ) {
            let rows = values.len() / width;
            let bias_of = |r: usize| bias.map(|b| b[r]);
            for c0 in (0..width).step_by(LANES) {
                let w = (width - c0).min(LANES);
                if w < LANES {
                    // Fewer columns than lanes: column by column, its
                    // sixteen rows side by side.
                    for c in c0..width {
                        let mut x = [f32::NEG_INFINITY; LANES];
                        let mut m = f32::NEG_INFINITY;
                        for (r, x) in x.iter_mut().enumerate().take(rows) {
                            let v = &mut values[r * width + c];
                            if let Some(b) = bias_of(r) {
                                *v += b;
                            }
                            *x = *v;
                            m = m.max(*v);
                        }
                        let shift = if m == f32::NEG_INFINITY { 0.0 } else { m };
                        let mut e = [0f32; LANES];
                        for i in 0..LANES {
                            e[i] = $crate::math::exp(x[i] - shift);
                        }
                        (max[c], sums[c]) = (m, tree_sum(e));
                    }
                    continue;
                }
                // Sixteen columns: the rows one after the other, each
                // row's sixteen columns side by side.
                let mut m = [f32::NEG_INFINITY; LANES];
                for r in 0..rows {
                    let row = lanes_mut(&mut values[r * width..(r + 1) * width], c0);
                    if let Some(b) = bias_of(r) {
                        for v in row.iter_mut() {
                            *v += b;
                        }
                    }
                    for i in 0..LANES {
                        m[i] = m[i].max(row[i]);
                    }
                }
                let mut shift = [0f32; LANES];
                for i in 0..LANES {
                    shift[i] = if m[i] == f32::NEG_INFINITY { 0.0 } else { m[i] };
                }
                let t = Tile {
                    values: &*values,
                    width,
                    c0,
                    rows,
                    shift,
                };
                let total = add(t.oct(0), t.oct(8));
                max[c0..c0 + LANES].copy_from_slice(&m);
                sums[c0..c0 + LANES].copy_from_slice(&total);
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

/// Rows per tile of [`tile_stats`].
pub const TILE: usize = 16;

/// A tile of at most [`TILE`] rows of `width` values: adds `bias[r]` to
/// every value of row `r` (if there is a bias), then sets, per column `c`,
/// `max[c]` to its largest value (NaNs passed over, as by `f32::max`; -inf
/// if none) and `sums[c]` to the sum of `e^(v - max[c])` over its values
/// (`e^(v - 0)` if `max[c]` is -inf), added as a pairwise tree over
/// sixteen slots (adjacent rows, then adjacent pairs, ...; missing rows 0):
/// the same operations whatever the width.
pub fn tile_stats(
    values: &mut [f32],
    width: usize,
    bias: Option<&[f32]>,
    max: &mut [f32],
    sums: &mut [f32],
) {
    assert!(
        width > 0 && values.len().is_multiple_of(width) && values.len() / width <= TILE,
        "at most 16 whole rows"
    );
    assert!(max.len() >= width && sums.len() >= width, "one per column");
    if let Some(b) = bias {
        assert!(b.len() >= values.len() / width, "one bias per row");
    }
    (crate::table::active().tile_stats.f)(values, width, bias, max, sums)
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
/// the weights against token `t`) stored vocabulary-major:
/// `out[r * width + c0 + t] = part[t][r]` for the first `span` rows.
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
    pub use super::portable::{rescaled_sums, store_columns, tile_stats};
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
                // Tiles of 16 rows (and a last shorter one): bias, maxima
                // and pairwise sums against a plain loop per column.
                let mut got = m.clone();
                let (mut max, mut sums) = (vec![0f32; width], vec![0f32; width]);
                for (ti, tile) in got.chunks_mut(TILE * width).enumerate() {
                    let n = tile.len() / width;
                    let b = &bias[ti * TILE..ti * TILE + n];
                    (t.tile_stats.f)(tile, width, Some(b), &mut max, &mut sums);
                    for c in 0..width {
                        let mut want_max = f32::NEG_INFINITY;
                        let mut x = [f32::NEG_INFINITY; 16];
                        for r in 0..n {
                            let v = m[(ti * TILE + r) * width + c] + b[r];
                            assert_eq!(tile[r * width + c].to_bits(), v.to_bits());
                            want_max = want_max.max(v);
                            x[r] = v;
                        }
                        let shift = if want_max == f32::NEG_INFINITY {
                            0.0
                        } else {
                            want_max
                        };
                        let mut e = x.map(|v| crate::math::exp(v - shift));
                        for step in [1, 2, 4, 8] {
                            for i in (0..16).step_by(2 * step) {
                                e[i] += e[i + step];
                            }
                        }
                        let what = format!("{set:?} width {width} tile {ti} column {c}");
                        assert_eq!(max[c].to_bits(), want_max.to_bits(), "{what}");
                        if e[0].is_nan() {
                            // (NaN's sign and payload are not specified.)
                            assert!(sums[c].is_nan(), "{what}");
                        } else {
                            assert_eq!(sums[c].to_bits(), e[0].to_bits(), "{what}");
                        }
                    }
                }
                let finite: Vec<f32> = got
                    .iter()
                    .map(|&v| if v.is_finite() { v } else { 0.0 })
                    .collect();
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
