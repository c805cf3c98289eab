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
    unsafe { q4_k_dot16n(groups, acts, act_row, out) }
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
    unsafe { q6_k_dot16n(groups, acts, act_row, out) }
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

/// `q4_k_dot8n_vnni` (rows8) of both groups, bit for bit: the same exact
/// integer sums per lane (`sum(q * x)` per group of 32 by `dpbusd`, times
/// its scale; the mins against the activation block sums by `madd`) and
/// the same f32 operations as `with_min`, on sixteen lanes.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn q4_k_dot16n(groups: &[u8], acts: &[u8], act_row: usize, out: &mut [[f32; 2 * ROWS]]) {
    const BLOCK: usize = super::Q4KVnni::BLOCK;
    let low = _mm256_set1_epi8(0x0f);
    for (c, chunk) in out.chunks_mut(TOKENS).enumerate() {
        let rows: [&[BlockQ8K]; TOKENS] = pass_rows(acts, act_row, c, chunk.len());
        let longest = rows.iter().map(|r| r.len()).max().unwrap_or(0);
        let mut acc = [_mm512_setzero_ps(); TOKENS];
        // Nibbles of group g, piece p at 8 * g + p; each group's scale
        // (i32 lanes) and min (as the i16 pairs `madd` takes).
        let mut q = [_mm512_setzero_si512(); 64];
        let mut scale = [_mm512_setzero_si512(); 8];
        let mut min = [_mm512_setzero_si512(); 8];
        for (b, (wa, wb)) in block_pairs(groups, BLOCK).take(longest).enumerate() {
            let ([sa_lo, ma_lo, sa_hi, ma_hi], [sb_lo, mb_lo, sb_hi, mb_hi]) =
                (q4_k_scales(wa), q4_k_scales(wb));
            for g in 0..8 {
                let ((sa, ma), (sb, mb)) = if g < 4 {
                    ((sa_lo, ma_lo), (sb_lo, mb_lo))
                } else {
                    ((sa_hi, ma_hi), (sb_hi, mb_hi))
                };
                scale[g] = join_i(lane_byte::<false>(sa, g % 4), lane_byte::<false>(sb, g % 4));
                min[g] = join_i(
                    byte_pairs::<false>(ma, g % 4),
                    byte_pairs::<false>(mb, g % 4),
                );
            }
            for c4 in 0..4 {
                for p in 0..8 {
                    let at = 128 + 32 * (8 * c4 + p);
                    let (va, vb) = (load_u8(&wa[at..]), load_u8(&wb[at..]));
                    q[8 * (2 * c4) + p] =
                        join_i(_mm256_and_si256(va, low), _mm256_and_si256(vb, low));
                    q[8 * (2 * c4 + 1) + p] = join_i(
                        _mm256_and_si256(_mm256_srli_epi16::<4>(va), low),
                        _mm256_and_si256(_mm256_srli_epi16::<4>(vb), low),
                    );
                }
            }
            let (d, dmin) = (f16_pair(wa, wb), f16_pair(&wa[16..], &wb[16..]));
            for (acc, r) in acc.iter_mut().zip(&rows[..chunk.len()]) {
                let Some(a) = r.get(b) else { continue };
                let x = &a.qs;
                let (mut isum, mut msum) = (_mm512_setzero_si512(), _mm512_setzero_si512());
                for g in 0..8 {
                    let mut sums = _mm512_setzero_si512();
                    for p in 0..8 {
                        let xb = _mm512_set1_epi32(x4(x, 32 * g + 4 * p));
                        sums = _mm512_dpbusd_epi32(sums, q[8 * g + p], xb);
                    }
                    isum = _mm512_add_epi32(isum, _mm512_mullo_epi32(sums, scale[g]));
                    let bs = i32::from(u16::from_le_bytes(a.bsums[2 * g]))
                        | (i32::from(u16::from_le_bytes(a.bsums[2 * g + 1])) << 16);
                    msum = _mm512_add_epi32(msum, _mm512_madd_epi16(min[g], _mm512_set1_epi32(bs)));
                }
                // `with_min`'s operations.
                let d_x = _mm512_set1_ps(a.d());
                let term = _mm512_sub_ps(
                    _mm512_mul_ps(_mm512_mul_ps(d_x, d), _mm512_cvtepi32_ps(isum)),
                    _mm512_mul_ps(_mm512_mul_ps(d_x, dmin), _mm512_cvtepi32_ps(msum)),
                );
                *acc = _mm512_add_ps(*acc, term);
            }
        }
        store_rows(chunk, &acc);
    }
}

/// `q6_k_dot8n_vnni` (rows8) of both groups, bit for bit. Its integer sum
/// per lane is `sum over the 16 groups of sc * (sum(q * x) - 32 * sum(x))`;
/// here each group's `sum(x)` is taken once per activation block from its
/// values (`group_sums`; Q6_K does not read `bsums`) and `32 * sum(sc *
/// sum(x))` once by `madd`, instead of a `dpbusd` per four values: the same
/// integer (no partial sum exceeds `16 * 127 * 16 * 63 * 128` in size), so
/// the same bits.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn q6_k_dot16n(groups: &[u8], acts: &[u8], act_row: usize, out: &mut [[f32; 2 * ROWS]]) {
    const BLOCK: usize = super::Q6KVnni::BLOCK;
    for (c, chunk) in out.chunks_mut(TOKENS).enumerate() {
        let rows: [&[BlockQ8K]; TOKENS] = pass_rows(acts, act_row, c, chunk.len());
        let longest = rows.iter().map(|r| r.len()).max().unwrap_or(0);
        let mut acc = [_mm512_setzero_ps(); TOKENS];
        // Values of run r, piece i4 at 8 * r + i4; the signed scales of the
        // 16 groups (i32 lanes), and of groups 2r, 2r + 1 as i16 pairs.
        let mut q = [_mm512_setzero_si512(); 64];
        let mut sc = [_mm512_setzero_si512(); 16];
        let mut sc_pairs = [_mm512_setzero_si512(); 8];
        for (b, (wa, wb)) in block_pairs(groups, BLOCK).take(longest).enumerate() {
            for r in 0..8 {
                for i4 in 0..8 {
                    q[8 * r + i4] = join_i(q6_k_values(wa, r, i4), q6_k_values(wb, r, i4));
                }
            }
            for (g, s) in sc.iter_mut().enumerate() {
                let at = 1536 + 32 * (g / 4);
                *s = join_i(
                    lane_byte::<true>(load_u8(&wa[at..]), g % 4),
                    lane_byte::<true>(load_u8(&wb[at..]), g % 4),
                );
            }
            let mask = _mm512_set1_epi32(0xffff);
            for (r, p) in sc_pairs.iter_mut().enumerate() {
                let lo = _mm512_and_si512(sc[2 * r], mask);
                *p = _mm512_or_si512(lo, _mm512_slli_epi32::<16>(sc[2 * r + 1]));
            }
            let d = f16_pair(&wa[1664..], &wb[1664..]);
            for (acc, row) in acc.iter_mut().zip(&rows[..chunk.len()]) {
                let Some(a) = row.get(b) else { continue };
                let x = &a.qs;
                let xs = group_sums(x);
                let (mut isum, mut bsum) = (_mm512_setzero_si512(), _mm512_setzero_si512());
                for r in 0..8 {
                    for half in 0..2 {
                        let mut qx = _mm512_setzero_si512();
                        for i4 in 4 * half..4 * half + 4 {
                            let xb = _mm512_set1_epi32(x4(x, 32 * r + 4 * i4));
                            qx = _mm512_dpbusd_epi32(qx, q[8 * r + i4], xb);
                        }
                        isum = _mm512_add_epi32(isum, _mm512_mullo_epi32(qx, sc[2 * r + half]));
                    }
                    let bs = i32::from(xs[2 * r] as u16) | (i32::from(xs[2 * r + 1] as u16) << 16);
                    bsum = _mm512_add_epi32(
                        bsum,
                        _mm512_madd_epi16(sc_pairs[r], _mm512_set1_epi32(bs)),
                    );
                }
                let isum = _mm512_sub_epi32(isum, _mm512_slli_epi32::<5>(bsum));
                let term = _mm512_mul_ps(
                    _mm512_mul_ps(d, _mm512_set1_ps(a.d())),
                    _mm512_cvtepi32_ps(isum),
                );
                *acc = _mm512_add_ps(*acc, term);
            }
        }
        store_rows(chunk, &acc);
    }
}

/// The sums of the 16 groups of 16 values of a Q8_K block's `qs` (each
/// within +-2048, so an i16), from `vpsadbw` on the values read as
/// `x + 128`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
pub(super) unsafe fn group_sums(x: &[i8; 256]) -> [i16; 16] {
    let flip = _mm512_set1_epi8(i8::MIN);
    let mut eights = [0u64; 32];
    for (i, part) in eights.chunks_exact_mut(8).enumerate() {
        // SAFETY: bytes 64i..64i + 64 of `x` are readable and `part` is 8
        // writable u64; neither access needs alignment.
        unsafe {
            let v = _mm512_loadu_si512(x.as_ptr().add(64 * i).cast());
            let s = _mm512_sad_epu8(_mm512_xor_si512(v, flip), _mm512_setzero_si512());
            _mm512_storeu_si512(part.as_mut_ptr().cast(), s);
        }
    }
    // Each u64 is the sum of 8 values + 8 * 128.
    std::array::from_fn(|g| (eights[2 * g] + eights[2 * g + 1]) as i16 - 2048)
}

/// Each row's sixteen sums into its output entry.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn store_rows(chunk: &mut [[f32; 2 * ROWS]], acc: &[__m512; TOKENS]) {
    for (o, a) in chunk.iter_mut().zip(acc) {
        // SAFETY: `o` is 16 writable f32; `storeu` has no alignment
        // requirement.
        unsafe { _mm512_storeu_ps(o.as_mut_ptr(), *a) };
    }
}
