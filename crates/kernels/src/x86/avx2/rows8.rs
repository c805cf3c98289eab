//! AVX2 eight-row dot products (`VecDotKernel::dot8`) of the 32-value
//! formats Q4_0, Q4_1, Q5_0 and Q8_0 and of the K-quants Q2_K..Q6_K, on
//! groups of eight weight rows repacked by [`crate::dot::interleave`].
//!
//! In that layout a 32-byte load of one 4-byte piece of a block holds the
//! same four values of all eight rows, row `r` in i32 lane `r`. Multiplying
//! it by the four matching activation bytes, broadcast to every lane, and
//! summing adjacent products leaves row `r`'s partial integer sum in lane
//! `r`: a block's eight exact integer dot products come out in one vector,
//! with no horizontal adds. The eight rows' f16 scales are one 16-byte
//! load. Each lane then does its row's scalar sequence of f32 operations
//! (`(d_w * d_x) * isum`, `+ m_w * s_x` for Q4_1, added to the running sum
//! in block order, separate multiplies and adds), so `out[r]` has the bits
//! of the scalar reference's `dot` of row `r`.
//!
//! No overflow or saturation for any bytes: the bounds are noted at each
//! kernel. Q8_0's kernels, whose values span all of i8, are in `q8_0`.

use std::arch::x86_64::*;

use super::{load_i8, load_u8, load_u8x16};
use crate::dot::{whole_blocks, Dot16NFn, Dot8Fn, Dot8NFn};
use crate::matmul::PREFETCH_AHEAD;
use crate::quant::{Block, BlockQ8K, BlockQ8_0, BlockQ8_1};
use crate::GgmlType;

/// Rows per interleaved group of these kernels (`VecDotKernel::group_rows`
/// of the sets that use them).
pub(crate) const ROWS: usize = 8;

/// The eight-row kernel for weights of type `w`, if this set has one.
pub(super) fn kernel8_fn(w: GgmlType) -> Option<Dot8Fn> {
    use GgmlType::*;
    Some(match w {
        Q4_0 => q4_0_q8_0_x8 as Dot8Fn,
        Q4_1 => q4_1_q8_1_x8,
        Q5_0 => q5_0_q8_0_x8,
        Q8_0 => q8_0::q8_0_q8_0_x8,
        Q2K => q2_k_q8_k_x8,
        Q3K => q3_k_q8_k_x8,
        Q4K => q4_k_q8_k_x8,
        Q5K => q5_k_q8_k_x8,
        Q6K => q6_k_q8_k_x8,
        _ => return None,
    })
}

/// A weight format in the interleaved layout, and its activation format.
trait Rows8 {
    /// Bytes of one block of one row.
    const BLOCK: usize;
    /// The activation block format.
    type A: Block;

    /// Lane `r`: the scalar reference's f32 term of row `r`'s block with
    /// the activation block `a` (the term the row sum adds for this
    /// block), from the interleaved block `w` (`8 * BLOCK` bytes).
    ///
    /// # Safety
    ///
    /// The CPU must support AVX2, FMA and F16C.
    unsafe fn term(w: &[u8], a: &Self::A) -> __m256;
}

/// A 32-value format: its exact integer sums and scales, from which
/// [`legacy_term`] makes the term.
trait Legacy: Rows8 {
    /// Whether the term has the `m_w * s_x` part (the eight `m_w` are then
    /// the 16 bytes after the eight `d_w`).
    const MIN: bool;

    /// Lane `r`: the exact integer dot product of row `r`'s block with the
    /// activation block `a`, from the interleaved block `w` (the eight
    /// `d_w` are its first 16 bytes).
    ///
    /// # Safety
    ///
    /// The CPU must support AVX2, FMA and F16C.
    unsafe fn isums(w: &[u8], a: &Self::A) -> __m256i;

    /// The f16 bits of `d_x` and, if `MIN`, `s_x` (else anything).
    fn a_scales(a: &Self::A) -> [u16; 2];
}

/// The term of a 32-value format: `(d_w * d_x) * isum`, `+ m_w * s_x`
/// if it has a min.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn legacy_term<K: Legacy>(w: &[u8], a: &K::A) -> __m256 {
    term_from::<K>(K::isums(w, a), w_scales::<K>(w), a)
}

/// The eight `d_w` (and `m_w`, if the format has a min) of an interleaved
/// block, as f32.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn w_scales<K: Legacy>(w: &[u8]) -> [__m256; 2] {
    let d_w = _mm256_cvtph_ps(load_u8x16(w));
    let m_w = if K::MIN {
        _mm256_cvtph_ps(load_u8x16(&w[16..]))
    } else {
        _mm256_setzero_ps()
    };
    [d_w, m_w]
}

/// The term from the exact integer sums and the weight scales.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn term_from<K: Legacy>(isum: __m256i, [d_w, m_w]: [__m256; 2], a: &K::A) -> __m256 {
    let isum = _mm256_cvtepi32_ps(isum);
    let [d_x, s_x] = K::a_scales(a);
    let term = _mm256_mul_ps(_mm256_mul_ps(d_w, f16_splat(d_x)), isum);
    if K::MIN {
        _mm256_add_ps(term, _mm256_mul_ps(m_w, f16_splat(s_x)))
    } else {
        term
    }
}

/// A 32-value format of unsigned values with an optional offset:
/// `w = d * (q - OFFSET)` (+ `m`). Its blocks decode once into eight
/// vectors of values that any number of activation rows can then use
/// ([`dot8n`]). [`small_isums`] (AVX2) takes values of at most five bits;
/// [`small_isums_vnni`] any byte (Q8_0 as `q = w + 128`, in `q8_0`).
trait Small: Legacy + Rows8<A: Act8> {
    /// Subtracted from every value (8 for Q4_0, 16 for Q5_0, 0 for Q4_1,
    /// 128 for Q8_0's VNNI form); a power of two or zero.
    const OFFSET: i32;
    /// Bits per value: 4 (below 16), 5 (below 32) or 8.
    const BITS: u32;

    /// The eight rows' values of an interleaved block: vector `2c` holds
    /// values `4c..4c + 4` of each row (row `r` in bytes `4r..4r + 4`),
    /// vector `2c + 1` values `16 + 4c..16 + 4c + 4`.
    ///
    /// # Safety
    ///
    /// The CPU must support AVX2, FMA and F16C.
    unsafe fn values(w: &[u8]) -> [__m256i; 8];
}

/// Lane `r`: the exact `sum((q - OFFSET) * x)` of row `r`, from the
/// decoded values `q` and the activation block's values `x`. The i16 pair
/// sums add 16 products per lane for four-bit values (at most
/// `16 * 15 * 128 = 30720`), 8 for five-bit ones (`8 * 31 * 128 = 31744`):
/// exact.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn small_isums<K: Small>(q: &[__m256i; 8], x: &[i8; 32]) -> __m256i {
    // Wider values would saturate the i16 pair sums.
    const { assert!(K::BITS <= 5) };
    let ones = _mm256_set1_epi16(1);
    let mut sums = _mm256_setzero_si256();
    let mut pairs = _mm256_setzero_si256();
    for c in 0..4 {
        let x_lo = _mm256_set1_epi32(x4(x, 4 * c));
        let x_hi = _mm256_set1_epi32(x4(x, 16 + 4 * c));
        pairs = _mm256_add_epi16(pairs, _mm256_maddubs_epi16(q[2 * c], x_lo));
        pairs = _mm256_add_epi16(pairs, _mm256_maddubs_epi16(q[2 * c + 1], x_hi));
        if K::BITS == 5 && c == 1 {
            sums = _mm256_madd_epi16(pairs, ones);
            pairs = _mm256_setzero_si256();
        }
    }
    sums = _mm256_add_epi32(sums, _mm256_madd_epi16(pairs, ones));
    if K::OFFSET != 0 {
        // sum((q - o) * x) = sum(q * x) - o * sum(x), exact in i32.
        sums = _mm256_sub_epi32(sums, offset_sum(K::OFFSET, x));
    }
    sums
}

/// Activation rows per pass of [`dot8n`] (their running sums live on the
/// stack while a weight block is decoded once for all of them).
const TOKENS: usize = 16;

pub(super) use crate::dot::pass_rows;

/// Defines `$name::<K: $bound>(group, acts, act_row, out)`: `out[t]` =
/// [`dot8`] of `group` with activation row `t` (bytes
/// `t * act_row..(t + 1) * act_row` of `acts`; a missing row counts as
/// empty), bit for bit: each block of the group is decoded once per pass
/// of up to [`TOKENS`] rows (`K::values`), and each row's sum adds its
/// terms in block order as `dot8` does. `$isums` computes the exact integer
/// sums from the decoded values, with the target features `$features`
/// (AVX2's `maddubs` or `madd`, or VNNI's `dpbusd`: the same integers, so
/// the same bits).
macro_rules! dot8n_with {
    ($name:ident, $bound:ident, $isums:ident, $features:literal) => {
        #[target_feature(enable = $features)]
        #[inline]
        unsafe fn $name<K: $bound>(
            group: &[u8],
            acts: &[u8],
            act_row: usize,
            out: &mut [[f32; ROWS]],
        ) {
            let step = ROWS * K::BLOCK;
            for (c, chunk) in out.chunks_mut(TOKENS).enumerate() {
                let rows: [&[K::A]; TOKENS] = pass_rows(acts, act_row, c, chunk.len());
                let longest = rows.iter().map(|r| r.len()).max().unwrap_or(0);
                let n = (group.len() / step).min(longest);
                let mut acc = [_mm256_setzero_ps(); TOKENS];
                for (b, w) in group.chunks_exact(step).take(n).enumerate() {
                    let q = K::values(w);
                    let scales = w_scales::<K>(w);
                    for (acc, r) in acc.iter_mut().zip(&rows[..chunk.len()]) {
                        // Rows shorter than the group stop where `dot8` would.
                        if let Some(a) = r.get(b) {
                            let term = term_from::<K>($isums::<K>(&q, a.qs()), scales, a);
                            *acc = _mm256_add_ps(*acc, term);
                        }
                    }
                }
                for (o, a) in chunk.iter_mut().zip(&acc) {
                    // SAFETY: `o` is 8 writable f32; `storeu` has no
                    // alignment requirement.
                    unsafe { _mm256_storeu_ps(o.as_mut_ptr(), *a) };
                }
            }
        }
    };
}

dot8n_with!(dot8n, Small, small_isums, "avx2,fma,f16c");
dot8n_with!(
    dot8n_vnni,
    Small,
    small_isums_vnni,
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni"
);

/// [`small_isums`] with VNNI: `dpbusd` multiplies the unsigned values by
/// the signed activations and adds each lane's four products straight into
/// its i32 sum (no i16 pair step, so no saturation to reason about; the
/// sums are the same exact integers).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn small_isums_vnni<K: Small>(q: &[__m256i; 8], x: &[i8; 32]) -> __m256i {
    let mut sums = _mm256_setzero_si256();
    for c in 0..4 {
        let x_lo = _mm256_set1_epi32(x4(x, 4 * c));
        let x_hi = _mm256_set1_epi32(x4(x, 16 + 4 * c));
        sums = _mm256_dpbusd_epi32(sums, q[2 * c], x_lo);
        sums = _mm256_dpbusd_epi32(sums, q[2 * c + 1], x_hi);
    }
    if K::OFFSET != 0 {
        sums = _mm256_sub_epi32(sums, offset_sum(K::OFFSET, x));
    }
    sums
}

/// Defines `$name::<K: Rows8>(group, act, out)`: the eight rows of
/// `group` against the activation row `act`, compiled with the target
/// features `$features` (those `K::term` needs, so that it inlines).
macro_rules! dot8_with {
    ($name:ident, $features:literal) => {
        #[target_feature(enable = $features)]
        #[inline]
        unsafe fn $name<K: Rows8>(group: &[u8], act: &[u8], out: &mut [f32; ROWS]) {
            let step = ROWS * K::BLOCK;
            let ab = whole_blocks::<K::A>(act);
            // As the one-row kernels: the whole blocks common to a row
            // (there are `group.len() / step` of them in each) and the
            // activations.
            let n = (group.len() / step).min(ab.len());
            let mut acc = _mm256_setzero_ps();
            for (w, a) in group.chunks_exact(step).zip(&ab[..n]) {
                // Weights stream from memory once per token: ask for the
                // lines a little ahead (a hint only; never faults,
                // whatever the address).
                let ahead = w.as_ptr().wrapping_add(PREFETCH_AHEAD).cast::<i8>();
                for line in (0..step).step_by(64) {
                    _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(line));
                }
                acc = _mm256_add_ps(acc, K::term(w, a));
            }
            // SAFETY: `out` is 8 writable f32; `storeu` has no alignment
            // requirement.
            unsafe { _mm256_storeu_ps(out.as_mut_ptr(), acc) };
        }
    };
}

dot8_with!(dot8, "avx2,fma,f16c");
dot8_with!(
    dot8_vnni,
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni"
);

// After the macros, which it uses.
mod prefill;
mod q8_0;
mod two_groups;
mod zmm;

use zmm::Q6KVnni;

pub(crate) use two_groups::kernel16n_vnni_fn;

/// One f16 value in all eight lanes, as f32 (exactly).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn f16_splat(h: u16) -> __m256 {
    _mm256_cvtph_ps(_mm_set1_epi16(h as i16))
}

/// Activation bytes `at..at + 4` (of any activation block's values) as
/// one i32, to broadcast.
#[inline(always)]
fn x4(x: &[i8], at: usize) -> i32 {
    let b = &x[at..at + 4];
    i32::from_le_bytes([b[0] as u8, b[1] as u8, b[2] as u8, b[3] as u8])
}

/// The values of four nibble pieces starting at `w[at]`, in the layout of
/// [`Small::values`]: piece `c`'s low nibbles are values `4c..4c + 4` of
/// each row, its high nibbles values `16 + 4c..`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn nibbles8(w: &[u8], at: usize) -> [__m256i; 8] {
    let low = _mm256_set1_epi8(0x0f);
    let mut q = [_mm256_setzero_si256(); 8];
    for c in 0..4 {
        let v = load_u8(&w[at + 32 * c..]);
        q[2 * c] = _mm256_and_si256(v, low);
        q[2 * c + 1] = _mm256_and_si256(_mm256_srli_epi16::<4>(v), low);
    }
    q
}

/// `offset * sum(x)` of an activation block, in every lane (`offset` a
/// power of two).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn offset_sum(offset: i32, x: &[i8; 32]) -> __m256i {
    let v = load_i8(x);
    let pairs = _mm256_maddubs_epi16(_mm256_set1_epi8(1), v);
    let s = _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
    // The eight partial sums added into every lane, without leaving the
    // vector registers.
    let s = _mm256_add_epi32(s, _mm256_permute2x128_si256::<1>(s, s));
    let s = _mm256_add_epi32(s, _mm256_shuffle_epi32::<0b01_00_11_10>(s));
    let s = _mm256_add_epi32(s, _mm256_shuffle_epi32::<0b10_11_00_01>(s));
    debug_assert!(offset.count_ones() == 1);
    _mm256_sll_epi32(s, _mm_cvtsi32_si128(offset.trailing_zeros() as i32))
}

/// The `Rows8`, `Legacy` and `Small` impls of a small-value format whose
/// activations are `$act` and whose min (Q4_1) is `$min`.
macro_rules! small_format {
    ($name:ident, $block:expr, $act:ty, $min:expr) => {
        impl Rows8 for $name {
            const BLOCK: usize = $block;
            type A = $act;
            #[target_feature(enable = "avx2,fma,f16c")]
            #[inline]
            unsafe fn term(w: &[u8], a: &$act) -> __m256 {
                legacy_term::<Self>(w, a)
            }
        }
        impl Legacy for $name {
            const MIN: bool = $min;
            #[target_feature(enable = "avx2,fma,f16c")]
            #[inline]
            unsafe fn isums(w: &[u8], a: &$act) -> __m256i {
                small_isums::<Self>(&Self::values(w), &a.qs)
            }
            fn a_scales(a: &$act) -> [u16; 2] {
                a.scales()
            }
        }
    };
}

/// An 8-bit activation block of 32 values (Q8_0, Q8_1).
trait Act8 {
    /// The f16 bits of `d` and (Q8_1) `s`.
    fn scales(&self) -> [u16; 2];
    /// The values.
    fn qs(&self) -> &[i8; 32];
}
impl Act8 for BlockQ8_0 {
    fn scales(&self) -> [u16; 2] {
        [u16::from_le_bytes(self.d), 0]
    }
    fn qs(&self) -> &[i8; 32] {
        &self.qs
    }
}
impl Act8 for BlockQ8_1 {
    fn scales(&self) -> [u16; 2] {
        [u16::from_le_bytes(self.d), u16::from_le_bytes(self.s)]
    }
    fn qs(&self) -> &[i8; 32] {
        &self.qs
    }
}

/// Q4_0: `d` at 0, the four nibble pieces at `16 + 32c`; `w = d (q - 8)`.
struct Q4_0;
small_format!(Q4_0, 18, BlockQ8_0, false);
impl Small for Q4_0 {
    const OFFSET: i32 = 8;
    const BITS: u32 = 4;
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn values(w: &[u8]) -> [__m256i; 8] {
        nibbles8(w, 16)
    }
}

/// Q4_1: `d` at 0, `m` at 16, the nibble pieces at `32 + 32c`.
struct Q4_1;
small_format!(Q4_1, 20, BlockQ8_1, true);
impl Small for Q4_1 {
    const OFFSET: i32 = 0;
    const BITS: u32 = 4;
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn values(w: &[u8]) -> [__m256i; 8] {
        nibbles8(w, 32)
    }
}

/// Q5_0: `d` at 0, the fifth bits at 16 (one u32 per row), the nibble
/// pieces at `48 + 32c`; `w = d (q - 16)`.
struct Q5_0;
small_format!(Q5_0, 22, BlockQ8_0, false);
impl Small for Q5_0 {
    const OFFSET: i32 = 16;
    const BITS: u32 = 5;
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn values(w: &[u8]) -> [__m256i; 8] {
        // The fifth bits of row r are the u32 in lane r of bytes 16..48:
        // bit j for value j. Piece c's low nibbles (values 4c + j) take bit
        // 4c + j, in byte c / 2 of the lane; its high nibbles (values
        // 16 + 4c + j) bit 16 + 4c + j, in byte 2 + c / 2. A shuffle copies
        // that byte to the four bytes of the lane, and byte j tests its bit.
        let qh = load_u8(&w[16..]);
        let sixteen = _mm256_set1_epi8(0x10);
        let mut q = nibbles8(w, 48);
        for c in 0..4 {
            let byte = |k: usize| _mm256_set1_epi32((k * 0x0101_0101) as i32);
            let spread_lo = _mm256_shuffle_epi8(qh, _mm256_add_epi8(byte(c / 2), lanes()));
            let spread_hi = _mm256_shuffle_epi8(qh, _mm256_add_epi8(byte(2 + c / 2), lanes()));
            let bit = _mm256_set1_epi32((0x0804_0201u32 << (4 * (c % 2))) as i32);
            let set = |s: __m256i| {
                let hit = _mm256_cmpeq_epi8(_mm256_and_si256(s, bit), bit);
                _mm256_and_si256(hit, sixteen)
            };
            q[2 * c] = _mm256_or_si256(q[2 * c], set(spread_lo));
            q[2 * c + 1] = _mm256_or_si256(q[2 * c + 1], set(spread_hi));
        }
        q
    }
}

/// Byte `4r + j` of each 128-bit half holds `4r`: added to a byte index
/// `k` in every byte, a shuffle then reads byte `k` of each i32 lane.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn lanes() -> __m256i {
    _mm256_set_epi32(
        0x0c0c_0c0c,
        0x0808_0808,
        0x0404_0404,
        0,
        0x0c0c_0c0c,
        0x0808_0808,
        0x0404_0404,
        0,
    )
}

/// Lane `r`: byte `k` of i32 lane `r` of `v`, as i16 in both halves of
/// the lane (sign-extended if `SIGNED`, else zero-extended), ready to
/// multiply a row's i16 pair sums with `madd`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn byte_pairs<const SIGNED: bool>(v: __m256i, k: usize) -> __m256i {
    // Byte k of each lane into the high byte of both i16 halves (0x80
    // clears the low byte), then an arithmetic or logical shift down.
    let idx = |r: i32| {
        let b = k as i32 + 4 * r;
        0x80 | (b << 8) | (0x80 << 16) | (b << 24)
    };
    let v = _mm256_shuffle_epi8(
        v,
        _mm256_setr_epi32(
            idx(0),
            idx(1),
            idx(2),
            idx(3),
            idx(0),
            idx(1),
            idx(2),
            idx(3),
        ),
    );
    if SIGNED {
        _mm256_srai_epi16::<8>(v)
    } else {
        _mm256_srli_epi16::<8>(v)
    }
}

/// Q4_K (super-blocks of 256 values, 8 groups of 32 with 6-bit scales and
/// mins) in the interleaved layout: `d` at 0, `dmin` at 16, the 12 scale
/// bytes as three pieces at 32, 64, 96, then the 32 pieces of nibbles at
/// `128 + 32p` (pieces `8c..8c + 8` hold group `2c` in their low nibbles
/// and group `2c + 1` in their high ones).
/// The 6-bit scales and mins of a Q4_K super-block's groups 0..4 and
/// 4..8, one byte per group in each row's lane (as `scale_min_k4`):
/// `[scales 0..4, mins 0..4, scales 4..8, mins 4..8]`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn q4_k_scales(w: &[u8]) -> [__m256i; 4] {
    let s0 = load_u8(&w[32..]);
    let s1 = load_u8(&w[64..]);
    let s2 = load_u8(&w[96..]);
    let six = _mm256_set1_epi8(0x3f);
    let four = _mm256_set1_epi8(0x0f);
    let tops = _mm256_set1_epi8(0x30);
    let sc_lo = _mm256_and_si256(s0, six);
    let m_lo = _mm256_and_si256(s1, six);
    let sc_hi = _mm256_or_si256(
        _mm256_and_si256(s2, four),
        _mm256_and_si256(_mm256_srli_epi32::<2>(s0), tops),
    );
    let m_hi = _mm256_or_si256(
        _mm256_and_si256(_mm256_srli_epi32::<4>(s2), four),
        _mm256_and_si256(_mm256_srli_epi32::<2>(s1), tops),
    );
    [sc_lo, m_lo, sc_hi, m_hi]
}

/// The values `q` (0..64) of piece `i4` of run `r` of a Q6_K super-block
/// for the eight rows: run `r` holds groups `2r, 2r + 1`; half `h = r / 4`,
/// `k = r % 4`; value `i` of the run is in ql piece `16h + 8(k % 2) + i / 4`
/// (low nibble if `k < 2`) and qh piece `8h + i / 4` (bits `2k, 2k + 1`).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn q6_k_values(w: &[u8], r: usize, i4: usize) -> __m256i {
    let (h, k) = (r / 4, r % 4);
    let low = _mm256_set1_epi8(0x0f);
    let l = load_u8(&w[32 * (16 * h + 8 * (k % 2) + i4)..]);
    let nib = if k < 2 {
        _mm256_and_si256(l, low)
    } else {
        _mm256_and_si256(_mm256_srli_epi16::<4>(l), low)
    };
    let hq = load_u8(&w[1024 + 32 * (8 * h + i4)..]);
    let top = _mm256_and_si256(
        _mm256_srl_epi16(hq, _mm_cvtsi32_si128(2 * k as i32)),
        _mm256_set1_epi8(0x03),
    );
    _mm256_or_si256(nib, _mm256_slli_epi16::<4>(top))
}

struct Q4K;
impl Rows8 for Q4K {
    const BLOCK: usize = 144;
    type A = BlockQ8K;
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn term(w: &[u8], a: &BlockQ8K) -> __m256 {
        // The 6-bit scales and mins of groups 0..4 and 4..8, one byte per
        // group in each row's lane (as `scale_min_k4`).
        let [sc_lo, m_lo, sc_hi, m_hi] = q4_k_scales(w);
        let x = &a.qs;
        let low = _mm256_set1_epi8(0x0f);
        let (mut isum, mut msum) = (_mm256_setzero_si256(), _mm256_setzero_si256());
        for c in 0..4 {
            // i16 pair sums of groups 2c (low nibbles) and 2c + 1: each
            // lane adds 16 products of a nibble and an i8, |.| <= 30720.
            let (mut even, mut odd) = (_mm256_setzero_si256(), _mm256_setzero_si256());
            for p in 0..8 {
                let v = load_u8(&w[128 + 32 * (8 * c + p)..]);
                let x_even = _mm256_set1_epi32(x4(x, 64 * c + 4 * p));
                let x_odd = _mm256_set1_epi32(x4(x, 64 * c + 32 + 4 * p));
                let lo = _mm256_and_si256(v, low);
                let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(v), low);
                even = _mm256_add_epi16(even, _mm256_maddubs_epi16(lo, x_even));
                odd = _mm256_add_epi16(odd, _mm256_maddubs_epi16(hi, x_odd));
            }
            for (g, pairs) in [(2 * c, even), (2 * c + 1, odd)] {
                let (sc, m) = if g < 4 { (sc_lo, m_lo) } else { (sc_hi, m_hi) };
                // isum += sc * sum(q * x): |.| <= 8 * 63 * 2 * 30720.
                isum = _mm256_add_epi32(
                    isum,
                    _mm256_madd_epi16(pairs, byte_pairs::<false>(sc, g % 4)),
                );
                // msum += m * (bsum[2g] + bsum[2g + 1]), as one madd.
                let bs = i32::from(u16::from_le_bytes(a.bsums[2 * g]))
                    | (i32::from(u16::from_le_bytes(a.bsums[2 * g + 1])) << 16);
                msum = _mm256_add_epi32(
                    msum,
                    _mm256_madd_epi16(byte_pairs::<false>(m, g % 4), _mm256_set1_epi32(bs)),
                );
            }
        }
        with_min(a.d(), load_u8x16(w), load_u8x16(&w[16..]), isum, msum)
    }
}

/// The fifth bits of group `g`'s values in piece `p` of a Q5_K
/// super-block for the eight rows, as 16 (else 0) in each value's byte:
/// bit `g` of each byte of the fifth-bit piece `p` (at `128 + 32p`; byte
/// `l` of a row holds the bits of its values `l` of the eight groups).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn q5_k_high(w: &[u8], g: usize, p: usize) -> __m256i {
    let h = load_u8(&w[128 + 32 * p..]);
    // Bit g of each byte moved to bit 4 (16-bit shifts: the mask keeps only
    // bits that stayed in their byte).
    let at4 = if g <= 4 {
        _mm256_sll_epi16(h, _mm_cvtsi32_si128(4 - g as i32))
    } else {
        _mm256_srl_epi16(h, _mm_cvtsi32_si128(g as i32 - 4))
    };
    _mm256_and_si256(at4, _mm256_set1_epi8(0x10))
}

/// The values (0..32) of piece `p` of group `g` of a Q5_K super-block for
/// the eight rows: the nibbles as Q4_K's (at `384 + 32 (8 (g / 2) + p)`,
/// low for even groups) with the fifth bit ([`q5_k_high`]).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn q5_k_values(w: &[u8], g: usize, p: usize) -> __m256i {
    let v = load_u8(&w[384 + 32 * (8 * (g / 2) + p)..]);
    let nib = if g.is_multiple_of(2) {
        v
    } else {
        _mm256_srli_epi16::<4>(v)
    };
    _mm256_or_si256(
        _mm256_and_si256(nib, _mm256_set1_epi8(0x0f)),
        q5_k_high(w, g, p),
    )
}

/// Q5_K (Q4_K with a fifth bit per value) in the interleaved layout: `d`
/// at 0, `dmin` at 16, the 12 scale bytes as three pieces at 32, 64, 96
/// (as Q4_K), the eight pieces of fifth bits at `128 + 32p`, then the 32
/// pieces of nibbles at `384 + 32p` (as Q4_K's at 128).
struct Q5K;
impl Rows8 for Q5K {
    const BLOCK: usize = 176;
    type A = BlockQ8K;
    /// As `Q4K::term`, with values 0..32: the i16 pair sums of four
    /// `maddubs` (`|.| <= 4 * 2 * 31 * 128 = 31744`) times the scale by
    /// `madd`, twice per group.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn term(w: &[u8], a: &BlockQ8K) -> __m256 {
        let [sc_lo, m_lo, sc_hi, m_hi] = q4_k_scales(w);
        let x = &a.qs;
        let (mut isum, mut msum) = (_mm256_setzero_si256(), _mm256_setzero_si256());
        for g in 0..8 {
            let (sc, m) = if g < 4 { (sc_lo, m_lo) } else { (sc_hi, m_hi) };
            let scale = byte_pairs::<false>(sc, g % 4);
            for half in 0..2 {
                let mut pairs = _mm256_setzero_si256();
                for p in 4 * half..4 * half + 4 {
                    let xb = _mm256_set1_epi32(x4(x, 32 * g + 4 * p));
                    pairs = _mm256_add_epi16(pairs, _mm256_maddubs_epi16(q5_k_values(w, g, p), xb));
                }
                // isum += sc * sum(q * x): |.| <= 8 * 63 * 32 * 31 * 128.
                isum = _mm256_add_epi32(isum, _mm256_madd_epi16(pairs, scale));
            }
            let bs = i32::from(u16::from_le_bytes(a.bsums[2 * g]))
                | (i32::from(u16::from_le_bytes(a.bsums[2 * g + 1])) << 16);
            msum = _mm256_add_epi32(
                msum,
                _mm256_madd_epi16(byte_pairs::<false>(m, g % 4), _mm256_set1_epi32(bs)),
            );
        }
        with_min(a.d(), load_u8x16(w), load_u8x16(&w[16..]), isum, msum)
    }
}

/// Q6_K (super-blocks of 256 values, 16 groups of 16 with i8 scales) in
/// the interleaved layout: the 32 pieces of `ql` at `32p`, the 16 of `qh`
/// at `1024 + 32p`, the four of scales at `1536 + 32p`, `d` at 1664.
struct Q6K;
impl Rows8 for Q6K {
    const BLOCK: usize = 210;
    type A = BlockQ8K;
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn term(w: &[u8], a: &BlockQ8K) -> __m256 {
        let x = &a.qs;
        let thirty_two = _mm256_set1_epi8(32);
        let mut isum = _mm256_setzero_si256();
        // Run r of 32 values (groups 2r, 2r + 1), as in the scalar
        // reference: half h = r / 4, k = r % 4; value i of the run is in
        // ql piece 16h + 8(k % 2) + i / 4 (low nibble if k < 2) and qh
        // piece 8h + i / 4 (bits 2k, 2k + 1).
        for r in 0..8 {
            for half in 0..2 {
                let group = 2 * r + half;
                let scales = load_u8(&w[1536 + 32 * (group / 4)..]);
                let sc = byte_pairs::<true>(scales, group % 4);
                for pair in 0..2 {
                    // Two pieces: i16 pair sums of (q - 32) * x, each
                    // |.| <= 2 * 32 * 128, two added <= 16384.
                    let mut pairs = _mm256_setzero_si256();
                    for i4 in 4 * half + 2 * pair..4 * half + 2 * pair + 2 {
                        let q = q6_k_values(w, r, i4);
                        let xb = _mm256_set1_epi32(x4(x, 32 * r + 4 * i4));
                        let d = _mm256_sub_epi16(
                            _mm256_maddubs_epi16(q, xb),
                            _mm256_maddubs_epi16(thirty_two, xb),
                        );
                        pairs = _mm256_add_epi16(pairs, d);
                    }
                    // |isum| <= 256 * 32 * 128 * 128 = 2^28.
                    isum = _mm256_add_epi32(isum, _mm256_madd_epi16(pairs, sc));
                }
            }
        }
        q6_k_term(w, a, isum)
    }
}

/// A Q6_K block's term from its exact integer sums: `(d * d_x) * isum`
/// for the eight rows (`d` at byte 1664 of the interleaved block), as the
/// scalar reference rounds it.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn q6_k_term(w: &[u8], a: &BlockQ8K, isum: __m256i) -> __m256 {
    let d = _mm256_cvtph_ps(load_u8x16(&w[1664..]));
    _mm256_mul_ps(
        _mm256_mul_ps(d, _mm256_set1_ps(a.d())),
        _mm256_cvtepi32_ps(isum),
    )
}

/// Q2_K (super-blocks of 256 values, 16 groups of 16 with 4-bit scales
/// and mins) in the interleaved layout: the 16 scale bytes as four pieces
/// at `32p`, the 16 pieces of 2-bit values at `128 + 32p`, `d` at 640,
/// `dmin` at 656.
struct Q2K;
impl Rows8 for Q2K {
    const BLOCK: usize = 84;
    type A = BlockQ8K;
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn term(w: &[u8], a: &BlockQ8K) -> __m256 {
        let x = &a.qs;
        let (mut isum, mut msum) = (_mm256_setzero_si256(), _mm256_setzero_si256());
        let nibble = _mm256_set1_epi8(0x0f);
        let two = _mm256_set1_epi8(0x03);
        for g in 0..16 {
            // Group g: bytes 32 (g / 8) + 16 (g % 2) .. + 16 of qs, bits
            // 2 ((g / 2) % 4) .. + 2 (as the scalar reference).
            let shift = _mm_cvtsi32_si128(2 * ((g / 2) % 4) as i32);
            let mut pairs = _mm256_setzero_si256();
            for i4 in 0..4 {
                let v = load_u8(&w[128 + 32 * (8 * (g / 8) + 4 * (g % 2) + i4)..]);
                let q = _mm256_and_si256(_mm256_srl_epi16(v, shift), two);
                let xb = _mm256_set1_epi32(x4(x, 16 * g + 4 * i4));
                // Pair sums of values in 0..4 and i8: 4 * 768 at most.
                pairs = _mm256_add_epi16(pairs, _mm256_maddubs_epi16(q, xb));
            }
            let scales = load_u8(&w[32 * (g / 4)..]);
            let sc = _mm256_and_si256(scales, nibble);
            let m = _mm256_and_si256(_mm256_srli_epi16::<4>(scales), nibble);
            isum = _mm256_add_epi32(
                isum,
                _mm256_madd_epi16(pairs, byte_pairs::<false>(sc, g % 4)),
            );
            // m * bsum: the pair [m, m] against [bsum, 0].
            let bs = i32::from(u16::from_le_bytes(a.bsums[g]));
            msum = _mm256_add_epi32(
                msum,
                _mm256_madd_epi16(byte_pairs::<false>(m, g % 4), _mm256_set1_epi32(bs)),
            );
        }
        with_min(
            a.d(),
            load_u8x16(&w[640..]),
            load_u8x16(&w[656..]),
            isum,
            msum,
        )
    }
}

/// Q3_K (super-blocks of 256 values, 16 groups of 16 with signed 6-bit
/// scales) in the interleaved layout: the 8 pieces of `hmask` at `32p`, the
/// 16 of 2-bit values at `256 + 32p`, the three of scale bytes at 768, 800
/// and 832, `d` at 864.
struct Q3K;
impl Rows8 for Q3K {
    const BLOCK: usize = 110;
    type A = BlockQ8K;
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn term(w: &[u8], a: &BlockQ8K) -> __m256 {
        // Scale j (as `BlockQ3K::scales`): low nibble from byte j (j < 8)
        // or the high nibble of byte j - 8, top two bits from byte 8 + j % 4
        // at bit 2 (j / 4); biased by 32. Per row lane, byte k of set s
        // holds scale 4s + k, unbiased.
        let s0 = load_u8(&w[768..]);
        let s1 = load_u8(&w[800..]);
        let s2 = load_u8(&w[832..]);
        let nibble = _mm256_set1_epi8(0x0f);
        let two = _mm256_set1_epi8(0x03);
        let top = |v: __m256i| _mm256_slli_epi32::<4>(_mm256_and_si256(v, two));
        let sets = [
            _mm256_or_si256(_mm256_and_si256(s0, nibble), top(s2)),
            _mm256_or_si256(
                _mm256_and_si256(s1, nibble),
                top(_mm256_srli_epi32::<2>(s2)),
            ),
            _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi32::<4>(s0), nibble),
                top(_mm256_srli_epi32::<4>(s2)),
            ),
            _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi32::<4>(s1), nibble),
                top(_mm256_srli_epi32::<6>(s2)),
            ),
        ];
        let bias = _mm256_set1_epi16(32);
        let four = _mm256_set1_epi8(4);
        let one = _mm256_set1_epi8(1);
        let x = &a.qs;
        let mut isum = _mm256_setzero_si256();
        for g in 0..16 {
            // Group g: k = (g / 2) % 4, half g / 8, bytes 16 (g % 2) .. of
            // the half's 32 qs bytes and of hmask; high bit 4 (g / 8) + k.
            let k = (g / 2) % 4;
            let shift = _mm_cvtsi32_si128(2 * k as i32);
            let bit = _mm_cvtsi32_si128((4 * (g / 8) + k) as i32);
            let mut pairs = _mm256_setzero_si256();
            for i4 in 0..4 {
                let v = load_u8(&w[256 + 32 * (8 * (g / 8) + 4 * (g % 2) + i4)..]);
                let h = load_u8(&w[32 * (4 * (g % 2) + i4)..]);
                let low = _mm256_and_si256(_mm256_srl_epi16(v, shift), two);
                let high = _mm256_and_si256(_mm256_srl_epi16(h, bit), one);
                // u = q + 4 in 0..8: the value plus 4 where the bit is set.
                let u = _mm256_or_si256(low, _mm256_slli_epi16::<2>(high));
                let xb = _mm256_set1_epi32(x4(x, 16 * g + 4 * i4));
                // Pair sums of (u - 4) * x = q * x: at most 2 * 4 * 128.
                let d =
                    _mm256_sub_epi16(_mm256_maddubs_epi16(u, xb), _mm256_maddubs_epi16(four, xb));
                pairs = _mm256_add_epi16(pairs, d);
            }
            let sc = _mm256_sub_epi16(byte_pairs::<false>(sets[g / 4], g % 4), bias);
            isum = _mm256_add_epi32(isum, _mm256_madd_epi16(pairs, sc));
        }
        // (d * d_x) * isum.
        let d = _mm256_cvtph_ps(load_u8x16(&w[864..]));
        _mm256_mul_ps(
            _mm256_mul_ps(d, _mm256_set1_ps(a.d())),
            _mm256_cvtepi32_ps(isum),
        )
    }
}

/// The term of a k-quant with mins, as the scalar `with_min`:
/// `(d_x * d) * isum - (d_x * dmin) * msum`, with the eight rows' f16 `d`
/// and `dmin` and their integer sums.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn with_min(d_x: f32, d: __m128i, dmin: __m128i, isum: __m256i, msum: __m256i) -> __m256 {
    with_min_f32(d_x, _mm256_cvtph_ps(d), _mm256_cvtph_ps(dmin), isum, msum)
}

/// [`with_min`] with `d` and `dmin` already converted to f32.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn with_min_f32(d_x: f32, d: __m256, dmin: __m256, isum: __m256i, msum: __m256i) -> __m256 {
    let d_x = _mm256_set1_ps(d_x);
    _mm256_sub_ps(
        _mm256_mul_ps(_mm256_mul_ps(d_x, d), _mm256_cvtepi32_ps(isum)),
        _mm256_mul_ps(_mm256_mul_ps(d_x, dmin), _mm256_cvtepi32_ps(msum)),
    )
}

/// Q2_K x Q8_K, eight interleaved rows.
fn q2_k_q8_k_x8(group: &[u8], act: &[u8], out: &mut [f32; ROWS]) {
    // SAFETY: as in `q4_0_q8_0_x8`.
    unsafe { dot8::<Q2K>(group, act, out) }
}

/// Q3_K x Q8_K, eight interleaved rows.
fn q3_k_q8_k_x8(group: &[u8], act: &[u8], out: &mut [f32; ROWS]) {
    // SAFETY: as in `q4_0_q8_0_x8`.
    unsafe { dot8::<Q3K>(group, act, out) }
}

/// Q4_K x Q8_K, eight interleaved rows.
fn q4_k_q8_k_x8(group: &[u8], act: &[u8], out: &mut [f32; ROWS]) {
    // SAFETY: as in `q4_0_q8_0_x8`.
    unsafe { dot8::<Q4K>(group, act, out) }
}

/// Q5_K x Q8_K, eight interleaved rows.
fn q5_k_q8_k_x8(group: &[u8], act: &[u8], out: &mut [f32; ROWS]) {
    // SAFETY: as in `q4_0_q8_0_x8`.
    unsafe { dot8::<Q5K>(group, act, out) }
}

/// Q6_K x Q8_K, eight interleaved rows.
fn q6_k_q8_k_x8(group: &[u8], act: &[u8], out: &mut [f32; ROWS]) {
    // SAFETY: as in `q4_0_q8_0_x8`.
    unsafe { dot8::<Q6K>(group, act, out) }
}

/// The many-row kernel for weights of type `w`, if this set has one.
pub(super) fn kernel8n_fn(w: GgmlType) -> Option<Dot8NFn> {
    use GgmlType::*;
    Some(match w {
        Q4_0 => q4_0_q8_0_x8n as Dot8NFn,
        Q4_1 => q4_1_q8_1_x8n,
        Q5_0 => q5_0_q8_0_x8n,
        Q8_0 => q8_0::q8_0_q8_0_x8n,
        _ => return prefill::kernel8n_fn(w),
    })
}

/// The two-group many-row kernel (`VecDotKernel::dot16n`) for weights of
/// type `w`, if this set has one.
pub(super) fn kernel16n_fn(w: GgmlType) -> Option<Dot16NFn> {
    prefill::kernel16n_fn(w)
}

/// Q4_0 x Q8_0, eight interleaved rows, many activation rows.
fn q4_0_q8_0_x8n(group: &[u8], acts: &[u8], act_row: usize, out: &mut [[f32; ROWS]]) {
    // SAFETY: as in `q4_0_q8_0_x8`.
    unsafe { dot8n::<Q4_0>(group, acts, act_row, out) }
}

/// Q4_1 x Q8_1, eight interleaved rows, many activation rows.
fn q4_1_q8_1_x8n(group: &[u8], acts: &[u8], act_row: usize, out: &mut [[f32; ROWS]]) {
    // SAFETY: as in `q4_0_q8_0_x8`.
    unsafe { dot8n::<Q4_1>(group, acts, act_row, out) }
}

/// Q5_0 x Q8_0, eight interleaved rows, many activation rows.
fn q5_0_q8_0_x8n(group: &[u8], acts: &[u8], act_row: usize, out: &mut [[f32; ROWS]]) {
    // SAFETY: as in `q4_0_q8_0_x8`.
    unsafe { dot8n::<Q5_0>(group, acts, act_row, out) }
}

/// Lane `r`: byte `k` of lane `r` of `v`, zero- or sign-extended to i32.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn lane_byte<const SIGNED: bool>(v: __m256i, k: usize) -> __m256i {
    let up = _mm256_sllv_epi32(v, _mm256_set1_epi32(24 - 8 * k as i32));
    if SIGNED {
        _mm256_srai_epi32::<24>(up)
    } else {
        _mm256_srli_epi32::<24>(up)
    }
}

/// A 32-value format whose blocks' integer sums are taken with VNNI
/// ([`small_isums_vnni`]) in the one-row kernel too: the same exact
/// integers as `K`'s own term, so the same bits.
struct Vnni<K>(std::marker::PhantomData<K>);

impl<K: Small> Rows8 for Vnni<K> {
    const BLOCK: usize = K::BLOCK;
    type A = K::A;
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    #[inline]
    unsafe fn term(w: &[u8], a: &K::A) -> __m256 {
        term_from::<K>(
            small_isums_vnni::<K>(&K::values(w), a.qs()),
            w_scales::<K>(w),
            a,
        )
    }
}

/// Q4_K in the interleaved layout, its group sums taken with VNNI.
struct Q4KVnni;

impl Rows8 for Q4KVnni {
    const BLOCK: usize = 144;
    type A = BlockQ8K;
    /// As `Q4K::term`, with each group's `sum(q * x)` accumulated in i32
    /// by `dpbusd` (|.| <= 32 * 15 * 128) and multiplied by its scale in
    /// i32: the same exact integers.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    #[inline]
    unsafe fn term(w: &[u8], a: &BlockQ8K) -> __m256 {
        let [sc_lo, m_lo, sc_hi, m_hi] = q4_k_scales(w);
        let x = &a.qs;
        let low = _mm256_set1_epi8(0x0f);
        let (mut isum, mut msum) = (_mm256_setzero_si256(), _mm256_setzero_si256());
        for c in 0..4 {
            let (mut even, mut odd) = (_mm256_setzero_si256(), _mm256_setzero_si256());
            for p in 0..8 {
                let v = load_u8(&w[128 + 32 * (8 * c + p)..]);
                let x_even = _mm256_set1_epi32(x4(x, 64 * c + 4 * p));
                let x_odd = _mm256_set1_epi32(x4(x, 64 * c + 32 + 4 * p));
                let lo = _mm256_and_si256(v, low);
                let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(v), low);
                even = _mm256_dpbusd_epi32(even, lo, x_even);
                odd = _mm256_dpbusd_epi32(odd, hi, x_odd);
            }
            for (g, sums) in [(2 * c, even), (2 * c + 1, odd)] {
                let (sc, m) = if g < 4 { (sc_lo, m_lo) } else { (sc_hi, m_hi) };
                let scale = lane_byte::<false>(sc, g % 4);
                isum = _mm256_add_epi32(isum, _mm256_mullo_epi32(sums, scale));
                let bs = i32::from(u16::from_le_bytes(a.bsums[2 * g]))
                    | (i32::from(u16::from_le_bytes(a.bsums[2 * g + 1])) << 16);
                msum = _mm256_add_epi32(
                    msum,
                    _mm256_madd_epi16(byte_pairs::<false>(m, g % 4), _mm256_set1_epi32(bs)),
                );
            }
        }
        with_min(a.d(), load_u8x16(w), load_u8x16(&w[16..]), isum, msum)
    }
}

/// `dot8` of a Q4_K group with [`Q4KVnni`] against many activation rows,
/// bit for bit: each super-block's 64 nibble vectors and its scales and
/// mins are decoded once per pass of up to [`TOKENS`] rows, then every row
/// takes its sums as [`Q4KVnni::term`] does and adds the same term.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn q4_k_dot8n_vnni(group: &[u8], acts: &[u8], act_row: usize, out: &mut [[f32; ROWS]]) {
    let step = ROWS * Q4KVnni::BLOCK;
    let low = _mm256_set1_epi8(0x0f);
    for (c, chunk) in out.chunks_mut(TOKENS).enumerate() {
        let rows: [&[BlockQ8K]; TOKENS] = pass_rows(acts, act_row, c, chunk.len());
        let longest = rows.iter().map(|r| r.len()).max().unwrap_or(0);
        let n = (group.len() / step).min(longest);
        let mut acc = [_mm256_setzero_ps(); TOKENS];
        // Nibbles of group g, piece p at 8 * g + p; each group's scale
        // (i32 lanes) and min (as the i16 pairs `madd` takes).
        let mut q = [_mm256_setzero_si256(); 64];
        let mut scale = [_mm256_setzero_si256(); 8];
        let mut min = [_mm256_setzero_si256(); 8];
        for (b, w) in group.chunks_exact(step).take(n).enumerate() {
            let [sc_lo, m_lo, sc_hi, m_hi] = q4_k_scales(w);
            for g in 0..8 {
                let (sc, m) = if g < 4 { (sc_lo, m_lo) } else { (sc_hi, m_hi) };
                scale[g] = lane_byte::<false>(sc, g % 4);
                min[g] = byte_pairs::<false>(m, g % 4);
            }
            for c4 in 0..4 {
                for p in 0..8 {
                    let v = load_u8(&w[128 + 32 * (8 * c4 + p)..]);
                    q[8 * (2 * c4) + p] = _mm256_and_si256(v, low);
                    q[8 * (2 * c4 + 1) + p] = _mm256_and_si256(_mm256_srli_epi16::<4>(v), low);
                }
            }
            let (d, dmin) = (load_u8x16(w), load_u8x16(&w[16..]));
            for (acc, r) in acc.iter_mut().zip(&rows[..chunk.len()]) {
                // Rows shorter than the group stop where `dot8` would.
                let Some(a) = r.get(b) else {
                    continue;
                };
                let x = &a.qs;
                let (mut isum, mut msum) = (_mm256_setzero_si256(), _mm256_setzero_si256());
                for g in 0..8 {
                    // Group g holds values 32g..32g + 32 (64c + 32 * odd).
                    let mut sums = _mm256_setzero_si256();
                    for p in 0..8 {
                        let xb = _mm256_set1_epi32(x4(x, 32 * g + 4 * p));
                        sums = _mm256_dpbusd_epi32(sums, q[8 * g + p], xb);
                    }
                    isum = _mm256_add_epi32(isum, _mm256_mullo_epi32(sums, scale[g]));
                    let bs = i32::from(u16::from_le_bytes(a.bsums[2 * g]))
                        | (i32::from(u16::from_le_bytes(a.bsums[2 * g + 1])) << 16);
                    msum = _mm256_add_epi32(msum, _mm256_madd_epi16(min[g], _mm256_set1_epi32(bs)));
                }
                *acc = _mm256_add_ps(*acc, with_min(a.d(), d, dmin, isum, msum));
            }
        }
        for (o, a) in chunk.iter_mut().zip(&acc) {
            // SAFETY: `o` is 8 writable f32; `storeu` has no alignment
            // requirement.
            unsafe { _mm256_storeu_ps(o.as_mut_ptr(), *a) };
        }
    }
}

/// Q4_K x Q8_K, eight interleaved rows, many activation rows, VNNI.
fn q4_k_q8_k_x8n_vnni(group: &[u8], acts: &[u8], act_row: usize, out: &mut [[f32; ROWS]]) {
    // SAFETY: as in `q4_0_q8_0_x8n_vnni`.
    unsafe { q4_k_dot8n_vnni(group, acts, act_row, out) }
}

/// `dot8` of a Q6_K group with [`Q6KVnni`] against many activation rows,
/// bit for bit: each super-block's 64 value vectors and 16 scales are
/// decoded once per pass of up to [`TOKENS`] rows (into a 2 KiB buffer
/// that stays in L1), then every row takes its integer sum from them with
/// `dpbusd` (the same exact integer as [`Q6KVnni::term`]'s, grouped
/// otherwise) and adds the same term.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn q6_k_dot8n_vnni(group: &[u8], acts: &[u8], act_row: usize, out: &mut [[f32; ROWS]]) {
    let step = ROWS * Q6KVnni::BLOCK;
    let thirty_two = _mm256_set1_epi8(32);
    for (c, chunk) in out.chunks_mut(TOKENS).enumerate() {
        let rows: [&[BlockQ8K]; TOKENS] = pass_rows(acts, act_row, c, chunk.len());
        let longest = rows.iter().map(|r| r.len()).max().unwrap_or(0);
        let n = (group.len() / step).min(longest);
        let mut acc = [_mm256_setzero_ps(); TOKENS];
        // Values of run r, piece i4 at 8 * r + i4; signed scales of the
        // 16 groups.
        let mut q = [_mm256_setzero_si256(); 64];
        let mut sc = [_mm256_setzero_si256(); 16];
        for (b, w) in group.chunks_exact(step).take(n).enumerate() {
            for r in 0..8 {
                for i4 in 0..8 {
                    q[8 * r + i4] = q6_k_values(w, r, i4);
                }
            }
            for (g, s) in sc.iter_mut().enumerate() {
                *s = lane_byte::<true>(load_u8(&w[1536 + 32 * (g / 4)..]), g % 4);
            }
            let d = _mm256_cvtph_ps(load_u8x16(&w[1664..]));
            for (acc, r) in acc.iter_mut().zip(&rows[..chunk.len()]) {
                // Rows shorter than the group stop where `dot8` would.
                let Some(a) = r.get(b) else {
                    continue;
                };
                let x = &a.qs;
                let mut isum = _mm256_setzero_si256();
                for r in 0..8 {
                    for half in 0..2 {
                        let (mut qx, mut x32) = (_mm256_setzero_si256(), _mm256_setzero_si256());
                        for i4 in 4 * half..4 * half + 4 {
                            let xb = _mm256_set1_epi32(x4(x, 32 * r + 4 * i4));
                            qx = _mm256_dpbusd_epi32(qx, q[8 * r + i4], xb);
                            x32 = _mm256_dpbusd_epi32(x32, thirty_two, xb);
                        }
                        let group_sum = _mm256_sub_epi32(qx, x32);
                        isum =
                            _mm256_add_epi32(isum, _mm256_mullo_epi32(group_sum, sc[2 * r + half]));
                    }
                }
                let term = _mm256_mul_ps(
                    _mm256_mul_ps(d, _mm256_set1_ps(a.d())),
                    _mm256_cvtepi32_ps(isum),
                );
                *acc = _mm256_add_ps(*acc, term);
            }
        }
        for (o, a) in chunk.iter_mut().zip(&acc) {
            // SAFETY: `o` is 8 writable f32; `storeu` has no alignment
            // requirement.
            unsafe { _mm256_storeu_ps(o.as_mut_ptr(), *a) };
        }
    }
}

/// Q6_K x Q8_K, eight interleaved rows, many activation rows, VNNI.
fn q6_k_q8_k_x8n_vnni(group: &[u8], acts: &[u8], act_row: usize, out: &mut [[f32; ROWS]]) {
    // SAFETY: as in `q4_0_q8_0_x8n_vnni`.
    unsafe { q6_k_dot8n_vnni(group, acts, act_row, out) }
}

/// The eight-row kernel of the VNNI set for weights of type `w`, if it
/// has one of its own.
pub(crate) fn kernel8_vnni_fn(w: GgmlType) -> Option<Dot8Fn> {
    use GgmlType::*;
    Some(match w {
        Q4_0 => q4_0_q8_0_x8_vnni as Dot8Fn,
        Q4_1 => q4_1_q8_1_x8_vnni,
        Q5_0 => q5_0_q8_0_x8_vnni,
        Q8_0 => q8_0::q8_0_q8_0_x8_vnni,
        Q4K => q4_k_q8_k_x8_vnni,
        Q6K => q6_k_q8_k_x8_vnni,
        _ => return None,
    })
}

/// Q4_0 x Q8_0, eight interleaved rows, VNNI.
fn q4_0_q8_0_x8_vnni(group: &[u8], act: &[u8], out: &mut [f32; ROWS]) {
    // SAFETY: as in `q4_0_q8_0_x8n_vnni`.
    unsafe { dot8_vnni::<Vnni<Q4_0>>(group, act, out) }
}

/// Q4_1 x Q8_1, eight interleaved rows, VNNI.
fn q4_1_q8_1_x8_vnni(group: &[u8], act: &[u8], out: &mut [f32; ROWS]) {
    // SAFETY: as in `q4_0_q8_0_x8n_vnni`.
    unsafe { dot8_vnni::<Vnni<Q4_1>>(group, act, out) }
}

/// Q5_0 x Q8_0, eight interleaved rows, VNNI.
fn q5_0_q8_0_x8_vnni(group: &[u8], act: &[u8], out: &mut [f32; ROWS]) {
    // SAFETY: as in `q4_0_q8_0_x8n_vnni`.
    unsafe { dot8_vnni::<Vnni<Q5_0>>(group, act, out) }
}

/// Q4_K x Q8_K, eight interleaved rows, VNNI.
fn q4_k_q8_k_x8_vnni(group: &[u8], act: &[u8], out: &mut [f32; ROWS]) {
    // SAFETY: as in `q4_0_q8_0_x8n_vnni`.
    unsafe { dot8_vnni::<Q4KVnni>(group, act, out) }
}

/// Q6_K x Q8_K, eight interleaved rows, VNNI.
fn q6_k_q8_k_x8_vnni(group: &[u8], act: &[u8], out: &mut [f32; ROWS]) {
    // SAFETY: as in `q4_0_q8_0_x8n_vnni`.
    unsafe { dot8_vnni::<Q6KVnni>(group, act, out) }
}

/// The many-row kernel of the VNNI set for weights of type `w`, if it has
/// one of its own.
pub(crate) fn kernel8n_vnni_fn(w: GgmlType) -> Option<Dot8NFn> {
    use GgmlType::*;
    Some(match w {
        Q4_0 => q4_0_q8_0_x8n_vnni as Dot8NFn,
        Q4_1 => q4_1_q8_1_x8n_vnni,
        Q5_0 => q5_0_q8_0_x8n_vnni,
        Q8_0 => q8_0::q8_0_q8_0_x8n_vnni,
        Q4K => q4_k_q8_k_x8n_vnni,
        Q6K => q6_k_q8_k_x8n_vnni,
        _ => return None,
    })
}

/// Q4_0 x Q8_0, eight interleaved rows, many activation rows, VNNI.
fn q4_0_q8_0_x8n_vnni(group: &[u8], acts: &[u8], act_row: usize, out: &mut [[f32; ROWS]]) {
    // SAFETY: handed out only by `avx512::vec_dot_kernel`, whose callers
    // have checked that the CPU supports AVX2, FMA, F16C, AVX512F/BW/VL
    // and AVX512-VNNI.
    unsafe { dot8n_vnni::<Q4_0>(group, acts, act_row, out) }
}

/// Q4_1 x Q8_1, eight interleaved rows, many activation rows, VNNI.
fn q4_1_q8_1_x8n_vnni(group: &[u8], acts: &[u8], act_row: usize, out: &mut [[f32; ROWS]]) {
    // SAFETY: as in `q4_0_q8_0_x8n_vnni`.
    unsafe { dot8n_vnni::<Q4_1>(group, acts, act_row, out) }
}

/// Q5_0 x Q8_0, eight interleaved rows, many activation rows, VNNI.
fn q5_0_q8_0_x8n_vnni(group: &[u8], acts: &[u8], act_row: usize, out: &mut [[f32; ROWS]]) {
    // SAFETY: as in `q4_0_q8_0_x8n_vnni`.
    unsafe { dot8n_vnni::<Q5_0>(group, acts, act_row, out) }
}

/// Q4_0 x Q8_0, eight interleaved rows.
fn q4_0_q8_0_x8(group: &[u8], act: &[u8], out: &mut [f32; ROWS]) {
    // SAFETY: handed out only by `avx2::vec_dot_kernel`, whose callers have
    // checked that the CPU supports AVX2, FMA and F16C.
    unsafe { dot8::<Q4_0>(group, act, out) }
}

/// Q4_1 x Q8_1, eight interleaved rows.
fn q4_1_q8_1_x8(group: &[u8], act: &[u8], out: &mut [f32; ROWS]) {
    // SAFETY: as in `q4_0_q8_0_x8`.
    unsafe { dot8::<Q4_1>(group, act, out) }
}

/// Q5_0 x Q8_0, eight interleaved rows.
fn q5_0_q8_0_x8(group: &[u8], act: &[u8], out: &mut [f32; ROWS]) {
    // SAFETY: as in `q4_0_q8_0_x8`.
    unsafe { dot8::<Q5_0>(group, act, out) }
}
