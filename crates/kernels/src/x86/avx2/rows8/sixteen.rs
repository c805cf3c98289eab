//! Sixteen-row kernels of Q4_K and Q6_K for AVX-512 VNNI: one weight row
//! per i32 lane of a 512-bit register, in either of two layouts.
//!
//! - One group of sixteen rows (`interleave` with 16 rows per group, the
//!   AVX-512 set's layout for these types): a 64-byte load of a 4-byte
//!   piece holds that piece of all sixteen rows, and the sixteen f16 scales
//!   are one 32-byte load. `dot16` (one activation row, decoding) reads the
//!   matrix as one stream; `dot16n` (many rows, prefill) decodes each
//!   super-block once for a pass of activation rows.
//! - Two groups of eight rows (AVX2's layout): the same piece of group A
//!   and of group B, joined into one register (`dot16n` of that layout).
//!
//! Both are read through [`Pieces16`], with a piece's offset given as in an
//! eight-row group (the offsets `Q4KVnni` and `Q6KVnni` use): in a group
//! of sixteen rows the same piece is at twice that offset, rows 0..8 first.
//!
//! Each lane is the same exact integer sum and the same chain of f32
//! operations as the eight-row kernels (`Q4KVnni::term`, `Q6KVnni::term`,
//! and so the scalar reference), so every result has the reference's bits.

use std::arch::x86_64::*;

use super::two_groups::{block_pairs, f16_pair, group_sums, join_i, store_rows};
use super::{pass_rows, x4, PREFETCH, TOKENS};
use crate::dot::{whole_blocks, Dot16Fn, Dot16NFn};
use crate::quant::BlockQ8K;
use crate::GgmlType;

/// Bytes of one Q4_K / Q6_K super-block of one row.
const Q4K_BLOCK: usize = 144;
const Q6K_BLOCK: usize = 210;

/// The one-row and many-row kernels of the sixteen-row layout for weights
/// of type `w`, if there are some.
pub(crate) fn kernel16_fns(w: GgmlType) -> Option<(Dot16Fn, Dot16NFn)> {
    match w {
        GgmlType::Q4K => Some((q4_k_x16 as Dot16Fn, q4_k_x16n_one as Dot16NFn)),
        GgmlType::Q6K => Some((q6_k_x16, q6_k_x16n_one)),
        _ => None,
    }
}

/// Q4_K x Q8_K, one group of sixteen rows, one activation row.
fn q4_k_x16(group: &[u8], act: &[u8], out: &mut [f32; 16]) {
    // SAFETY: handed out only by `avx512::vec_dot_kernel`, whose callers
    // have checked that the CPU supports AVX2, FMA, F16C, AVX512F/BW/VL
    // and AVX512-VNNI.
    unsafe { q4_k_dot16(group, act, out) }
}

/// Q6_K x Q8_K, one group of sixteen rows, one activation row.
fn q6_k_x16(group: &[u8], act: &[u8], out: &mut [f32; 16]) {
    // SAFETY: as in `q4_k_x16`.
    unsafe { q6_k_dot16(group, act, out) }
}

/// Q4_K x Q8_K, one group of sixteen rows, many activation rows.
fn q4_k_x16n_one(group: &[u8], acts: &[u8], act_row: usize, out: &mut [[f32; 16]]) {
    // SAFETY: as in `q4_k_x16`.
    unsafe { q4_k_dot16n(|| one_group_blocks(group, Q4K_BLOCK), acts, act_row, out) }
}

/// Q6_K x Q8_K, one group of sixteen rows, many activation rows.
fn q6_k_x16n_one(group: &[u8], acts: &[u8], act_row: usize, out: &mut [[f32; 16]]) {
    // SAFETY: as in `q4_k_x16`.
    unsafe { q6_k_dot16n(|| one_group_blocks(group, Q6K_BLOCK), acts, act_row, out) }
}

/// Q4_K x Q8_K, two groups of eight rows, many activation rows.
pub(super) fn q4_k_x16n_two(groups: &[u8], acts: &[u8], act_row: usize, out: &mut [[f32; 16]]) {
    let blocks = || block_pairs(groups, Q4K_BLOCK).map(|(a, b)| TwoGroups(a, b));
    // SAFETY: as in `q4_k_x16`.
    unsafe { q4_k_dot16n(blocks, acts, act_row, out) }
}

/// Q6_K x Q8_K, two groups of eight rows, many activation rows.
pub(super) fn q6_k_x16n_two(groups: &[u8], acts: &[u8], act_row: usize, out: &mut [[f32; 16]]) {
    let blocks = || block_pairs(groups, Q6K_BLOCK).map(|(a, b)| TwoGroups(a, b));
    // SAFETY: as in `q4_k_x16`.
    unsafe { q6_k_dot16n(blocks, acts, act_row, out) }
}

/// One super-block of sixteen rows, its pieces addressed by their offset
/// in an eight-row group's block (`at`, a multiple of 8 times the piece's
/// offset in one row's block).
trait Pieces16: Copy {
    /// The 4-byte piece at `at`, row `r` in i32 lane `r`.
    ///
    /// # Safety
    ///
    /// The CPU must support AVX2, FMA, F16C and AVX512F/BW/VL/VNNI.
    unsafe fn i32s(self, at: usize) -> __m512i;

    /// The 2-byte (f16) piece at `at`, row `r`'s value in lane `r` as f32.
    ///
    /// # Safety
    ///
    /// As [`Pieces16::i32s`].
    unsafe fn f16s(self, at: usize) -> __m512;
}

/// A super-block of a group of sixteen rows (`16 * block` bytes).
#[derive(Clone, Copy)]
struct OneGroup<'a>(&'a [u8]);

impl Pieces16 for OneGroup<'_> {
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    #[inline]
    unsafe fn i32s(self, at: usize) -> __m512i {
        let s = &self.0[2 * at..2 * at + 64];
        // SAFETY: `s` is 64 readable bytes; `loadu` has no alignment
        // requirement.
        unsafe { _mm512_loadu_si512(s.as_ptr().cast()) }
    }

    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    #[inline]
    unsafe fn f16s(self, at: usize) -> __m512 {
        let s = &self.0[2 * at..2 * at + 32];
        // SAFETY: `s` is 32 readable bytes; `loadu` has no alignment
        // requirement.
        _mm512_cvtph_ps(unsafe { _mm256_loadu_si256(s.as_ptr().cast()) })
    }
}

/// The same super-block of two groups of eight rows (`8 * block` bytes
/// each): group A's rows in lanes 0..8, B's in 8..16.
#[derive(Clone, Copy)]
struct TwoGroups<'a>(&'a [u8], &'a [u8]);

impl Pieces16 for TwoGroups<'_> {
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    #[inline]
    unsafe fn i32s(self, at: usize) -> __m512i {
        join_i(super::load_u8(&self.0[at..]), super::load_u8(&self.1[at..]))
    }

    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    #[inline]
    unsafe fn f16s(self, at: usize) -> __m512 {
        f16_pair(&self.0[at..], &self.1[at..])
    }
}

/// The super-blocks of a group of sixteen rows of `block` bytes per row.
fn one_group_blocks(group: &[u8], block: usize) -> impl Iterator<Item = OneGroup<'_>> {
    group.chunks_exact(16 * block).map(OneGroup)
}

/// Lane `r`: byte `k` of lane `r` of `v`, zero- or sign-extended to i32
/// (`lane_byte` on sixteen lanes).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn lane_byte16<const SIGNED: bool>(v: __m512i, k: usize) -> __m512i {
    let up = _mm512_sllv_epi32(v, _mm512_set1_epi32(24 - 8 * k as i32));
    if SIGNED {
        _mm512_srai_epi32::<24>(up)
    } else {
        _mm512_srli_epi32::<24>(up)
    }
}

/// Lane `r`: byte `k` of lane `r` of `v`, zero-extended to i16 in both
/// halves of the lane (`byte_pairs::<false>` on sixteen lanes).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn byte_pairs16(v: __m512i, k: usize) -> __m512i {
    // Byte k of each lane into the high byte of both i16 halves (0x80
    // clears the low byte), then a logical shift down.
    let idx = |r: i32| {
        let b = k as i32 + 4 * r;
        0x80 | (b << 8) | (0x80 << 16) | (b << 24)
    };
    let pattern = _mm512_broadcast_i32x4(_mm_setr_epi32(idx(0), idx(1), idx(2), idx(3)));
    _mm512_srli_epi16::<8>(_mm512_shuffle_epi8(v, pattern))
}

/// A Q4_K super-block's scales (i32 lanes) and mins (as the i16 pairs
/// `madd` takes) of its eight groups, and its `d` and `dmin`.
struct Q4KScales {
    scale: [__m512i; 8],
    min: [__m512i; 8],
    d: __m512,
    dmin: __m512,
}

/// [`Q4KScales`] of super-block `w` (as `q4_k_scales` on sixteen lanes).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn q4_k_scales16<P: Pieces16>(w: P) -> Q4KScales {
    let (s0, s1, s2) = (w.i32s(32), w.i32s(64), w.i32s(96));
    let six = _mm512_set1_epi8(0x3f);
    let four = _mm512_set1_epi8(0x0f);
    let tops = _mm512_set1_epi8(0x30);
    let sc_lo = _mm512_and_si512(s0, six);
    let m_lo = _mm512_and_si512(s1, six);
    let sc_hi = _mm512_or_si512(
        _mm512_and_si512(s2, four),
        _mm512_and_si512(_mm512_srli_epi32::<2>(s0), tops),
    );
    let m_hi = _mm512_or_si512(
        _mm512_and_si512(_mm512_srli_epi32::<4>(s2), four),
        _mm512_and_si512(_mm512_srli_epi32::<2>(s1), tops),
    );
    Q4KScales {
        scale: std::array::from_fn(|g| {
            lane_byte16::<false>(if g < 4 { sc_lo } else { sc_hi }, g % 4)
        }),
        min: std::array::from_fn(|g| byte_pairs16(if g < 4 { m_lo } else { m_hi }, g % 4)),
        d: w.f16s(0),
        dmin: w.f16s(16),
    }
}

/// The nibbles of group `g` (0..8) in piece `p` (0..8) of a Q4_K
/// super-block: the low nibbles of nibble piece `8 * (g / 2) + p` for an
/// even group, the high ones for an odd group.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn q4_k_nibbles<P: Pieces16>(w: P, g: usize, p: usize) -> __m512i {
    let v = w.i32s(128 + 32 * (8 * (g / 2) + p));
    let v = if g.is_multiple_of(2) {
        v
    } else {
        _mm512_srli_epi16::<4>(v)
    };
    _mm512_and_si512(v, _mm512_set1_epi8(0x0f))
}

/// Lane `r`: the scalar reference's term of row `r`'s Q4_K super-block
/// with the activation block `a`, from its scales `s` and its nibbles
/// (`q(g, p)`, as [`q4_k_nibbles`]): each group's `sum(q * x)` by `dpbusd`
/// times its scale, the mins against the block sums by `madd` (the exact
/// integers of `Q4KVnni::term`), then `with_min`'s f32 operations.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn q4_k_term16(q: impl Fn(usize, usize) -> __m512i, s: &Q4KScales, a: &BlockQ8K) -> __m512 {
    let x = &a.qs;
    let (mut isum, mut msum) = (_mm512_setzero_si512(), _mm512_setzero_si512());
    for g in 0..8 {
        let mut sums = _mm512_setzero_si512();
        for p in 0..8 {
            let xb = _mm512_set1_epi32(x4(x, 32 * g + 4 * p));
            sums = _mm512_dpbusd_epi32(sums, q(g, p), xb);
        }
        isum = _mm512_add_epi32(isum, _mm512_mullo_epi32(sums, s.scale[g]));
        let bs = i32::from(u16::from_le_bytes(a.bsums[2 * g]))
            | (i32::from(u16::from_le_bytes(a.bsums[2 * g + 1])) << 16);
        msum = _mm512_add_epi32(msum, _mm512_madd_epi16(s.min[g], _mm512_set1_epi32(bs)));
    }
    let d_x = _mm512_set1_ps(a.d());
    _mm512_sub_ps(
        _mm512_mul_ps(_mm512_mul_ps(d_x, s.d), _mm512_cvtepi32_ps(isum)),
        _mm512_mul_ps(_mm512_mul_ps(d_x, s.dmin), _mm512_cvtepi32_ps(msum)),
    )
}

/// A Q6_K super-block's signed scales of its 16 groups (i32 lanes), of
/// groups `2r, 2r + 1` as the i16 pairs `madd` takes, and its `d`.
struct Q6KScales {
    sc: [__m512i; 16],
    pairs: [__m512i; 8],
    d: __m512,
}

/// [`Q6KScales`] of super-block `w`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn q6_k_scales16<P: Pieces16>(w: P) -> Q6KScales {
    let pieces: [__m512i; 4] = std::array::from_fn(|i| w.i32s(1536 + 32 * i));
    let sc: [__m512i; 16] = std::array::from_fn(|g| lane_byte16::<true>(pieces[g / 4], g % 4));
    let mask = _mm512_set1_epi32(0xffff);
    let pairs = std::array::from_fn(|r| {
        let lo = _mm512_and_si512(sc[2 * r], mask);
        _mm512_or_si512(lo, _mm512_slli_epi32::<16>(sc[2 * r + 1]))
    });
    Q6KScales {
        sc,
        pairs,
        d: w.f16s(1664),
    }
}

/// The values `q` (0..64) of piece `i4` of run `r` of a Q6_K super-block
/// (`q6_k_values` on sixteen rows).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn q6_k_values16<P: Pieces16>(w: P, r: usize, i4: usize) -> __m512i {
    let (h, k) = (r / 4, r % 4);
    let low = _mm512_set1_epi8(0x0f);
    let l = w.i32s(32 * (16 * h + 8 * (k % 2) + i4));
    let nib = if k < 2 {
        _mm512_and_si512(l, low)
    } else {
        _mm512_and_si512(_mm512_srli_epi16::<4>(l), low)
    };
    let hq = w.i32s(1024 + 32 * (8 * h + i4));
    let top = _mm512_and_si512(
        _mm512_srl_epi16(hq, _mm_cvtsi32_si128(2 * k as i32)),
        _mm512_set1_epi8(0x03),
    );
    _mm512_or_si512(nib, _mm512_slli_epi16::<4>(top))
}

/// Lane `r`: the scalar reference's term of row `r`'s Q6_K super-block
/// with the activation block `a`, from its scales `s` and values
/// (`q(r, i4)`, as [`q6_k_values16`]): the exact integer of
/// `Q6KVnni::term` (`sum over the 16 groups of sc * sum(q * x)`, less
/// `32 * sum(sc * sum(x))` from the group sums of `x`), times `d * d_x`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn q6_k_term16(q: impl Fn(usize, usize) -> __m512i, s: &Q6KScales, a: &BlockQ8K) -> __m512 {
    let x = &a.qs;
    let xs = group_sums(x);
    let (mut isum, mut bsum) = (_mm512_setzero_si512(), _mm512_setzero_si512());
    for r in 0..8 {
        for half in 0..2 {
            let mut qx = _mm512_setzero_si512();
            for i4 in 4 * half..4 * half + 4 {
                let xb = _mm512_set1_epi32(x4(x, 32 * r + 4 * i4));
                qx = _mm512_dpbusd_epi32(qx, q(r, i4), xb);
            }
            isum = _mm512_add_epi32(isum, _mm512_mullo_epi32(qx, s.sc[2 * r + half]));
        }
        let bs = i32::from(xs[2 * r] as u16) | (i32::from(xs[2 * r + 1] as u16) << 16);
        bsum = _mm512_add_epi32(bsum, _mm512_madd_epi16(s.pairs[r], _mm512_set1_epi32(bs)));
    }
    let isum = _mm512_sub_epi32(isum, _mm512_slli_epi32::<5>(bsum));
    _mm512_mul_ps(
        _mm512_mul_ps(s.d, _mm512_set1_ps(a.d())),
        _mm512_cvtepi32_ps(isum),
    )
}

/// Defines `$name(group, act, out)`: the sixteen rows of a group of
/// sixteen (`$block` bytes per row and super-block) against one activation
/// row, each super-block's term from `$scales` and `$term` with its values
/// (`$values`) read straight from the group: one stream of weights.
macro_rules! dot16_with {
    ($name:ident, $block:expr, $scales:ident, $values:ident, $term:ident) => {
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
        #[inline]
        unsafe fn $name(group: &[u8], act: &[u8], out: &mut [f32; 16]) {
            let step = 16 * $block;
            let ab = whole_blocks::<BlockQ8K>(act);
            let n = (group.len() / step).min(ab.len());
            let mut acc = _mm512_setzero_ps();
            for (w, a) in group.chunks_exact(step).zip(&ab[..n]) {
                // As `dot8`: the weights stream from memory once per token,
                // so ask for the lines a little ahead (a hint only; never
                // faults, whatever the address): as many super-blocks
                // ahead as `dot8` is, twice its distance in bytes.
                let ahead = w.as_ptr().wrapping_add(2 * PREFETCH).cast::<i8>();
                for line in (0..step).step_by(64) {
                    _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(line));
                }
                let w = OneGroup(w);
                let s = $scales(w);
                // SAFETY: the CPU features are this function's.
                let values = |i: usize, j: usize| unsafe { $values(w, i, j) };
                acc = _mm512_add_ps(acc, $term(values, &s, a));
            }
            // SAFETY: `out` is 16 writable f32; `storeu` has no alignment
            // requirement.
            unsafe { _mm512_storeu_ps(out.as_mut_ptr(), acc) };
        }
    };
}

dot16_with!(
    q4_k_dot16,
    Q4K_BLOCK,
    q4_k_scales16,
    q4_k_nibbles,
    q4_k_term16
);
dot16_with!(
    q6_k_dot16,
    Q6K_BLOCK,
    q6_k_scales16,
    q6_k_values16,
    q6_k_term16
);

/// Defines `$name(blocks, acts, act_row, out)`: `out[t]` = the sixteen
/// rows of the super-blocks `blocks()` yields (in either layout) against activation row
/// `t` (bytes `t * act_row..` of `acts`; a missing or short row stops
/// where the one-row kernel would), bit for bit: each super-block's 64
/// value vectors and its scales are decoded once per pass of up to
/// [`TOKENS`] rows, then every row adds `$term` as the one-row kernel does.
macro_rules! dot16n_with {
    ($name:ident, $scales:ident, $values:ident, $term:ident) => {
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
        #[inline]
        unsafe fn $name<P: Pieces16, I: Iterator<Item = P>>(
            blocks: impl Fn() -> I,
            acts: &[u8],
            act_row: usize,
            out: &mut [[f32; 16]],
        ) {
            for (c, chunk) in out.chunks_mut(TOKENS).enumerate() {
                let rows: [&[BlockQ8K]; TOKENS] = pass_rows(acts, act_row, c, chunk.len());
                let longest = rows.iter().map(|r| r.len()).max().unwrap_or(0);
                let mut acc = [_mm512_setzero_ps(); TOKENS];
                let mut q = [_mm512_setzero_si512(); 64];
                for (b, w) in blocks().take(longest).enumerate() {
                    let s = $scales(w);
                    for (i, v) in q.iter_mut().enumerate() {
                        *v = $values(w, i / 8, i % 8);
                    }
                    for (acc, r) in acc.iter_mut().zip(&rows[..chunk.len()]) {
                        let Some(a) = r.get(b) else { continue };
                        *acc = _mm512_add_ps(*acc, $term(|i, j| q[8 * i + j], &s, a));
                    }
                }
                store_rows(chunk, &acc);
            }
        }
    };
}

dot16n_with!(q4_k_dot16n, q4_k_scales16, q4_k_nibbles, q4_k_term16);
dot16n_with!(q6_k_dot16n, q6_k_scales16, q6_k_values16, q6_k_term16);
