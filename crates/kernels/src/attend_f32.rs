//! The two inner loops of attention over f32 keys and values kept as rows
//! of a matrix (the encoder-decoders' self- and cross-attention caches):
//! the scores of one query row's heads, and the probability-weighted sum
//! of values; the f32 counterparts of `crate::attend`'s f16 loops, which
//! the library's one attention core (`ferrite::layers::attention`) calls
//! around its softmax. Written once as scalar code (`attend_f32_fns!`) and
//! compiled per kernel set like `crate::math`: the compiler vectorizes it,
//! every operation is an exactly rounded IEEE one in the same order, so
//! every set gives the scalar build's bits.
//!
//! Per head: score `s_j = dot(q, k_j) * scale` (the dot product in eight
//! interleaved partial sums of rounded products, folded in lane order,
//! then the tail: not `crate::dot`'s 32 lanes folded in halves), and
//! `out[d] = sum_j p_j * v_j[d]` from 0, positions in order, each product
//! rounded before it is added (as `crate::attend::weighted_sum_f16`).

/// The bodies of [`scores`] and [`weighted_sum`], compiled once per
/// kernel set.
macro_rules! attend_f32_fns {
    () => {
        #[inline(always)]
        fn dot(a: &[f32], b: &[f32]) -> f32 {
            let mut lanes = [0f32; 8];
            let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
            let (ra, rb) = (ca.remainder(), cb.remainder());
            for (x, y) in ca.zip(cb) {
                for i in 0..8 {
                    lanes[i] += x[i] * y[i];
                }
            }
            let mut s = 0.0;
            for l in lanes {
                s += l;
            }
            for (x, y) in ra.iter().zip(rb) {
                s += x * y;
            }
            s
        }

        /// See `crate::attend_f32::scores`.
        #[inline(always)]
        pub fn scores(a: &$crate::attend_f32::Heads, heads: usize, out: &mut [f32]) {
            let (q, hd, n) = (a.q, a.hd, a.n);
            for j in 0..n {
                let k = a.key_row(j, heads);
                for i in 0..heads {
                    let (qh, kh) = (&q[i * hd..(i + 1) * hd], &k[i * hd..(i + 1) * hd]);
                    out[i * n + j] = dot(qh, kh) * a.scale;
                }
            }
        }

        /// See `crate::attend_f32::weighted_sum`.
        #[inline(always)]
        pub fn weighted_sum(a: &$crate::attend_f32::Heads, p: &[f32], out: &mut [f32]) {
            let (hd, n) = (a.hd, a.n);
            let heads = out.len() / hd;
            out.fill(0.0);
            for j in 0..n {
                let v = a.value_row(j, heads);
                for (i, (o, v)) in out.chunks_exact_mut(hd).zip(v.chunks_exact(hd)).enumerate() {
                    let w = p[i * n + j];
                    for (o, &x) in o.iter_mut().zip(v) {
                        *o += w * x;
                    }
                }
            }
        }
    };
}
pub(crate) use attend_f32_fns;

mod portable {
    crate::attend_f32::attend_f32_fns!();
}

/// Heads of one query row and the cached positions they attend to: head
/// `i`'s query is `q[i * hd..(i + 1) * hd]`, its key and value at position
/// `j < n` are `keys[j * ld + i * hd..]` and `values[j * ld + i * hd..]`
/// (`hd` values each: positions stored in order as rows of a matrix), or,
/// if `rows` lists each position's own key and value rows (a KV cache's
/// rows, wherever they are), `rows.keys[j][rows.offset + i * hd..]` and
/// `rows.values[j][rows.offset + i * hd..]`.
#[derive(Clone, Copy, Debug)]
pub struct Heads<'a> {
    pub q: &'a [f32],
    pub keys: &'a [f32],
    pub values: &'a [f32],
    pub ld: usize,
    pub n: usize,
    pub hd: usize,
    pub scale: f32,
    pub rows: Option<Listed<'a>>,
}

/// The key and value rows of each position, listed (`keys[j]`,
/// `values[j]` for position `j`), read from value `offset` on.
#[derive(Clone, Copy, Debug)]
pub struct Listed<'a> {
    pub keys: &'a [&'a [f32]],
    pub values: &'a [&'a [f32]],
    pub offset: usize,
}

impl<'a> Heads<'a> {
    /// The keys of `heads` heads at position `j`.
    #[inline(always)]
    pub(crate) fn key_row(&self, j: usize, heads: usize) -> &'a [f32] {
        let len = heads * self.hd;
        match self.rows {
            Some(l) => &l.keys[j][l.offset..l.offset + len],
            None => &self.keys[j * self.ld..j * self.ld + len],
        }
    }

    /// The values of `heads` heads at position `j`.
    #[inline(always)]
    pub(crate) fn value_row(&self, j: usize, heads: usize) -> &'a [f32] {
        let len = heads * self.hd;
        match self.rows {
            Some(l) => &l.values[j][l.offset..l.offset + len],
            None => &self.values[j * self.ld..j * self.ld + len],
        }
    }

    /// Panics unless the keys and values of `heads` heads at `n` positions
    /// are inside the slices.
    fn check(&self, heads: usize) {
        let Heads {
            keys,
            values,
            ld,
            n,
            hd,
            rows,
            ..
        } = *self;
        assert!(hd > 0, "whole heads");
        if n > 0 && heads > 0 {
            match rows {
                Some(l) => {
                    assert!(
                        l.keys.len() >= n && l.values.len() >= n,
                        "a row per position"
                    );
                    let end = l.offset + heads * hd;
                    let fits = |r: &[&[f32]]| r[..n].iter().all(|r| r.len() >= end);
                    assert!(fits(l.keys) && fits(l.values), "whole rows");
                }
                None => {
                    let last = (n - 1) * ld + heads * hd;
                    assert!(keys.len() >= last && values.len() >= last, "n positions");
                }
            }
        }
    }
}

/// `out[i * n + j] = dot(q_i, k_j) * scale` for the first `heads` heads of
/// `a` and its `n` positions (`out` holds at least `heads * n` values).
/// Each key row is read once for all the heads.
pub fn scores(a: &Heads, heads: usize, out: &mut [f32]) {
    a.check(heads);
    assert!(a.q.len() >= heads * a.hd, "a query per head");
    assert!(out.len() >= heads * a.n, "a score per head and position");
    (crate::table::active().scores_f32.f)(a, heads, out)
}

/// `out[i * hd + d] = sum_j p[i * n + j] * v_j[d]` (from 0, positions in
/// order) for the first `out.len() / hd` heads of `a` (its `q` and `scale`
/// unused). Each value row is read once for all the heads.
pub fn weighted_sum(a: &Heads, p: &[f32], out: &mut [f32]) {
    assert!(a.hd > 0 && out.len().is_multiple_of(a.hd), "whole heads");
    let heads = out.len() / a.hd;
    a.check(heads);
    assert!(p.len() >= heads * a.n, "a weight per head and position");
    (crate::table::active().weighted_sum_f32.f)(a, p, out)
}

/// The portable versions, for tests comparing kernel sets.
pub mod reference {
    pub use super::portable::{scores, weighted_sum};
}

#[cfg(test)]
mod tests {
    use crate::dispatch::KernelSet;

    /// Scores and weighted sums of `a` (`heads` heads) by the portable
    /// build, then by every set; every set's bits must equal the portable
    /// build's (or both be NaN). Returns the portable results.
    fn check_sets(a: &super::Heads, heads: usize, p: &[f32], what: &str) -> (Vec<f32>, Vec<f32>) {
        let mut s_want = vec![0f32; heads * a.n];
        super::reference::scores(a, heads, &mut s_want);
        let mut o_want = vec![2f32; heads * a.hd];
        super::reference::weighted_sum(a, p, &mut o_want);
        let same = |x: &[f32], y: &[f32]| {
            x.iter()
                .zip(y)
                .all(|(x, y)| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()))
        };
        for set in KernelSet::ALL {
            let Some(t) = set.table() else {
                eprintln!("SKIPPED {set:?}: not supported by this CPU");
                continue;
            };
            let mut s_got = vec![1f32; heads * a.n];
            (t.scores_f32.f)(a, heads, &mut s_got);
            let mut o_got = vec![1f32; heads * a.hd];
            (t.weighted_sum_f32.f)(a, p, &mut o_got);
            assert!(same(&s_got, &s_want), "{set:?} scores {what}");
            assert!(same(&o_got, &o_want), "{set:?} sum {what}");
        }
        (s_want, o_want)
    }

    /// Every set gives the portable build's bits, positions in order or
    /// through a row list, at head sizes around the lanes (odd ones
    /// included).
    #[test]
    fn every_set_matches_the_portable_build() {
        let mut next = crate::xorshift(17);
        let mut rnd = |n: usize| -> Vec<f32> {
            (0..n)
                .map(|_| ((next() >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 4.0)
                .collect()
        };
        for (heads, hd, n) in [
            (1, 8, 1),
            (2, 64, 33),
            (4, 13, 7),
            (8, 64, 20),
            (3, 32, 0),
            (2, 96, 9),
            (1, 128, 16),
            (2, 16, 8),
            (3, 1, 5),
        ] {
            let ld = heads * hd + 5;
            let q = rnd(heads * hd);
            let keys = rnd(n.max(1) * ld);
            let values = rnd(n.max(1) * ld);
            let p: Vec<f32> = rnd(heads * n).iter().map(|x| x.abs()).collect();
            // Positions as rows of a matrix in order, or listed (rows of
            // it out of order, read from value `off` on).
            let shuffled: Vec<usize> = (0..n).map(|j| (j * 7 + 3) % n).collect();
            let off = 3;
            fn row_list<'m>(m: &'m [f32], order: &[usize], ld: usize) -> Vec<&'m [f32]> {
                order.iter().map(|&r| &m[r * ld..(r + 1) * ld]).collect()
            }
            let (lk, lv) = (
                row_list(&keys, &shuffled, ld),
                row_list(&values, &shuffled, ld),
            );
            let listed = super::Listed {
                keys: &lk,
                values: &lv,
                offset: off,
            };
            for rows in [None, Some(listed)] {
                let a = super::Heads {
                    q: &q,
                    keys: &keys,
                    values: &values,
                    ld,
                    n,
                    hd,
                    scale: 0.125,
                    rows,
                };
                let what = format!("heads {heads} hd {hd} n {n} rows {}", rows.is_some());
                let want = check_sets(&a, heads, &p, &what);
                if rows.is_some() {
                    // The same as the rows gathered into position order.
                    let gather = |m: &[f32]| -> Vec<f32> {
                        let mut g: Vec<f32> = shuffled
                            .iter()
                            .flat_map(|&r| {
                                let mut row = m[r * ld + off..(r + 1) * ld].to_vec();
                                row.resize(ld, 0.0);
                                row
                            })
                            .collect();
                        g.resize(n.max(1) * ld, 0.0);
                        g
                    };
                    let (gk, gv) = (gather(&keys), gather(&values));
                    let in_order = super::Heads {
                        keys: &gk,
                        values: &gv,
                        rows: None,
                        ..a
                    };
                    assert_eq!(check_sets(&in_order, heads, &p, &what), want, "{what}");
                }
                // Fewer heads than the row holds: the first heads' values.
                if heads > 1 {
                    let (s1, o1) = check_sets(&a, 1, &p, &what);
                    assert_eq!(s1[..], want.0[..n], "{what}");
                    assert_eq!(o1[..], want.1[..hd], "{what}");
                }
            }
        }
    }

    /// Extreme values: subnormals, the largest finite values, signed
    /// zeros, infinities and NaNs in keys, values, queries and weights
    /// (sums that overflow, infinities meeting zeros).
    #[test]
    fn every_set_matches_the_portable_build_on_extreme_values() {
        const X: [f32; 11] = [
            0.0,
            -0.0,
            1e-45,
            -1e-45,
            f32::MAX,
            f32::MIN,
            1.0,
            -2.5,
            f32::MIN_POSITIVE,
            f32::INFINITY,
            f32::NAN,
        ];
        for (case, (heads, hd, n)) in [(2, 3, 9), (1, 16, 5), (3, 33, 4), (2, 64, 7)]
            .into_iter()
            .enumerate()
        {
            // Finite-only inputs (every other case) and ones with
            // infinities and NaNs.
            let pick = if case % 2 == 0 { 9 } else { X.len() };
            let gen = |len: usize, mul: usize| -> Vec<f32> {
                (0..len).map(|i| X[(i * mul + case) % pick]).collect()
            };
            let ld = heads * hd;
            let (q, keys, values) = (gen(ld, 5), gen(n * ld, 7), gen(n * ld, 3));
            let p = gen(heads * n, 11);
            let a = super::Heads {
                q: &q,
                keys: &keys,
                values: &values,
                ld,
                n,
                hd,
                scale: 0.5,
                rows: None,
            };
            check_sets(&a, heads, &p, &format!("extreme case {case}"));
        }
    }
}
