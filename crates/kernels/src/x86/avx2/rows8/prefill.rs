//! The AVX2 set's prefill kernels: `dot8n` (one group of eight
//! interleaved rows) of Q4_K, Q5_K and Q6_K, and `dot16n` (two groups, A
//! then B) of Q4_K, Q5_K, Q6_K, Q4_0, Q4_1 and Q5_0 (Q8_0's is in
//! `q8_0`), against many activation rows.
//! Without VNNI the integer sums are `maddubs` (unsigned weight values
//! times signed activations, adjacent products added into i16) and `madd`
//! (i16 pairs times i16 scales or ones, into i32), within the bounds of
//! these formats' one-row `dot8` (noted at each).
//!
//! K-quants ([`many`]): each super-block of the groups is decoded once per
//! pass of up to [`TOKENS`] activation rows (values, scales and mins into
//! a buffer that stays in L1), then the rows take their exact integer sums
//! from it four at a time: a decoded vector is loaded once for four rows,
//! and with two groups each broadcast of four activation bytes serves
//! both (`maddubs` has no broadcast memory operand, so one row and one
//! group at a time is two loads per multiply). Q6_K's `32 * sum(x)` part
//! is taken once per activation block from the sums of its sixteen groups
//! (from its values: Q6_K does not read `bsums`), for both groups.
//!
//! 32-value formats ([`small_many`]): a block of both groups is decoded
//! once per pass, and each activation block's broadcasts, scale and
//! offset sum (`OFFSET * sum(x)`, where the integer sum starts) serve both;
//! a pass of sixteen whole Q8_0 rows reads the scale and the sum from the
//! activation panel (`crate::quant::act_panels`), worked out once per
//! product.
//!
//! The f32 operations are `dot8`'s, lane for lane (`with_min` for Q4_K,
//! `(d * d_x) * isum` for Q6_K, `term_from` for the 32-value formats),
//! added to each row's sum in block order, so every result has the scalar
//! reference's bits.

use std::arch::x86_64::*;

use super::{
    byte_pairs, f16_splat, load_i8, load_u8, load_u8x16, offset_sum, pass_rows, q4_k_scales,
    q5_k_values, q6_k_values, w_scales, with_min_f32, x4, Act8, Small, ROWS, TOKENS,
};
use crate::dot::{Dot16NFn, Dot8NFn};
use crate::quant::{ActBlockFacts, BlockQ8K};

/// A super-block format of these kernels.
trait Prefill {
    /// Bytes of one super-block of one row.
    const BLOCK: usize;
    /// One super-block of a group of eight rows, decoded.
    type Decoded: Copy;
    /// An all-zero `Decoded` (overwritten by `decode` before any use).
    const EMPTY: Self::Decoded;

    /// Decodes the interleaved super-block `w` (`8 * BLOCK` bytes).
    ///
    /// # Safety
    /// The CPU must support AVX2, FMA and F16C.
    unsafe fn decode(w: &[u8], out: &mut Self::Decoded);

    /// `terms[j][g]`: lane `r` is the scalar reference's f32 term of row
    /// `r` of group `g` (decoded in `dec[g]`) with activation block
    /// `a[j]`.
    ///
    /// # Safety
    /// The CPU must support AVX2, FMA and F16C.
    unsafe fn terms<const G: usize, const N: usize>(
        dec: &[Self::Decoded; G],
        a: [&BlockQ8K; N],
    ) -> [[__m256; G]; N];
}

/// `out[t]` = the `dot8` results of the `G` groups of `groups` (each
/// `groups.len() / G` bytes, cut to whole blocks) with activation row `t`
/// (bytes `t * act_row..` of `acts`; a missing or short row stops where
/// `dot8` would), group `g` in `out[t][8g..8g + 8]`. Rows are taken `N`
/// at a time while `N` rows have the block, then one at a time.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn many<K: Prefill, const G: usize, const N: usize, O: AsMut<[f32]>>(
    groups: &[u8],
    acts: &[u8],
    act_row: usize,
    out: &mut [O],
) {
    let step = ROWS * K::BLOCK;
    let per_group = groups.len() / G / step * step;
    for (c, chunk) in out.chunks_mut(TOKENS).enumerate() {
        let rows: [&[BlockQ8K]; TOKENS] = pass_rows(acts, act_row, c, chunk.len());
        let longest = rows.iter().map(|r| r.len()).max().unwrap_or(0);
        let n = (per_group / step).min(longest);
        let mut acc = [[_mm256_setzero_ps(); G]; TOKENS];
        let mut dec = [K::EMPTY; G];
        for b in 0..n {
            for (g, d) in dec.iter_mut().enumerate() {
                let at = g * per_group + b * step;
                K::decode(&groups[at..at + step], d);
            }
            let rows = &rows[..chunk.len()];
            // Rows with block b, N at a time, while there are N (all rows
            // have it but a cut last one).
            let mut done = 0;
            for (acc, r) in acc.chunks_exact_mut(N).zip(rows.chunks_exact(N)) {
                if r.iter().any(|r| r.len() <= b) {
                    break;
                }
                let terms = K::terms::<G, N>(&dec, std::array::from_fn(|j| &r[j][b]));
                for (acc, terms) in acc.iter_mut().zip(&terms) {
                    add_terms(acc, terms);
                }
                done += N;
            }
            for (acc, r) in acc[done..].iter_mut().zip(&rows[done..]) {
                // Rows shorter than the groups stop where `dot8` would.
                let Some(a) = r.get(b) else { continue };
                let [terms] = K::terms::<G, 1>(&dec, [a]);
                add_terms(acc, &terms);
            }
        }
        store_groups(chunk, &acc, 0);
    }
}

/// Pass `c` of a many-row kernel over `blocks` blocks per weight row: its
/// activation rows (as `pass_rows`, `len` of them), how many blocks it
/// takes (`blocks`, or fewer if every row is shorter), and its panel in
/// `facts` (`crate::quant::act_panels` of `acts`, Q8_0 only) if the pass
/// is [`TOKENS`] rows that all have those blocks and there is one.
#[inline]
pub(super) fn panel_pass<'a, A: crate::quant::Block>(
    acts: &'a [u8],
    act_row: usize,
    c: usize,
    len: usize,
    blocks: usize,
    facts: &'a [ActBlockFacts],
) -> ([&'a [A]; TOKENS], usize, Option<&'a [ActBlockFacts]>) {
    let rows: [&[A]; TOKENS] = pass_rows(acts, act_row, c, len);
    let longest = rows.iter().map(|r| r.len()).max().unwrap_or(0);
    let n = blocks.min(longest);
    let whole = len == TOKENS && rows.iter().all(|r| r.len() >= n);
    let per_row = act_row / std::mem::size_of::<A>();
    let panel = facts
        .get(c * TOKENS * per_row..(c + 1) * TOKENS * per_row)
        .filter(|_| whole && n <= per_row);
    (rows, n, panel)
}

/// Each row's `G` group sums into its output entry, from value `col` on.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn store_groups<const G: usize, O: AsMut<[f32]>>(
    chunk: &mut [O],
    acc: &[[__m256; G]; TOKENS],
    col: usize,
) {
    for (o, acc) in chunk.iter_mut().zip(acc) {
        for (part, a) in o.as_mut()[col..].chunks_exact_mut(ROWS).zip(acc) {
            // SAFETY: `part` is 8 writable f32; `storeu` has no alignment
            // requirement.
            unsafe { _mm256_storeu_ps(part.as_mut_ptr(), *a) };
        }
    }
}

/// Each group's term added to its row's sum (a function, not a closure:
/// see [`Q4K::terms`]).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn add_terms<const G: usize>(acc: &mut [__m256; G], terms: &[__m256; G]) {
    for (acc, term) in acc.iter_mut().zip(terms) {
        *acc = _mm256_add_ps(*acc, *term);
    }
}

/// A Q4_K super-block of eight rows, decoded (layout in `rows8`'s `Q4K`).
#[derive(Clone, Copy)]
struct Q4KDecoded {
    /// Nibbles of group `g` (values `32g..32g + 32`), piece `p` at `8g + p`.
    q: [__m256i; 64],
    /// Each group's 6-bit scale as the i16 pairs `madd` takes.
    scale: [__m256i; 8],
    /// Each group's 6-bit min, likewise.
    min: [__m256i; 8],
    /// The eight rows' `d` and `dmin`, as f32.
    d: __m256,
    dmin: __m256,
}

impl Q4KDecoded {
    /// The scales, mins, `d` and `dmin` of the interleaved super-block `w`
    /// (Q4_K's layout of them, which Q5_K shares).
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn scales_of(&mut self, w: &[u8]) {
        let [sc_lo, m_lo, sc_hi, m_hi] = q4_k_scales(w);
        for g in 0..8 {
            let (sc, m) = if g < 4 { (sc_lo, m_lo) } else { (sc_hi, m_hi) };
            self.scale[g] = byte_pairs::<false>(sc, g % 4);
            self.min[g] = byte_pairs::<false>(m, g % 4);
        }
        self.d = _mm256_cvtph_ps(load_u8x16(w));
        self.dmin = _mm256_cvtph_ps(load_u8x16(&w[16..]));
    }
}

struct Q4K;

impl Prefill for Q4K {
    const BLOCK: usize = 144;
    type Decoded = Q4KDecoded;
    // SAFETY: all-zero bits are valid vectors.
    const EMPTY: Q4KDecoded = unsafe { std::mem::zeroed() };

    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn decode(w: &[u8], out: &mut Q4KDecoded) {
        out.scales_of(w);
        let low = _mm256_set1_epi8(0x0f);
        for c in 0..4 {
            for p in 0..8 {
                // Piece 8c + p: group 2c in its low nibbles, 2c + 1 high.
                let v = load_u8(&w[128 + 32 * (8 * c + p)..]);
                out.q[8 * (2 * c) + p] = _mm256_and_si256(v, low);
                out.q[8 * (2 * c + 1) + p] = _mm256_and_si256(_mm256_srli_epi16::<4>(v), low);
            }
        }
    }

    /// As `Q4K::term` (rows8): per group, eight `maddubs` of nibbles and
    /// i8 added in i16 (`|.| <= 8 * 2 * 15 * 128 = 30720`), times the
    /// scale by `madd`; the mins against the block sums of `x` by `madd`.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn terms<const G: usize, const N: usize>(
        dec: &[Q4KDecoded; G],
        a: [&BlockQ8K; N],
    ) -> [[__m256; G]; N] {
        k4_terms::<G, N, 8>(dec, a)
    }
}

/// The terms of [`Q4K`] and [`Q5K`] (`Prefill::terms`) from their decoded
/// super-blocks (values below 16, or below 32 for Q5_K): per group, the
/// i16 pair sums of `PIECES` `maddubs` of values and i8 at a time (`|.| <=
/// 8 * 2 * 15 * 128 = 30720` for eight pieces of four-bit values, `4 * 2
/// * 31 * 128 = 31744` for four of five-bit ones), each times the group's
/// scale by `madd`; the mins against the block sums of `x` by `madd`; the
/// term `with_min`'s.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn k4_terms<const G: usize, const N: usize, const PIECES: usize>(
    dec: &[Q4KDecoded; G],
    a: [&BlockQ8K; N],
) -> [[__m256; G]; N] {
    const { assert!(PIECES == 8 || PIECES == 4) };
    let mut isum = [[_mm256_setzero_si256(); G]; N];
    for g in 0..8 {
        let mut pairs = [[_mm256_setzero_si256(); G]; N];
        for p in 0..8 {
            let mut xb = [_mm256_setzero_si256(); N];
            for (xb, a) in xb.iter_mut().zip(&a) {
                *xb = _mm256_set1_epi32(x4(&a.qs, 32 * g + 4 * p));
            }
            for (k, d) in dec.iter().enumerate() {
                let v = d.q[8 * g + p];
                for j in 0..N {
                    pairs[j][k] = _mm256_add_epi16(pairs[j][k], _mm256_maddubs_epi16(v, xb[j]));
                }
            }
            if (p + 1) % PIECES != 0 {
                continue;
            }
            for j in 0..N {
                for (k, d) in dec.iter().enumerate() {
                    isum[j][k] =
                        _mm256_add_epi32(isum[j][k], _mm256_madd_epi16(pairs[j][k], d.scale[g]));
                    pairs[j][k] = _mm256_setzero_si256();
                }
            }
        }
    }
    // (Loops, not closures: a closure does not take the target
    // features, and an intrinsic it calls is not inlined.)
    let mut terms = [[_mm256_setzero_ps(); G]; N];
    for j in 0..N {
        // msum += m * (bsum[2g] + bsum[2g + 1]), as one madd per group.
        let mut bs = [_mm256_setzero_si256(); 8];
        for (g, bs) in bs.iter_mut().enumerate() {
            let pair = i32::from(u16::from_le_bytes(a[j].bsums[2 * g]))
                | (i32::from(u16::from_le_bytes(a[j].bsums[2 * g + 1])) << 16);
            *bs = _mm256_set1_epi32(pair);
        }
        for (k, d) in dec.iter().enumerate() {
            let mut msum = _mm256_setzero_si256();
            for (m, bs) in d.min.iter().zip(&bs) {
                msum = _mm256_add_epi32(msum, _mm256_madd_epi16(*m, *bs));
            }
            terms[j][k] = with_min_f32(a[j].d(), d.d, d.dmin, isum[j][k], msum);
        }
    }
    terms
}

struct Q5K;

impl Prefill for Q5K {
    const BLOCK: usize = 176;
    type Decoded = Q4KDecoded;
    const EMPTY: Q4KDecoded = Q4K::EMPTY;

    /// Q4_K's decoding (rows8's `Q5K` layout: its scales where Q4_K has
    /// them), each value with its fifth bit.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn decode(w: &[u8], out: &mut Q4KDecoded) {
        out.scales_of(w);
        for g in 0..8 {
            for p in 0..8 {
                out.q[8 * g + p] = q5_k_values(w, g, p);
            }
        }
    }

    /// As rows8's `Q5K::term`: [`k4_terms`] with four pieces per `madd`.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn terms<const G: usize, const N: usize>(
        dec: &[Q4KDecoded; G],
        a: [&BlockQ8K; N],
    ) -> [[__m256; G]; N] {
        k4_terms::<G, N, 4>(dec, a)
    }
}

/// A Q6_K super-block of eight rows, decoded (layout in `rows8`'s `Q6K`).
#[derive(Clone, Copy)]
struct Q6KDecoded {
    /// Values (0..64) of run `r` (groups `2r`, `2r + 1`), piece `i4` at
    /// `8r + i4`.
    q: [__m256i; 64],
    /// Each group's signed scale as the i16 pairs `madd` takes.
    sc: [__m256i; 16],
    /// The scales of groups `2r` and `2r + 1` as one i16 pair.
    sc_pairs: [__m256i; 8],
    /// The eight rows' `d`, as f32.
    d: __m256,
}

struct Q6K;

impl Prefill for Q6K {
    const BLOCK: usize = 210;
    type Decoded = Q6KDecoded;
    // SAFETY: all-zero bits are valid vectors.
    const EMPTY: Q6KDecoded = unsafe { std::mem::zeroed() };

    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn decode(w: &[u8], out: &mut Q6KDecoded) {
        for r in 0..8 {
            for i4 in 0..8 {
                out.q[8 * r + i4] = q6_k_values(w, r, i4);
            }
        }
        for (g, s) in out.sc.iter_mut().enumerate() {
            *s = byte_pairs::<true>(load_u8(&w[1536 + 32 * (g / 4)..]), g % 4);
        }
        let low = _mm256_set1_epi32(0xffff);
        for (r, p) in out.sc_pairs.iter_mut().enumerate() {
            let lo = _mm256_and_si256(out.sc[2 * r], low);
            *p = _mm256_or_si256(lo, _mm256_slli_epi32::<16>(out.sc[2 * r + 1]));
        }
        out.d = _mm256_cvtph_ps(load_u8x16(&w[1664..]));
    }

    /// As `Q6K::term` (rows8): the exact integer `sum over the 16 groups
    /// of sc * (sum(q * x) - 32 * sum(x))`, as `sum(sc * sum(q * x))`
    /// (two `maddubs` of values and i8 added in i16, `|.| <= 2 * 2 * 63 *
    /// 128 = 32256`, times the scale by `madd`) minus `32 * sum(sc *
    /// sum(x))` (the group sums against the scale pairs by `madd`); no
    /// partial sum exceeds `256 * 128 * 63 * 128 < 2^31` in size.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn terms<const G: usize, const N: usize>(
        dec: &[Q6KDecoded; G],
        a: [&BlockQ8K; N],
    ) -> [[__m256; G]; N] {
        let mut isum = [[_mm256_setzero_si256(); G]; N];
        for r in 0..8 {
            for half in 0..2 {
                for pair in 0..2 {
                    let i4 = 4 * half + 2 * pair;
                    let (mut x0, mut x1) =
                        ([_mm256_setzero_si256(); N], [_mm256_setzero_si256(); N]);
                    for j in 0..N {
                        x0[j] = _mm256_set1_epi32(x4(&a[j].qs, 32 * r + 4 * i4));
                        x1[j] = _mm256_set1_epi32(x4(&a[j].qs, 32 * r + 4 * i4 + 4));
                    }
                    for (k, d) in dec.iter().enumerate() {
                        let (v0, v1) = (d.q[8 * r + i4], d.q[8 * r + i4 + 1]);
                        for j in 0..N {
                            let p = _mm256_add_epi16(
                                _mm256_maddubs_epi16(v0, x0[j]),
                                _mm256_maddubs_epi16(v1, x1[j]),
                            );
                            isum[j][k] = _mm256_add_epi32(
                                isum[j][k],
                                _mm256_madd_epi16(p, d.sc[2 * r + half]),
                            );
                        }
                    }
                }
            }
        }
        let mut terms = [[_mm256_setzero_ps(); G]; N];
        for j in 0..N {
            let sums = group_sum_pairs(&a[j].qs);
            let d_x = _mm256_set1_ps(a[j].d());
            for (k, d) in dec.iter().enumerate() {
                let mut bsum = _mm256_setzero_si256();
                for (p, s) in d.sc_pairs.iter().zip(&sums) {
                    bsum = _mm256_add_epi32(bsum, _mm256_madd_epi16(*p, _mm256_set1_epi32(*s)));
                }
                let isum = _mm256_sub_epi32(isum[j][k], _mm256_slli_epi32::<5>(bsum));
                // q6_k_term: (d * d_x) * isum.
                terms[j][k] = _mm256_mul_ps(_mm256_mul_ps(d.d, d_x), _mm256_cvtepi32_ps(isum));
            }
        }
        terms
    }
}

/// The sums of the sixteen groups of 16 values of a Q8_K block's `qs`
/// (each within +-2048, an i16), those of groups `2r` and `2r + 1` as the
/// i16 pair `r` (low, high): `maddubs` of ones adds byte pairs, `madd`
/// fours, two rounds of `hadd` the rest (exact).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn group_sum_pairs(x: &[i8; 256]) -> [i32; 8] {
    let ones8 = _mm256_set1_epi8(1);
    let ones16 = _mm256_set1_epi16(1);
    // Run r: i32 lanes 0..4 sum fours of group 2r, lanes 4..8 of 2r + 1.
    let mut fours = [_mm256_setzero_si256(); 8];
    for (r, f) in fours.iter_mut().enumerate() {
        let pairs = _mm256_maddubs_epi16(ones8, load_i8(&x[32 * r..]));
        *f = _mm256_madd_epi16(pairs, ones16);
    }
    // Per four runs: the low half holds their even groups, the high half
    // their odd ones, run by run.
    let mut quads = [_mm256_setzero_si256(); 2];
    for (f, quad) in fours.chunks_exact(4).zip(&mut quads) {
        let h = _mm256_hadd_epi32(_mm256_hadd_epi32(f[0], f[1]), _mm256_hadd_epi32(f[2], f[3]));
        let odd = _mm256_permute2x128_si256::<0x01>(h, h);
        *quad = _mm256_or_si256(
            _mm256_and_si256(h, _mm256_set1_epi32(0xffff)),
            _mm256_slli_epi32::<16>(odd),
        );
    }
    let [lo, hi] = quads;
    let mut out = [0i32; 8];
    // SAFETY: `out` is 32 writable bytes; `storeu` has no alignment
    // requirement.
    unsafe {
        _mm256_storeu_si256(
            out.as_mut_ptr().cast(),
            _mm256_permute2x128_si256::<0x20>(lo, hi),
        )
    };
    out
}

/// One activation block as [`small_terms`] takes it: its values, the
/// start of each integer sum (`-OFFSET * sum(x)`), and its scales `d_x`
/// (and `s_x`, for a format with a min) in every lane.
#[derive(Clone, Copy)]
struct SmallAct<'a> {
    x: &'a [i8; 32],
    start: __m256i,
    d: __m256,
    s: __m256,
}

/// `terms[j][g]`: lane `r` is `term_from`'s term of row `r` of group `g`
/// (values `q[g]`, scales `w[g]`) with activation block `a[j]`. The i16
/// pair sums add at most 16 products of four-bit values (`16 * 15 * 128 =
/// 30720`) or 8 of five-bit ones (`8 * 31 * 128 = 31744`), as
/// `small_isums`: exact.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn small_terms<K: Small, const G: usize, const N: usize>(
    q: &[[__m256i; 8]; G],
    w: &[[__m256; 2]; G],
    a: [SmallAct; N],
) -> [[__m256; G]; N] {
    const { assert!(K::BITS <= 5) };
    let ones = _mm256_set1_epi16(1);
    let mut sums = [[_mm256_setzero_si256(); G]; N];
    for (sums, a) in sums.iter_mut().zip(&a) {
        *sums = [a.start; G];
    }
    let mut pairs = [[_mm256_setzero_si256(); G]; N];
    for c in 0..4 {
        let (mut x_lo, mut x_hi) = ([_mm256_setzero_si256(); N], [_mm256_setzero_si256(); N]);
        for j in 0..N {
            x_lo[j] = _mm256_set1_epi32(x4(a[j].x, 4 * c));
            x_hi[j] = _mm256_set1_epi32(x4(a[j].x, 16 + 4 * c));
        }
        for (g, q) in q.iter().enumerate() {
            for j in 0..N {
                let p = _mm256_add_epi16(
                    _mm256_maddubs_epi16(q[2 * c], x_lo[j]),
                    _mm256_maddubs_epi16(q[2 * c + 1], x_hi[j]),
                );
                pairs[j][g] = _mm256_add_epi16(pairs[j][g], p);
            }
        }
        if (K::BITS == 5 && c == 1) || c == 3 {
            for (sums, pairs) in sums.iter_mut().zip(pairs.iter_mut()) {
                for (s, p) in sums.iter_mut().zip(pairs.iter_mut()) {
                    *s = _mm256_add_epi32(*s, _mm256_madd_epi16(*p, ones));
                    *p = _mm256_setzero_si256();
                }
            }
        }
    }
    let mut terms = [[_mm256_setzero_ps(); G]; N];
    for j in 0..N {
        for g in 0..G {
            // `term_from`'s operations.
            let [d_w, m_w] = w[g];
            let term = _mm256_mul_ps(_mm256_mul_ps(d_w, a[j].d), _mm256_cvtepi32_ps(sums[j][g]));
            terms[j][g] = if K::MIN {
                _mm256_add_ps(term, _mm256_mul_ps(m_w, a[j].s))
            } else {
                term
            };
        }
    }
    terms
}

/// A panel's activation block as [`small_terms`] takes it (`shift`:
/// `7 - log2(OFFSET)`, the panel's sum being `-128 * sum(x)`).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn panel_act<K: Small>(f: &ActBlockFacts, shift: __m128i) -> SmallAct<'_> {
    let start = if K::OFFSET == 0 {
        _mm256_setzero_si256()
    } else {
        _mm256_sra_epi32(_mm256_set1_epi32(f.offset), shift)
    };
    let d = _mm256_set1_ps(f.d);
    SmallAct {
        x: &f.qs,
        start,
        d,
        s: d,
    }
}

/// [`many`] for the 32-value formats: `out[t]` = the `dot8` results of
/// the `G` groups of `groups` with activation row `t`, group `g` in
/// `out[t][8g..8g + 8]`. A pass of [`TOKENS`] rows that all have the
/// groups' blocks reads them from its panel in `facts` (the activations'
/// [`act_panels`](crate::quant::act_panels), Q8_0 only) where there is
/// one: the same values, scales and sums.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn small_many<K: Small, const G: usize, O: AsMut<[f32]>>(
    groups: &[u8],
    acts: &[u8],
    act_row: usize,
    facts: &[ActBlockFacts],
    out: &mut [O],
    col: usize,
) {
    let step = ROWS * K::BLOCK;
    let per_group = groups.len() / G / step * step;
    // A panel's `offset` is -128 * sum(x); the start is -OFFSET * sum(x).
    let shift = _mm_cvtsi32_si128(7 - K::OFFSET.max(1).trailing_zeros() as i32);
    for (c, chunk) in out.chunks_mut(TOKENS).enumerate() {
        let (rows, n, panel) =
            panel_pass::<K::A>(acts, act_row, c, chunk.len(), per_group / step, facts);
        let mut acc = [[_mm256_setzero_ps(); G]; TOKENS];
        for b in 0..n {
            let mut q = [[_mm256_setzero_si256(); 8]; G];
            let mut scales = [[_mm256_setzero_ps(); 2]; G];
            for g in 0..G {
                let at = g * per_group + b * step;
                q[g] = K::values(&groups[at..at + step]);
                scales[g] = w_scales::<K>(&groups[at..at + step]);
            }
            if let Some(panel) = panel {
                for (acc, f) in acc.iter_mut().zip(&panel[b * TOKENS..(b + 1) * TOKENS]) {
                    let [terms] = small_terms::<K, G, 1>(&q, &scales, [panel_act::<K>(f, shift)]);
                    add_terms(acc, &terms);
                }
                continue;
            }
            for (acc, r) in acc.iter_mut().zip(&rows[..chunk.len()]) {
                // Rows shorter than the groups stop where `dot8` would.
                let Some(a) = r.get(b) else { continue };
                let x = a.qs();
                let start = if K::OFFSET == 0 {
                    _mm256_setzero_si256()
                } else {
                    _mm256_sub_epi32(_mm256_setzero_si256(), offset_sum(K::OFFSET, x))
                };
                let [d, s] = K::a_scales(a);
                let a = SmallAct {
                    x,
                    start,
                    d: f16_splat(d),
                    s: if K::MIN {
                        f16_splat(s)
                    } else {
                        _mm256_setzero_ps()
                    },
                };
                let [terms] = small_terms::<K, G, 1>(&q, &scales, [a]);
                add_terms(acc, &terms);
            }
        }
        store_groups(chunk, &acc, col);
    }
}

// SAFETY (the wrappers below): handed out only by `avx2::vec_dot_kernel`,
// whose callers have checked that the CPU supports AVX2, FMA and F16C.

/// Q4_K x Q8_K, eight interleaved rows, many activation rows.
fn q4_k_x8n(group: &[u8], acts: &[u8], act_row: usize, out: &mut [[f32; ROWS]]) {
    // SAFETY: see above.
    unsafe { many::<Q4K, 1, 4, _>(group, acts, act_row, out) }
}

/// Q5_K x Q8_K, eight interleaved rows, many activation rows.
fn q5_k_x8n(group: &[u8], acts: &[u8], act_row: usize, out: &mut [[f32; ROWS]]) {
    // SAFETY: see above.
    unsafe { many::<Q5K, 1, 4, _>(group, acts, act_row, out) }
}

/// Q6_K x Q8_K, eight interleaved rows, many activation rows.
fn q6_k_x8n(group: &[u8], acts: &[u8], act_row: usize, out: &mut [[f32; ROWS]]) {
    // SAFETY: see above.
    unsafe { many::<Q6K, 1, 4, _>(group, acts, act_row, out) }
}

/// Q4_K x Q8_K, two groups, many activation rows.
fn q4_k_x16n(
    groups: &[u8],
    acts: &[u8],
    act_row: usize,
    _facts: &[ActBlockFacts],
    out: &mut [[f32; 2 * ROWS]],
) {
    // SAFETY: see above.
    unsafe { many::<Q4K, 2, 4, _>(groups, acts, act_row, out) }
}

/// Q5_K x Q8_K, two groups, many activation rows.
fn q5_k_x16n(
    groups: &[u8],
    acts: &[u8],
    act_row: usize,
    _facts: &[ActBlockFacts],
    out: &mut [[f32; 2 * ROWS]],
) {
    // SAFETY: see above.
    unsafe { many::<Q5K, 2, 4, _>(groups, acts, act_row, out) }
}

/// Q6_K x Q8_K, two groups, many activation rows.
fn q6_k_x16n(
    groups: &[u8],
    acts: &[u8],
    act_row: usize,
    _facts: &[ActBlockFacts],
    out: &mut [[f32; 2 * ROWS]],
) {
    // SAFETY: see above.
    unsafe { many::<Q6K, 2, 4, _>(groups, acts, act_row, out) }
}

/// Q4_0 x Q8_0, two groups, many activation rows.
fn q4_0_x16n(
    groups: &[u8],
    acts: &[u8],
    act_row: usize,
    facts: &[ActBlockFacts],
    out: &mut [[f32; 2 * ROWS]],
) {
    // SAFETY: see above.
    unsafe { small_many::<super::Q4_0, 2, _>(groups, acts, act_row, facts, out, 0) }
}

/// Q4_1 x Q8_1, two groups, many activation rows (no panels: Q8_1).
fn q4_1_x16n(
    groups: &[u8],
    acts: &[u8],
    act_row: usize,
    _facts: &[ActBlockFacts],
    out: &mut [[f32; 2 * ROWS]],
) {
    // SAFETY: see above.
    unsafe { small_many::<super::Q4_1, 2, _>(groups, acts, act_row, &[], out, 0) }
}

/// Q5_0 x Q8_0, two groups, many activation rows.
fn q5_0_x16n(
    groups: &[u8],
    acts: &[u8],
    act_row: usize,
    facts: &[ActBlockFacts],
    out: &mut [[f32; 2 * ROWS]],
) {
    // SAFETY: see above.
    unsafe { small_many::<super::Q5_0, 2, _>(groups, acts, act_row, facts, out, 0) }
}

/// The AVX2 many-row kernel of `w` from this module, if any.
pub(super) fn kernel8n_fn(w: crate::GgmlType) -> Option<Dot8NFn> {
    use crate::GgmlType::*;
    Some(match w {
        Q4K => q4_k_x8n as Dot8NFn,
        Q5K => q5_k_x8n,
        Q6K => q6_k_x8n,
        _ => return None,
    })
}

/// The AVX2 two-group kernel of `w` from this module, if any.
pub(super) fn kernel16n_fn(w: crate::GgmlType) -> Option<Dot16NFn> {
    use crate::GgmlType::*;
    Some(match w {
        Q4_0 => q4_0_x16n as Dot16NFn,
        Q4_1 => q4_1_x16n,
        Q5_0 => q5_0_x16n,
        Q8_0 => super::q8_0::q8_0_q8_0_x16n,
        Q4K => q4_k_x16n,
        Q5K => q5_k_x16n,
        Q6K => q6_k_x16n,
        _ => return None,
    })
}
