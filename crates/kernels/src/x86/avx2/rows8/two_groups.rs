//! The many-row kernel of the 32-value formats (`Small`: Q4_0, Q4_1,
//! Q5_0, and Q8_0 read as `w + 128`) for AVX-512 VNNI, on two groups of eight rows at once: each
//! 512-bit register holds a piece of group A in its low half and the same
//! piece of group B in its high half, so one broadcast of four activation
//! bytes, one `vpdpbusd` and one set of f32 operations per activation
//! block serve sixteen weight rows instead of eight. The per-block work
//! that does not depend on the weights (broadcasting the activations, the
//! offset sum, converting the activation scale) is then paid once per
//! sixteen rows; it is most of a block's instructions at eight.
//!
//! Each lane is the same exact integer sum and the same chain of f32
//! operations as [`dot8n_vnni`](super::dot8n_vnni) (and so as `dot8` and the
//! scalar reference): `term = (d_w * d_x) * isum` (`+ m_w * s_x`), added to
//! the row's sum in block order.
//!
//! Q4_K and Q6_K ([`pairs_dot16n`]): a super-block of both groups is
//! decoded once per pass of up to [`PASS`] activation rows, and each
//! loaded vector of it serves several rows (one `vpdpbusd` each, the
//! activation bytes broadcast). Q6_K reads its values as `q - 32` against
//! the activations as `x + 128` (see [`q6_k_terms`]), so that its offset
//! part is worked out from the weights once per pass, not from each
//! activation block's sums.

use std::arch::x86_64::*;

use super::{
    byte_pairs, lane_byte, load_i8, load_u8, load_u8x16, offset_sum, pass_rows, q4_k_scales,
    q6_k_values, w_scales, x4, Act8, Legacy, Rows8, Small, ROWS, TOKENS,
};
use crate::dot::Dot16NFn;
use crate::quant::{ActBlockFacts, BlockQ8K, BlockQ8_0};
use crate::GgmlType;

/// The two-group kernel for weights of type `w`, if there is one.
pub(crate) fn kernel16n_vnni_fn(w: GgmlType) -> Option<Dot16NFn> {
    use GgmlType::*;
    Some(match w {
        Q4_0 => q4_0_x16n as Dot16NFn,
        Q4_1 => q4_1_x16n,
        Q5_0 => q5_0_x16n,
        Q8_0 => q8_0_x16n,
        Q4K => q4_k_x16n,
        Q6K => q6_k_x16n,
        _ => return None,
    })
}

/// Q4_0 x Q8_0, two groups, many activation rows.
fn q4_0_x16n(
    groups: &[u8],
    acts: &[u8],
    act_row: usize,
    _facts: &[ActBlockFacts],
    out: &mut [[f32; 2 * ROWS]],
) {
    // SAFETY: handed out only by `avx512::vec_dot_kernel`, whose callers
    // have checked that the CPU supports AVX2, FMA, F16C, AVX512F/BW/VL
    // and AVX512-VNNI.
    unsafe { dot16n::<super::Q4_0>(groups, acts, act_row, out) }
}

/// Q4_1 x Q8_1, two groups, many activation rows.
fn q4_1_x16n(
    groups: &[u8],
    acts: &[u8],
    act_row: usize,
    _facts: &[ActBlockFacts],
    out: &mut [[f32; 2 * ROWS]],
) {
    // SAFETY: as in `q4_0_x16n`.
    unsafe { dot16n::<super::Q4_1>(groups, acts, act_row, out) }
}

/// Q5_0 x Q8_0, two groups, many activation rows.
fn q5_0_x16n(
    groups: &[u8],
    acts: &[u8],
    act_row: usize,
    _facts: &[ActBlockFacts],
    out: &mut [[f32; 2 * ROWS]],
) {
    // SAFETY: as in `q4_0_x16n`.
    unsafe { dot16n::<super::Q5_0>(groups, acts, act_row, out) }
}

/// Q8_0 x Q8_0 (read as `w + 128`), two groups, many activation rows.
fn q8_0_x16n(
    groups: &[u8],
    acts: &[u8],
    act_row: usize,
    facts: &[ActBlockFacts],
    out: &mut [[f32; 2 * ROWS]],
) {
    // SAFETY: as in `q4_0_x16n`.
    unsafe { q8_0_dot16n(groups, acts, act_row, facts, out) }
}

/// Q4_K x Q8_K, two groups, many activation rows.
fn q4_k_x16n(
    groups: &[u8],
    acts: &[u8],
    act_row: usize,
    _facts: &[ActBlockFacts],
    out: &mut [[f32; 2 * ROWS]],
) {
    // SAFETY: as in `q4_0_x16n`.
    unsafe { pairs_dot16n::<Q4KPair, 8>(groups, acts, act_row, out) }
}

/// Q6_K x Q8_K, two groups, many activation rows.
fn q6_k_x16n(
    groups: &[u8],
    acts: &[u8],
    act_row: usize,
    _facts: &[ActBlockFacts],
    out: &mut [[f32; 2 * ROWS]],
) {
    // SAFETY: as in `q4_0_x16n`.
    unsafe { pairs_dot16n::<Q6KPair, 4>(groups, acts, act_row, out) }
}

/// Group A's eight lanes low, group B's high.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn join_i(a: __m256i, b: __m256i) -> __m512i {
    _mm512_inserti64x4::<1>(_mm512_castsi256_si512(a), b)
}

/// As [`join_i`], for f32 lanes.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn join_f(a: __m256, b: __m256) -> __m512 {
    _mm512_castpd_ps(_mm512_insertf64x4::<1>(
        _mm512_castpd256_pd512(_mm256_castps_pd(a)),
        _mm256_castps_pd(b),
    ))
}

/// One f16 value in all sixteen lanes, as f32 (exactly).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn f16_splat16(h: u16) -> __m512 {
    _mm512_cvtph_ps(_mm256_set1_epi16(h as i16))
}

/// `out[t]` = the many-row kernel of group A (`groups`' first half) then
/// of group B (its second half) with activation row `t`, bit for bit
/// (bytes `t * act_row..` of `acts`; a missing or short row stops where
/// `dot8` would). A length that does not split into two equal groups of
/// whole blocks is cut to the largest that does.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn dot16n<K: Small>(
    groups: &[u8],
    acts: &[u8],
    act_row: usize,
    out: &mut [[f32; 2 * ROWS]],
) {
    let step = ROWS * K::BLOCK;
    let half = groups.len() / 2 / step * step;
    let (ga, gb) = (&groups[..half], &groups[half..2 * half]);
    for (c, chunk) in out.chunks_mut(TOKENS).enumerate() {
        let rows: [&[K::A]; TOKENS] = pass_rows(acts, act_row, c, chunk.len());
        let longest = rows.iter().map(|r| r.len()).max().unwrap_or(0);
        let n = (half / step).min(longest);
        let mut acc = [_mm512_setzero_ps(); TOKENS];
        for (b, (wa, wb)) in ga
            .chunks_exact(step)
            .zip(gb.chunks_exact(step))
            .take(n)
            .enumerate()
        {
            let (qa, qb) = (K::values(wa), K::values(wb));
            let q: [__m512i; 8] = std::array::from_fn(|i| join_i(qa[i], qb[i]));
            let ([da, ma], [db, mb]) = (w_scales::<K>(wa), w_scales::<K>(wb));
            let (d_w, m_w) = (join_f(da, db), join_f(ma, mb));
            for (acc, r) in acc.iter_mut().zip(&rows[..chunk.len()]) {
                let Some(a) = r.get(b) else { continue };
                let x = a.qs();
                let mut sums = _mm512_setzero_si512();
                for c in 0..4 {
                    let x_lo = _mm512_set1_epi32(x4(x, 4 * c));
                    let x_hi = _mm512_set1_epi32(x4(x, 16 + 4 * c));
                    sums = _mm512_dpbusd_epi32(sums, q[2 * c], x_lo);
                    sums = _mm512_dpbusd_epi32(sums, q[2 * c + 1], x_hi);
                }
                if K::OFFSET != 0 {
                    let off = _mm256_castsi256_si128(offset_sum(K::OFFSET, x));
                    sums = _mm512_sub_epi32(sums, _mm512_broadcastd_epi32(off));
                }
                // `term_from`'s operations, on sixteen lanes.
                let isum = _mm512_cvtepi32_ps(sums);
                let [d_x, s_x] = K::a_scales(a);
                let mut term = _mm512_mul_ps(_mm512_mul_ps(d_w, f16_splat16(d_x)), isum);
                if K::MIN {
                    term = _mm512_add_ps(term, _mm512_mul_ps(m_w, f16_splat16(s_x)));
                }
                *acc = _mm512_add_ps(*acc, term);
            }
        }
        store_rows(chunk, &acc);
    }
}

/// [`dot16n`] for Q8_0, bit for bit, with each pass of [`TOKENS`] whole
/// activation rows (every row as long as the groups) run with its sums in
/// registers: a fixed number of rows, so the loop over them unrolls
/// (the general loop, with its rows of any length, keeps them on the
/// stack: a load and a store per block and row). Other passes (fewer or
/// shorter rows) run [`dot16n`]. A pass whose rows' panel is in `facts`
/// ([`act_panels`](crate::quant::act_panels) of `acts`) reads the panel
/// instead: the same values, scales and starting sums, already worked out.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn q8_0_dot16n(
    groups: &[u8],
    acts: &[u8],
    act_row: usize,
    facts: &[ActBlockFacts],
    out: &mut [[f32; 2 * ROWS]],
) {
    type K = super::q8_0::Q8_0Vnni;
    let step = ROWS * <K as Rows8>::BLOCK;
    let half = groups.len() / 2 / step * step;
    let n = half / step;
    let (ga, gb) = (&groups[..half], &groups[half..2 * half]);
    for (c, chunk) in out.chunks_mut(TOKENS).enumerate() {
        // The pass's rows, if all are there with at least n whole blocks
        // each (what `pass_rows` would give, without making the slices).
        let start = c * TOKENS * act_row;
        let whole = chunk.len() == TOKENS
            && act_row >= n * <K as Rows8>::BLOCK
            && start + TOKENS * act_row <= acts.len();
        if !whole {
            dot16n::<K>(groups, &acts[start.min(acts.len())..], act_row, chunk);
            continue;
        }
        // SAFETY: rows start..start + TOKENS * act_row are in `acts`;
        // BlockQ8_0 is bytes only (alignment 1).
        let rows: [*const BlockQ8_0; TOKENS] =
            std::array::from_fn(|t| unsafe { acts.as_ptr().add(start + t * act_row).cast() });
        let mut acc = [_mm512_setzero_ps(); TOKENS];
        let mut starts = [0i32; 4 * TOKENS];
        // The pass's panel (row t's block b at b * TOKENS + t), if the
        // caller laid the activations out so.
        let per_row = act_row / std::mem::size_of::<BlockQ8_0>();
        let panel = facts.get(c * TOKENS * per_row..(c + 1) * TOKENS * per_row);
        for (b, (wa, wb)) in ga.chunks_exact(step).zip(gb.chunks_exact(step)).enumerate() {
            let (qa, qb) = (K::values(wa), K::values(wb));
            let q: [__m512i; 8] = std::array::from_fn(|i| join_i(qa[i], qb[i]));
            let ([da, _], [db, _]) = (w_scales::<K>(wa), w_scales::<K>(wb));
            let d_w = join_f(da, db);
            // One row's block, added to its sum: [`dot16n`]'s operations,
            // on the values `$x`, with the sum starting at `$start` =
            // -128 * sum(x) (so that adding sum((w + 128) * x) leaves
            // sum(w * x)) and the activation scale `$d_x` in all lanes.
            macro_rules! row {
                ($t:literal, $x:expr, $start:expr, $d_x:expr) => {{
                    let x: &[i8] = $x($t);
                    let mut sums = _mm512_set1_epi32($start($t));
                    for c in 0..4 {
                        let x_lo = _mm512_set1_epi32(x4(x, 4 * c));
                        let x_hi = _mm512_set1_epi32(x4(x, 16 + 4 * c));
                        sums = _mm512_dpbusd_epi32(sums, q[2 * c], x_lo);
                        sums = _mm512_dpbusd_epi32(sums, q[2 * c + 1], x_hi);
                    }
                    let isum = _mm512_cvtepi32_ps(sums);
                    let term = _mm512_mul_ps(_mm512_mul_ps(d_w, $d_x($t)), isum);
                    acc[$t] = _mm512_add_ps(acc[$t], term);
                }};
            }
            // Constant indices, so that the sums stay in registers.
            macro_rules! all_rows {
                ($x:expr, $start:expr, $d_x:expr) => {{
                    const { assert!(TOKENS == 16) };
                    row!(0, $x, $start, $d_x);
                    row!(1, $x, $start, $d_x);
                    row!(2, $x, $start, $d_x);
                    row!(3, $x, $start, $d_x);
                    row!(4, $x, $start, $d_x);
                    row!(5, $x, $start, $d_x);
                    row!(6, $x, $start, $d_x);
                    row!(7, $x, $start, $d_x);
                    row!(8, $x, $start, $d_x);
                    row!(9, $x, $start, $d_x);
                    row!(10, $x, $start, $d_x);
                    row!(11, $x, $start, $d_x);
                    row!(12, $x, $start, $d_x);
                    row!(13, $x, $start, $d_x);
                    row!(14, $x, $start, $d_x);
                    row!(15, $x, $start, $d_x);
                }};
            }
            if let Some(panel) = panel {
                // SAFETY: b < n <= per_row and t < TOKENS, so the index is
                // below TOKENS * per_row, the panel's length.
                let block = |t: usize| unsafe { panel.get_unchecked(b * TOKENS + t) };
                all_rows!(|t| &block(t).qs[..], |t| block(t).offset, |t| {
                    _mm512_set1_ps(block(t).d)
                });
            } else {
                q8_0_starts(&rows, b, &mut starts);
                // SAFETY: b < n, and every row has at least n whole blocks
                // in `acts` (checked above).
                let block = |t: usize| unsafe { &*rows[t].add(b) };
                all_rows!(|t| block(t).qs(), |t: usize| starts[START_LANE[t]], |t| {
                    f16_splat16(K::a_scales(block(t))[0])
                });
            }
        }
        store_rows(chunk, &acc);
    }
}

/// Where [`q8_0_starts`] leaves row `t`'s value.
const START_LANE: [usize; TOKENS] = {
    let mut lanes = [0; TOKENS];
    let mut t = 0;
    while t < TOKENS {
        lanes[t] = 16 * (t / 4) + [0, 8, 1, 9][t % 4];
        t += 1;
    }
    lanes
};

/// `-128 * sum(x)` of block `b` of each of the [`TOKENS`] activation rows
/// (`rows[t]`, at least `b + 1` blocks each), row `t`'s at
/// `out[START_LANE[t]]`: exact integers, sixteen rows' at once. Four rows
/// per 512-bit register: two rows' bytes (flipped to `x + 128`, unsigned)
/// summed in eight-byte parts by `vpsadbw`, two more rows' parts in the
/// upper halves of the 64-bit lanes, then the four parts of each row added.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn q8_0_starts(rows: &[*const BlockQ8_0; TOKENS], b: usize, out: &mut [i32; 4 * TOKENS]) {
    const { assert!(TOKENS.is_multiple_of(4)) };
    let flip = _mm512_set1_epi8(i8::MIN);
    // SAFETY: the caller's rows have block b.
    let x = |t: usize| unsafe { load_i8(&(*rows[t].add(b)).qs) };
    let parts = |t: usize| {
        // Sums of x + 128 per eight bytes: row t in 64-bit lanes 0..4,
        // row t + 1 in lanes 4..8.
        _mm512_sad_epu8(
            _mm512_xor_si512(join_i(x(t), x(t + 1)), flip),
            _mm512_setzero_si512(),
        )
    };
    for g in 0..TOKENS / 4 {
        // 32-bit lanes 2k: parts of rows 4g, 4g + 1; 2k + 1: of 4g + 2, 4g + 3.
        let v = _mm512_or_si512(parts(4 * g), _mm512_slli_epi64::<32>(parts(4 * g + 2)));
        let v = _mm512_add_epi32(v, _mm512_shuffle_epi32::<0b01_00_11_10>(v));
        let v = _mm512_add_epi32(v, _mm512_shuffle_i64x2::<0b10_11_00_01>(v, v));
        // Lanes 0, 8, 1, 9: S = sum(x + 128) of rows 4g..4g + 4, and
        // -128 * sum(x) = -128 * (S - 32 * 128).
        let v = _mm512_sub_epi32(_mm512_set1_epi32(32 * 128 * 128), _mm512_slli_epi32::<7>(v));
        _mm512_storeu_si512(out[16 * g..].as_mut_ptr().cast(), v);
    }
}

/// Eight f16 values of group A (16 bytes at `a`) and eight of group B,
/// as sixteen f32 lanes (exactly).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn f16_pair(a: &[u8], b: &[u8]) -> __m512 {
    _mm512_cvtph_ps(_mm256_set_m128i(load_u8x16(b), load_u8x16(a)))
}

/// Groups A and B of a two-group kernel over super-blocks of `block`
/// bytes per row: the pair of blocks `b` of each, for the first `n`.
fn block_pairs(groups: &[u8], block: usize) -> impl Iterator<Item = (&[u8], &[u8])> {
    let step = ROWS * block;
    let half = groups.len() / 2 / step * step;
    let (ga, gb) = (&groups[..half], &groups[half..2 * half]);
    ga.chunks_exact(step).zip(gb.chunks_exact(step))
}

/// Activation rows per pass of [`pairs_dot16n`], each pass decoding every
/// block pair of the groups once (a product's calls have 64 rows, one
/// pass). In `dot16n_bench` (1024 x 1024, 512 rows), passes of 16 rows
/// made Q4_K ~12% and Q6_K ~20% slower, passes of 32 (calls of 32) ~5%
/// and ~7%.
const PASS: usize = 64;

/// A Q4_K super-block of both groups, decoded for [`q4_k_terms`].
#[derive(Clone, Copy)]
struct Q4KPair {
    /// Nibbles of group g (values `32g..32g + 32`), piece p at `8g + p`.
    q: [__m512i; 64],
    /// Each group's 6-bit scale, in i32 lanes.
    scale: [__m512i; 8],
    /// Each group's 6-bit min twice, as the i16 pair `vpdpwssd` takes
    /// against the two block sums of that group.
    min: [__m512i; 8],
    /// The sixteen rows' `d` and `dmin`, as f32.
    d: __m512,
    dmin: __m512,
}

impl Pair for Q4KPair {
    const BLOCK: usize = super::Q4KVnni::BLOCK;

    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    #[inline]
    unsafe fn empty() -> Q4KPair {
        let z = _mm512_setzero_si512();
        Q4KPair {
            q: [z; 64],
            scale: [z; 8],
            min: [z; 8],
            d: _mm512_setzero_ps(),
            dmin: _mm512_setzero_ps(),
        }
    }

    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    #[inline]
    unsafe fn decode(&mut self, wa: &[u8], wb: &[u8]) {
        let ([sa_lo, ma_lo, sa_hi, ma_hi], [sb_lo, mb_lo, sb_hi, mb_hi]) =
            (q4_k_scales(wa), q4_k_scales(wb));
        for g in 0..8 {
            let ((sa, ma), (sb, mb)) = if g < 4 {
                ((sa_lo, ma_lo), (sb_lo, mb_lo))
            } else {
                ((sa_hi, ma_hi), (sb_hi, mb_hi))
            };
            self.scale[g] = join_i(lane_byte::<false>(sa, g % 4), lane_byte::<false>(sb, g % 4));
            self.min[g] = join_i(
                byte_pairs::<false>(ma, g % 4),
                byte_pairs::<false>(mb, g % 4),
            );
        }
        let low = _mm512_set1_epi8(0x0f);
        for c4 in 0..4 {
            for p in 0..8 {
                let at = 128 + 32 * (8 * c4 + p);
                let v = join_i(load_u8(&wa[at..]), load_u8(&wb[at..]));
                self.q[8 * (2 * c4) + p] = _mm512_and_si512(v, low);
                self.q[8 * (2 * c4 + 1) + p] = _mm512_and_si512(_mm512_srli_epi16::<4>(v), low);
            }
        }
        (self.d, self.dmin) = (f16_pair(wa, wb), f16_pair(&wa[16..], &wb[16..]));
    }

    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    #[inline]
    unsafe fn terms<const N: usize>(&self, a: [&BlockQ8K; N]) -> [__m512; N] {
        q4_k_terms::<N>(self, a)
    }
}

/// `terms[j]`: lane `i` is `with_min`'s term of row `i` of the pair `w`
/// with activation block `a[j]`: per group, `sum(q * x)` by eight
/// `vpdpbusd` (exact: at most `32 * 15 * 128` in size) times its scale,
/// and `sum(m * (bsum[2g] + bsum[2g + 1]))` by one `vpdpwssd` per group
/// (the same integers as `q4_k_dot8n_vnni`'s, so the same bits).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn q4_k_terms<const N: usize>(w: &Q4KPair, a: [&BlockQ8K; N]) -> [__m512; N] {
    let mut isum = [_mm512_setzero_si512(); N];
    let mut msum = [_mm512_setzero_si512(); N];
    for g in 0..8 {
        let mut sums = [_mm512_setzero_si512(); N];
        for p in 0..8 {
            let v = w.q[8 * g + p];
            for j in 0..N {
                let xb = _mm512_set1_epi32(x4(&a[j].qs, 32 * g + 4 * p));
                sums[j] = _mm512_dpbusd_epi32(sums[j], v, xb);
            }
        }
        for j in 0..N {
            isum[j] = _mm512_add_epi32(isum[j], _mm512_mullo_epi32(sums[j], w.scale[g]));
            let bs = i32::from_le_bytes([
                a[j].bsums[2 * g][0],
                a[j].bsums[2 * g][1],
                a[j].bsums[2 * g + 1][0],
                a[j].bsums[2 * g + 1][1],
            ]);
            msum[j] = _mm512_dpwssd_epi32(msum[j], w.min[g], _mm512_set1_epi32(bs));
        }
    }
    let mut terms = [_mm512_setzero_ps(); N];
    for j in 0..N {
        // `with_min`'s operations.
        let d_x = _mm512_set1_ps(a[j].d());
        terms[j] = _mm512_sub_ps(
            _mm512_mul_ps(_mm512_mul_ps(d_x, w.d), _mm512_cvtepi32_ps(isum[j])),
            _mm512_mul_ps(_mm512_mul_ps(d_x, w.dmin), _mm512_cvtepi32_ps(msum[j])),
        );
    }
    terms
}

/// A super-block format of [`pairs_dot16n`]: one block of both groups,
/// decoded.
trait Pair {
    /// Bytes of one super-block of one row.
    const BLOCK: usize;

    /// All-zero vectors (overwritten by `decode` before any use).
    ///
    /// # Safety
    /// The CPU must support AVX512F/BW/VL and AVX512-VNNI.
    unsafe fn empty() -> Self;

    /// Decodes block `wa` of group A and `wb` of group B (interleaved).
    ///
    /// # Safety
    /// As [`Pair::empty`].
    unsafe fn decode(&mut self, wa: &[u8], wb: &[u8]);

    /// `terms[j]`: lane `i` is the scalar reference's f32 term of row `i`
    /// of the pair with activation block `a[j]`.
    ///
    /// # Safety
    /// As [`Pair::empty`].
    unsafe fn terms<const N: usize>(&self, a: [&BlockQ8K; N]) -> [__m512; N];
}

/// The rows8 `dot8n_vnni` kernel of both groups, bit for bit: each block
/// pair decoded once per pass of up to [`PASS`] activation rows, then its
/// terms taken `SHARE` rows at a time while that many rows have the block,
/// else one at a time, and added to each row's sum in block order. Each
/// decoded 64-byte vector is loaded once for the `SHARE` rows (each takes
/// it by one `vpdpbusd`, its four activation bytes broadcast from memory):
/// loaded once per row, the load of it and the broadcast kept the kernel
/// at 40% of `vpdpbusd`'s rate (`vnni_peak`); `SHARE` rows are also
/// `SHARE` independent chains of `vpdpbusd`. Q4_K takes 8 (6% faster than
/// 4), Q6_K 4 (its `x + 128` copies of 8 rows made it 6% slower).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn pairs_dot16n<P: Pair, const SHARE: usize>(
    groups: &[u8],
    acts: &[u8],
    act_row: usize,
    out: &mut [[f32; 2 * ROWS]],
) {
    let mut w = P::empty();
    for (c, chunk) in out.chunks_mut(PASS).enumerate() {
        let rows: [&[BlockQ8K]; PASS] = pass_rows(acts, act_row, c, chunk.len());
        let rows = &rows[..chunk.len()];
        let longest = rows.iter().map(|r| r.len()).max().unwrap_or(0);
        let mut acc = [_mm512_setzero_ps(); PASS];
        for (b, (wa, wb)) in block_pairs(groups, P::BLOCK).take(longest).enumerate() {
            w.decode(wa, wb);
            let mut done = 0;
            for (acc, r) in acc.chunks_exact_mut(SHARE).zip(rows.chunks_exact(SHARE)) {
                if r.iter().any(|r| r.len() <= b) {
                    break;
                }
                let terms = w.terms::<SHARE>(std::array::from_fn(|j| &r[j][b]));
                for (acc, t) in acc.iter_mut().zip(terms) {
                    *acc = _mm512_add_ps(*acc, t);
                }
                done += SHARE;
            }
            for (acc, r) in acc[done..].iter_mut().zip(&rows[done..]) {
                // Rows shorter than the groups stop where `dot8` would.
                let Some(a) = r.get(b) else { continue };
                let [t] = w.terms::<1>([a]);
                *acc = _mm512_add_ps(*acc, t);
            }
        }
        store_rows(chunk, &acc);
    }
}

/// A Q6_K super-block of both groups, decoded for [`q6_k_terms`]: its
/// values as `s = q - 32` (signed bytes, -32..32) and the part of the
/// integer sum that does not depend on the activations.
#[derive(Clone, Copy)]
struct Q6KPair {
    /// `q - 32` of run r (groups `2r`, `2r + 1`), piece i4 at `8r + i4`.
    s: [__m512i; 64],
    /// The signed scales of the 16 groups, in i32 lanes.
    sc: [__m512i; 16],
    /// `128 * sum over the 16 groups of sc * sum(s)`, per row.
    offset: __m512i,
    /// The sixteen rows' `d`, as f32.
    d: __m512,
}

impl Pair for Q6KPair {
    const BLOCK: usize = super::Q6KVnni::BLOCK;

    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    #[inline]
    unsafe fn empty() -> Q6KPair {
        let z = _mm512_setzero_si512();
        Q6KPair {
            s: [z; 64],
            sc: [z; 16],
            offset: z,
            d: _mm512_setzero_ps(),
        }
    }

    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    #[inline]
    unsafe fn decode(&mut self, wa: &[u8], wb: &[u8]) {
        for (g, s) in self.sc.iter_mut().enumerate() {
            let at = 1536 + 32 * (g / 4);
            *s = join_i(
                lane_byte::<true>(load_u8(&wa[at..]), g % 4),
                lane_byte::<true>(load_u8(&wb[at..]), g % 4),
            );
        }
        let (ones, m32) = (_mm512_set1_epi8(1), _mm512_set1_epi8(32));
        let mut offset = _mm512_setzero_si512();
        for r in 0..8 {
            for half in 0..2 {
                // sum(s) of group 2r + half per row (within +-512), times
                // its scale (within +-2^16 in size; 16 of them < 2^21).
                let mut sum = _mm512_setzero_si512();
                for i4 in 4 * half..4 * half + 4 {
                    let q = join_i(q6_k_values(wa, r, i4), q6_k_values(wb, r, i4));
                    let s = _mm512_sub_epi8(q, m32);
                    self.s[8 * r + i4] = s;
                    sum = _mm512_dpbusd_epi32(sum, ones, s);
                }
                let scaled = _mm512_mullo_epi32(sum, self.sc[2 * r + half]);
                offset = _mm512_add_epi32(offset, scaled);
            }
        }
        self.offset = _mm512_slli_epi32::<7>(offset);
        self.d = f16_pair(&wa[1664..], &wb[1664..]);
    }

    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    #[inline]
    unsafe fn terms<const N: usize>(&self, a: [&BlockQ8K; N]) -> [__m512; N] {
        q6_k_terms::<N>(self, a)
    }
}

/// `terms[j]`: lane `i` is the term `(d * d_x) * isum` of row `i` of the
/// pair `w` with activation block `a[j]`, `isum` being `sum over the 16
/// groups of sc * sum((q - 32) * x)`. `vpdpbusd` multiplies unsigned by
/// signed bytes, so here the activations are read as `u = x + 128` and the
/// values as `s = q - 32`: `sum(s * x) = sum(s * u) - 128 * sum(s)`, whose
/// second part (`Q6KPair::offset`, with the scales) is the weights' alone.
/// The same integer as `q6_k_dot8n_vnni`'s (no partial sum exceeds
/// `16 * 32 * 255 * 128 * 16 < 2^31` in size), so the same bits.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn q6_k_terms<const N: usize>(w: &Q6KPair, a: [&BlockQ8K; N]) -> [__m512; N] {
    // The activations read as `x + 128`, in memory for the broadcasts.
    let mut u = [[0u8; 256]; N];
    let flip = _mm512_set1_epi8(i8::MIN);
    for (u, a) in u.iter_mut().zip(&a) {
        for k in 0..4 {
            // SAFETY: bytes 64k..64k + 64 of `a.qs` are readable and of `u`
            // writable; neither access needs alignment.
            unsafe {
                let x = _mm512_loadu_si512(a.qs.as_ptr().add(64 * k).cast());
                let v = _mm512_xor_si512(x, flip);
                _mm512_storeu_si512(u.as_mut_ptr().add(64 * k).cast(), v);
            }
        }
    }
    let mut isum = [_mm512_setzero_si512(); N];
    for r in 0..8 {
        for half in 0..2 {
            let mut sx = [_mm512_setzero_si512(); N];
            for i4 in 4 * half..4 * half + 4 {
                let v = w.s[8 * r + i4];
                for j in 0..N {
                    let at = 32 * r + 4 * i4;
                    let ub =
                        i32::from_le_bytes([u[j][at], u[j][at + 1], u[j][at + 2], u[j][at + 3]]);
                    sx[j] = _mm512_dpbusd_epi32(sx[j], _mm512_set1_epi32(ub), v);
                }
            }
            for j in 0..N {
                isum[j] = _mm512_add_epi32(isum[j], _mm512_mullo_epi32(sx[j], w.sc[2 * r + half]));
            }
        }
    }
    let mut terms = [_mm512_setzero_ps(); N];
    for j in 0..N {
        let isum = _mm512_sub_epi32(isum[j], w.offset);
        terms[j] = _mm512_mul_ps(
            _mm512_mul_ps(w.d, _mm512_set1_ps(a[j].d())),
            _mm512_cvtepi32_ps(isum),
        );
    }
    terms
}

/// Each row's sixteen sums into its output entry.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn store_rows(chunk: &mut [[f32; 2 * ROWS]], acc: &[__m512]) {
    for (o, a) in chunk.iter_mut().zip(acc) {
        // SAFETY: `o` is 16 writable f32; `storeu` has no alignment
        // requirement.
        unsafe { _mm512_storeu_ps(o.as_mut_ptr(), *a) };
    }
}
