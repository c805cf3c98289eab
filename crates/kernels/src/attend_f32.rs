//! Attention of one query row's heads over cached f32 keys and values (the
//! encoder-decoders' self- and cross-attention caches), written once as
//! scalar code (`attend_f32_fns!`) and compiled per kernel set like
//! `crate::math`: the compiler vectorizes it, every operation is an
//! exactly rounded IEEE one in the same order, so every set gives the
//! scalar build's bits.
//!
//! Per head: score `s_j = dot(q, k_j) * scale + bias_j` (the dot product in
//! eight interleaved partial sums of rounded products, folded in lane
//! order, then the tail), `crate::math::softmax` of the scores, and
//! `out[d] = sum_j p_j * v_j[d]` from 0, positions in order.

/// The body of [`attend`], compiled once per kernel set.
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

        /// See `crate::attend_f32::attend`.
        #[inline(always)]
        pub fn attend(a: &$crate::attend_f32::Heads, scores: &mut Vec<f32>, out: &mut [f32]) {
            let $crate::attend_f32::Heads {
                q,
                keys,
                values,
                ld,
                n,
                hd,
                bias,
                scale,
                rows,
            } = *a;
            // Position j's row of keys and values.
            let row = |j: usize| rows.map_or(j, |r| r[j] as usize);
            let heads = out.len() / hd;
            scores.clear();
            scores.resize(heads * n, 0.0);
            for j in 0..n {
                let k = &keys[row(j) * ld..row(j) * ld + heads * hd];
                for i in 0..heads {
                    let b = bias.map_or(0.0, |b| b[i * n + j]);
                    let (qh, kh) = (&q[i * hd..(i + 1) * hd], &k[i * hd..(i + 1) * hd]);
                    scores[i * n + j] = dot(qh, kh) * scale + b;
                }
            }
            for s in scores.chunks_exact_mut(n.max(1)) {
                $crate::math::softmax(s);
            }
            out.fill(0.0);
            for j in 0..n {
                let v = &values[row(j) * ld..row(j) * ld + heads * hd];
                for (i, (o, v)) in out.chunks_exact_mut(hd).zip(v.chunks_exact(hd)).enumerate() {
                    let w = scores[i * n + j];
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
/// `j < n` are `keys[r * ld + i * hd..]` and `values[r * ld + i * hd..]`
/// (`hd` values each) of row `r = rows[j]` (`r = j` if `rows` is `None`:
/// positions stored in order), and its score biases (if any)
/// `bias[i * n + j]`.
#[derive(Clone, Copy, Debug)]
pub struct Heads<'a> {
    pub q: &'a [f32],
    pub keys: &'a [f32],
    pub values: &'a [f32],
    pub ld: usize,
    pub n: usize,
    pub hd: usize,
    pub bias: Option<&'a [f32]>,
    pub scale: f32,
    pub rows: Option<&'a [u32]>,
}

/// Attention of the first `out.len() / a.hd` heads of `a`, head `i`'s
/// output into `out[i * hd..(i + 1) * hd]`. `scores` is scratch. See the
/// module notes for the operations.
pub fn attend(a: &Heads, scores: &mut Vec<f32>, out: &mut [f32]) {
    let Heads {
        q,
        keys,
        values,
        ld,
        n,
        hd,
        bias,
        rows,
        ..
    } = *a;
    assert!(hd > 0 && out.len().is_multiple_of(hd), "whole heads");
    let heads = out.len() / hd;
    assert!(q.len() >= heads * hd, "a query per head");
    if n > 0 {
        let last_row = match rows {
            Some(r) => {
                assert!(r.len() >= n, "a row per position");
                r[..n].iter().max().map_or(0, |&r| r as usize)
            }
            None => n - 1,
        };
        let last = last_row * ld + heads * hd;
        assert!(keys.len() >= last && values.len() >= last, "n positions");
    }
    if let Some(b) = bias {
        assert!(b.len() >= heads * n, "a bias per head and position");
    }
    (crate::table::active().attend_f32.f)(a, scores, out)
}

/// The portable version, for tests comparing kernel sets.
pub mod reference {
    pub use super::portable::attend;
}

#[cfg(test)]
mod tests {
    use crate::dispatch::KernelSet;

    /// Every set gives the portable build's bits, with and without biases,
    /// at head sizes around the lanes.
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
        ] {
            let ld = heads * hd + 5;
            let q = rnd(heads * hd);
            let keys = rnd(n.max(1) * ld);
            let values = rnd(n.max(1) * ld);
            let bias = rnd(heads * n);
            // Positions stored out of order (rows given), or in order.
            let shuffled: Vec<u32> = (0..n as u32).map(|j| (j * 7 + 3) % n as u32).collect();
            let cases = [None, Some(&bias[..])]
                .into_iter()
                .flat_map(|b| [(b, None), (b, Some(&shuffled[..]))]);
            for (bias, rows) in cases {
                let a = super::Heads {
                    q: &q,
                    keys: &keys,
                    values: &values,
                    ld,
                    n,
                    hd,
                    bias,
                    scale: 0.125,
                    rows,
                };
                let mut want = vec![0f32; heads * hd];
                let mut scratch = Vec::new();
                super::reference::attend(&a, &mut scratch, &mut want);
                if let Some(rows) = rows {
                    // The same as the rows gathered into position order.
                    let gather = |m: &[f32]| -> Vec<f32> {
                        let mut g: Vec<f32> = rows
                            .iter()
                            .flat_map(|&r| m[r as usize * ld..(r as usize + 1) * ld].to_vec())
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
                    let mut ordered = vec![0f32; heads * hd];
                    super::reference::attend(&in_order, &mut scratch, &mut ordered);
                    assert_eq!(ordered, want, "rows heads {heads} hd {hd} n {n}");
                }
                for set in KernelSet::ALL {
                    let Some(t) = set.table() else {
                        eprintln!("SKIPPED {set:?}: not supported by this CPU");
                        continue;
                    };
                    let mut got = vec![1f32; heads * hd];
                    (t.attend_f32.f)(&a, &mut scratch, &mut got);
                    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    assert_eq!(
                        bits(&got),
                        bits(&want),
                        "{set:?} heads {heads} hd {hd} n {n}"
                    );
                }
            }
        }
    }
}
