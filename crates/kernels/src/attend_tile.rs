//! The two inner loops of tiled (flash-style) attention: many query rows
//! against one block of [`KEY_BLOCK`] keys already converted to f32, and
//! the probability-weighted values of one block added into running
//! accumulators.
//!
//! Each output value has one fixed chain of operations, written here once
//! as scalar code over independent lanes (no sum ever crosses lanes):
//!
//! - a score is cut into segments of [`SEGMENT`] values of `d`; each
//!   segment's sum is `s = 0; s = fma(q[d], k[d], s)` for its `d` in
//!   order; the segments' sums are added pairwise in a fixed tree (see
//!   `score_rows`: for 64 values `(s0 + s1) + (s2 + s3)`); then `* scale`;
//! - an accumulator is first `acc[d] * alpha` (the online softmax's
//!   rescaling), then `acc[d] = fma(p_j, v_j[d], acc[d])` for the block's
//!   rows `j` in order.
//!
//! So the compiler's vectorized builds for the AVX2 and AVX-512 sets (the
//! same source with those features on: `mul_add` becomes the FMA
//! instruction) give the scalar build's bits, whichever lane a value sits
//! in and however many rows a call holds.

/// Keys per block: tiled attention cuts positions at multiples of this.
pub const KEY_BLOCK: usize = 64;

/// The largest head size [`scores_tile`] takes (63 segments).
pub const MAX_HEAD_DIM: usize = 63 * SEGMENT;

/// Values of `d` per chain of fused multiply-adds in a score (the chains'
/// sums are then added pairwise: shorter chains, smaller rounding error).
pub const SEGMENT: usize = 16;

/// The bodies, compiled once per kernel set.
macro_rules! tile_fns {
    () => {
        use $crate::attend_tile::KEY_BLOCK;

        /// Scores of `R` rows against `W` key lanes starting at `j0`: each
        /// segment of [`SEGMENT`] values of `d` a chain of fused
        /// multiply-adds from 0, the segments' sums added pairwise (a
        /// binary counter: two sums of as many segments each become one),
        /// the rest from the last one back.
        #[inline(always)]
        fn score_rows<const R: usize, const W: usize>(
            q: &[f32],
            head_dim: usize,
            kt: &[f32],
            j0: usize,
            scale: f32,
            out: &mut [f32],
        ) {
            use $crate::attend_tile::SEGMENT;
            // A binary counter of up to 63 segments (head size 1,008).
            const DEPTH: usize = 6;
            let mut stack = [[[0f32; W]; R]; DEPTH];
            let mut sizes = [0usize; DEPTH];
            let mut depth = 0;
            let mut d0 = 0;
            while d0 < head_dim {
                let d1 = (d0 + SEGMENT).min(head_dim);
                let mut acc = [[0f32; W]; R];
                for d in d0..d1 {
                    let k: &[f32; W] = kt[d * KEY_BLOCK + j0..d * KEY_BLOCK + j0 + W]
                        .try_into()
                        .unwrap();
                    for (r, a) in acc.iter_mut().enumerate() {
                        let x = q[r * head_dim + d];
                        for (a, &k) in a.iter_mut().zip(k) {
                            *a = x.mul_add(k, *a);
                        }
                    }
                }
                let mut size = 1;
                while depth > 0 && sizes[depth - 1] == size {
                    depth -= 1;
                    for (a, b) in acc.iter_mut().zip(&stack[depth]) {
                        for (a, &b) in a.iter_mut().zip(b) {
                            *a += b;
                        }
                    }
                    size *= 2;
                }
                stack[depth] = acc;
                sizes[depth] = size;
                depth += 1;
                d0 = d1;
            }
            let mut acc = [[0f32; W]; R];
            if depth > 0 {
                depth -= 1;
                acc = stack[depth];
                while depth > 0 {
                    depth -= 1;
                    for (a, b) in acc.iter_mut().zip(&stack[depth]) {
                        for (a, &b) in a.iter_mut().zip(b) {
                            *a += b;
                        }
                    }
                }
            }
            for (r, a) in acc.iter().enumerate() {
                let o = &mut out[r * KEY_BLOCK + j0..r * KEY_BLOCK + j0 + W];
                for (o, &a) in o.iter_mut().zip(a) {
                    *o = a * scale;
                }
            }
        }

        /// See `crate::attend_tile::scores_tile`; `R` rows at a time,
        /// `W` lanes at a time (register blocking only: no bits depend on
        /// them).
        #[inline(always)]
        pub fn scores_tile<const R: usize, const W: usize>(
            q: &[f32],
            head_dim: usize,
            kt: &[f32],
            scale: f32,
            out: &mut [f32],
        ) {
            let rows = out.len() / KEY_BLOCK;
            let mut r = 0;
            while r < rows {
                let (qr, or) = (&q[r * head_dim..], &mut out[r * KEY_BLOCK..]);
                let mut j0 = 0;
                while j0 < KEY_BLOCK {
                    if r + R <= rows {
                        score_rows::<R, W>(qr, head_dim, kt, j0, scale, or);
                    } else {
                        score_rows::<1, W>(qr, head_dim, kt, j0, scale, or);
                    }
                    j0 += W;
                }
                r += if r + R <= rows { R } else { 1 };
            }
        }

        /// One row's accumulator of `HD` values (a constant, so that it
        /// stays in registers), or of `acc.len()` values if `HD` is 0.
        #[inline(always)]
        fn accumulate_row<const HD: usize>(p: &[f32], alpha: f32, v: &[f32], acc: &mut [f32]) {
            let hd = acc.len();
            if HD == 0 {
                acc.iter_mut().for_each(|a| *a *= alpha);
                for (j, &pj) in p.iter().enumerate() {
                    let v = &v[j * hd..(j + 1) * hd];
                    for (a, &x) in acc.iter_mut().zip(v) {
                        *a = pj.mul_add(x, *a);
                    }
                }
                return;
            }
            let mut a = [0f32; HD];
            for (a, &x) in a.iter_mut().zip(acc.iter()) {
                *a = x * alpha;
            }
            for (j, &pj) in p.iter().enumerate() {
                let v: &[f32; HD] = v[j * HD..(j + 1) * HD].try_into().unwrap();
                for (a, &x) in a.iter_mut().zip(v) {
                    *a = pj.mul_add(x, *a);
                }
            }
            acc.copy_from_slice(&a);
        }

        /// Two rows of the same span at once (each value loaded once for
        /// both): each row's operations are [`accumulate_row`]'s.
        #[inline(always)]
        fn accumulate_pair<const HD: usize>(
            p: [&[f32]; 2],
            alpha: [f32; 2],
            v: &[f32],
            acc: [&mut [f32]; 2],
        ) {
            let mut a = [[0f32; HD]; 2];
            for ((a, acc), alpha) in a.iter_mut().zip(&acc).zip(alpha) {
                for (a, &x) in a.iter_mut().zip(acc.iter()) {
                    *a = x * alpha;
                }
            }
            for (j, (&p0, &p1)) in p[0].iter().zip(p[1]).enumerate() {
                let v: &[f32; HD] = v[j * HD..(j + 1) * HD].try_into().unwrap();
                let [a0, a1] = &mut a;
                for ((a0, a1), &x) in a0.iter_mut().zip(a1.iter_mut()).zip(v) {
                    *a0 = p0.mul_add(x, *a0);
                    *a1 = p1.mul_add(x, *a1);
                }
            }
            let [acc0, acc1] = acc;
            acc0.copy_from_slice(&a[0]);
            acc1.copy_from_slice(&a[1]);
        }

        /// See `crate::attend_tile::accumulate_tile`.
        #[inline(always)]
        pub fn accumulate_tile(
            p: &[f32],
            spans: &[(u32, u32)],
            alpha: &[f32],
            v: &[f32],
            acc: &mut [f32],
        ) {
            let rows = spans.len();
            if rows == 0 {
                return;
            }
            let hd = acc.len() / rows;
            let mut r = 0;
            while r < rows {
                let (lo, hi) = (spans[r].0 as usize, spans[r].1 as usize);
                if lo >= hi {
                    r += 1;
                    continue;
                }
                let p_of = |r: usize| &p[r * KEY_BLOCK + lo..r * KEY_BLOCK + hi];
                let v = &v[lo * hd..];
                if r + 1 < rows && spans[r + 1] == spans[r] && (hd == 64 || hd == 128) {
                    let (a0, a1) = acc[r * hd..(r + 2) * hd].split_at_mut(hd);
                    let (p2, al) = ([p_of(r), p_of(r + 1)], [alpha[r], alpha[r + 1]]);
                    match hd {
                        64 => accumulate_pair::<64>(p2, al, v, [a0, a1]),
                        _ => accumulate_pair::<128>(p2, al, v, [a0, a1]),
                    }
                    r += 2;
                    continue;
                }
                let acc = &mut acc[r * hd..(r + 1) * hd];
                match hd {
                    64 => accumulate_row::<64>(p_of(r), alpha[r], v, acc),
                    128 => accumulate_row::<128>(p_of(r), alpha[r], v, acc),
                    256 => accumulate_row::<256>(p_of(r), alpha[r], v, acc),
                    _ => accumulate_row::<0>(p_of(r), alpha[r], v, acc),
                }
                r += 1;
            }
        }
    };
}
pub(crate) use tile_fns;

mod portable {
    crate::attend_tile::tile_fns!();
}

/// `out[r * KEY_BLOCK + j] = (sum_d q_r[d] * k_j[d]) * scale` for each row
/// `r` of the tile (`out.len() / KEY_BLOCK` rows; `q` holds them one after
/// the other, `head_dim` values each) and each of the block's [`KEY_BLOCK`]
/// keys `j`, given transposed: `kt[d * KEY_BLOCK + j] = k_j[d]`. The sum is
/// the module's: chains of fused multiply-adds over segments of `d`,
/// added pairwise.
pub fn scores_tile(q: &[f32], head_dim: usize, kt: &[f32], scale: f32, out: &mut [f32]) {
    let rows = out.len() / KEY_BLOCK;
    assert!(q.len() >= rows * head_dim && kt.len() >= head_dim * KEY_BLOCK);
    assert!(
        head_dim <= MAX_HEAD_DIM,
        "head size {head_dim} over {MAX_HEAD_DIM}"
    );
    (crate::table::active().scores_tile.f)(q, head_dim, kt, scale, &mut out[..rows * KEY_BLOCK])
}

/// For each row `r` (`spans.len()` rows, `head_dim = acc.len() / rows`):
/// `acc_r[d] *= alpha[r]`, then `acc_r[d] = fma(p[r * KEY_BLOCK + j],
/// v_j[d], acc_r[d])` for the block's rows `j` in `spans[r].0..spans[r].1`
/// in order (`v` holds the block's value rows, `head_dim` values each).
/// A row with an empty span is left alone.
pub fn accumulate_tile(p: &[f32], spans: &[(u32, u32)], alpha: &[f32], v: &[f32], acc: &mut [f32]) {
    let rows = spans.len();
    assert!(alpha.len() >= rows && p.len() >= rows * KEY_BLOCK);
    if rows == 0 {
        return;
    }
    let hd = acc.len() / rows;
    assert!(spans
        .iter()
        .all(|&(lo, hi)| lo >= hi || (hi as usize <= KEY_BLOCK && v.len() >= hi as usize * hd)));
    (crate::table::active().accumulate_tile.f)(p, spans, alpha, v, &mut acc[..rows * hd])
}

/// Converts `n` f16 key rows (row `j`: `2 * head_dim` bytes at byte
/// `j * stride` of `src`, as the cache's runs hold them) to f32 into a
/// transposed key block: `kt[d * KEY_BLOCK + lane0 + j] = k_j[d]`, the
/// layout [`scores_tile`] reads. The conversion is exact, so every set
/// gives the same values; the fast sets transpose 8 x 8 at a time.
pub fn f16_keys_to_block(
    src: &[u8],
    stride: usize,
    n: usize,
    head_dim: usize,
    kt: &mut [f32],
    lane0: usize,
) {
    if n == 0 || head_dim == 0 {
        return;
    }
    assert!(src.len() >= (n - 1) * stride + 2 * head_dim && stride >= 2 * head_dim);
    assert!(lane0 + n <= KEY_BLOCK && kt.len() >= head_dim * KEY_BLOCK);
    (crate::table::active().f16_keys_to_block.f)(src, stride, n, head_dim, kt, lane0)
}

/// Converts `n` f16 rows (as in [`f16_keys_to_block`]) to f32, one after
/// the other: `dst[j * head_dim + d] = v_j[d]` (a block's values, as
/// [`accumulate_tile`] reads them). Exact in every set.
pub fn f16_rows_to_f32(src: &[u8], stride: usize, n: usize, head_dim: usize, dst: &mut [f32]) {
    if n == 0 || head_dim == 0 {
        return;
    }
    assert!(src.len() >= (n - 1) * stride + 2 * head_dim && stride >= 2 * head_dim);
    assert!(dst.len() >= n * head_dim);
    (crate::table::active().f16_rows_to_f32.f)(src, stride, n, head_dim, dst)
}

/// The portable builds (the scalar set's entries, and the reference for
/// tests).
pub mod reference {
    /// As [`super::scores_tile`], one row and all lanes at a time.
    pub fn scores_tile(q: &[f32], head_dim: usize, kt: &[f32], scale: f32, out: &mut [f32]) {
        super::portable::scores_tile::<1, { super::KEY_BLOCK }>(q, head_dim, kt, scale, out)
    }

    /// As [`super::accumulate_tile`].
    pub fn accumulate_tile(
        p: &[f32],
        spans: &[(u32, u32)],
        alpha: &[f32],
        v: &[f32],
        acc: &mut [f32],
    ) {
        super::portable::accumulate_tile(p, spans, alpha, v, acc)
    }

    /// As [`super::f16_keys_to_block`], one value at a time.
    pub fn f16_keys_to_block(
        src: &[u8],
        stride: usize,
        n: usize,
        head_dim: usize,
        kt: &mut [f32],
        lane0: usize,
    ) {
        f16_keys_tail(src, stride, n, 0..head_dim, kt, lane0)
    }

    /// Values `dims` of `n` key rows into the transposed block, one at a
    /// time (the reference, and the fast sets' leftovers).
    pub(crate) fn f16_keys_tail(
        src: &[u8],
        stride: usize,
        n: usize,
        dims: std::ops::Range<usize>,
        kt: &mut [f32],
        lane0: usize,
    ) {
        for j in 0..n {
            for d in dims.clone() {
                let b = [src[j * stride + 2 * d], src[j * stride + 2 * d + 1]];
                kt[d * super::KEY_BLOCK + lane0 + j] = crate::quant::float::f16_le(b);
            }
        }
    }

    /// As [`super::f16_rows_to_f32`].
    pub fn f16_rows_to_f32(src: &[u8], stride: usize, n: usize, head_dim: usize, dst: &mut [f32]) {
        for j in 0..n {
            crate::quant::float::f16_to_f32(
                &src[j * stride..j * stride + 2 * head_dim],
                &mut dst[j * head_dim..(j + 1) * head_dim],
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dispatch::KernelSet;

    /// Every set converts and transposes f16 rows to the reference's
    /// values, for head sizes with and without a tail of 8, runs of 1 to
    /// 17 rows at any lane, and a stride wider than a row.
    #[test]
    fn every_set_converts_key_and_value_rows_as_the_reference() {
        let mut rng = crate::xorshift(0x5eed_0f16_0000_0046);
        for head_dim in [1usize, 7, 8, 64, 80, 130] {
            let stride = 2 * head_dim + 6;
            for (n, lane0) in [(1usize, 0usize), (8, 3), (16, 48), (17, 40), (9, 0)] {
                let mut src: Vec<u8> = (0..n * stride).map(|_| (rng() >> 56) as u8).collect();
                // Some infinities and NaNs among the values (their bits too).
                src[1] = 0x7c;
                src[0] = 0;
                let kt0: Vec<f32> = (0..head_dim * KEY_BLOCK).map(|i| i as f32).collect();
                let mut kt_ref = kt0.clone();
                reference::f16_keys_to_block(&src, stride, n, head_dim, &mut kt_ref, lane0);
                let mut v_ref = vec![0f32; n * head_dim];
                reference::f16_rows_to_f32(&src, stride, n, head_dim, &mut v_ref);
                assert_eq!(kt_ref[lane0].to_bits(), f32::INFINITY.to_bits());
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                for set in KernelSet::ALL {
                    let Some(t) = set.table() else {
                        eprintln!("SKIPPED {}: not supported by this CPU", set.name());
                        continue;
                    };
                    let mut kt = kt0.clone();
                    (t.f16_keys_to_block.f)(&src, stride, n, head_dim, &mut kt, lane0);
                    let mut v = vec![0f32; n * head_dim];
                    (t.f16_rows_to_f32.f)(&src, stride, n, head_dim, &mut v);
                    let name = set.name();
                    assert_eq!(bits(&kt), bits(&kt_ref), "{name} keys hd={head_dim} n={n}");
                    assert_eq!(bits(&v), bits(&v_ref), "{name} values hd={head_dim} n={n}");
                }
            }
        }
    }

    /// Every set's loops give the portable build's bits, for head sizes
    /// with and without a constant accumulator, odd row counts and spans.
    #[test]
    fn every_set_matches_the_reference_bit_for_bit() {
        let mut rng = crate::xorshift(0x5eed_1234_abcd_0042);
        let mut next = move || ((rng() >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0;
        for head_dim in [1usize, 7, 32, 64, 80, 128, 256] {
            for rows in [1usize, 2, 3, 5, 9] {
                let q: Vec<f32> = (0..rows * head_dim).map(|_| next()).collect();
                let kt: Vec<f32> = (0..head_dim * KEY_BLOCK).map(|_| next()).collect();
                let v: Vec<f32> = (0..KEY_BLOCK * head_dim).map(|_| next()).collect();
                let p: Vec<f32> = (0..rows * KEY_BLOCK).map(|_| next().abs()).collect();
                // Rows 0 and 1 (and 3, 4) share a span: the paired path.
                let spans: Vec<(u32, u32)> = (0..rows)
                    .map(|r| r / 2 + r / 4)
                    .map(|r| ((r * 5 % 17) as u32, (KEY_BLOCK - r * 3 % 11) as u32))
                    .chain(std::iter::once((9, 9)))
                    .take(rows)
                    .collect();
                let alpha: Vec<f32> = (0..rows).map(|r| 1.0 / (r as f32 + 1.5)).collect();
                let acc0: Vec<f32> = (0..rows * head_dim).map(|_| next()).collect();
                let mut s_ref = vec![0f32; rows * KEY_BLOCK];
                reference::scores_tile(&q, head_dim, &kt, 0.125, &mut s_ref);
                let mut a_ref = acc0.clone();
                reference::accumulate_tile(&p, &spans, &alpha, &v, &mut a_ref);
                // Each row alone gives its bits in the tile (paired or not).
                for r in 0..rows {
                    let mut a = acc0[r * head_dim..(r + 1) * head_dim].to_vec();
                    let p_r = &p[r * KEY_BLOCK..(r + 1) * KEY_BLOCK];
                    reference::accumulate_tile(p_r, &spans[r..r + 1], &alpha[r..], &v, &mut a);
                    let want = &a_ref[r * head_dim..(r + 1) * head_dim];
                    assert!(a.iter().zip(want).all(|(x, y)| x.to_bits() == y.to_bits()));
                }
                // The order itself, written out for one value: segment
                // chains, then a pairwise tree (for up to four segments:
                // ((s0 + s1) + (s2 + s3)), or (s0 + s1) + s2, ...).
                let (r, j) = (rows - 1, KEY_BLOCK - 1);
                let segs: Vec<f32> = (0..head_dim)
                    .step_by(SEGMENT)
                    .map(|d0| {
                        let mut s = 0f32;
                        for d in d0..(d0 + SEGMENT).min(head_dim) {
                            s = q[r * head_dim + d].mul_add(kt[d * KEY_BLOCK + j], s);
                        }
                        s
                    })
                    .collect();
                if segs.len() <= 4 {
                    let s = match segs[..] {
                        [a] => a,
                        [a, b] => a + b,
                        [a, b, c] => (a + b) + c,
                        [a, b, c, d] => (a + b) + (c + d),
                        _ => unreachable!(),
                    };
                    assert_eq!(s_ref[r * KEY_BLOCK + j].to_bits(), (s * 0.125).to_bits());
                }
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                for set in KernelSet::ALL {
                    let Some(t) = set.table() else {
                        eprintln!("SKIPPED {}: not supported by this CPU", set.name());
                        continue;
                    };
                    let mut s = vec![0f32; rows * KEY_BLOCK];
                    (t.scores_tile.f)(&q, head_dim, &kt, 0.125, &mut s);
                    let mut a = acc0.clone();
                    (t.accumulate_tile.f)(&p, &spans, &alpha, &v, &mut a);
                    let name = set.name();
                    assert_eq!(
                        bits(&s),
                        bits(&s_ref),
                        "{name} scores hd={head_dim} rows={rows}"
                    );
                    assert_eq!(
                        bits(&a),
                        bits(&a_ref),
                        "{name} acc hd={head_dim} rows={rows}"
                    );
                }
            }
        }
    }
}
