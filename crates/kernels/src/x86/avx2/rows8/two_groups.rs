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

use super::{offset_sum, pass_rows, w_scales, x4, Act8, Small, TOKENS};
use crate::dot::interleave::ROWS;
use crate::dot::Dot16NFn;
use crate::GgmlType;

/// The two-group kernel for weights of type `w`, if there is one.
pub(crate) fn kernel16n_vnni_fn(w: GgmlType) -> Option<Dot16NFn> {
    use GgmlType::*;
    Some(match w {
        Q4_0 => q4_0_x16n as Dot16NFn,
        Q4_1 => q4_1_x16n,
        Q5_0 => q5_0_x16n,
        Q8_0 => q8_0_x16n,
        _ => return None,
    })
}

/// Q4_0 x Q8_0, two groups, many activation rows.
fn q4_0_x16n(groups: &[u8], acts: &[u8], act_row: usize, out: &mut [[f32; 2 * ROWS]]) {
    // SAFETY: handed out only by `avx512::vec_dot_kernel`, whose callers
    // have checked that the CPU supports AVX2, FMA, F16C, AVX512F/BW/VL
    // and AVX512-VNNI.
    unsafe { dot16n::<super::Q4_0>(groups, acts, act_row, out) }
}

/// Q4_1 x Q8_1, two groups, many activation rows.
fn q4_1_x16n(groups: &[u8], acts: &[u8], act_row: usize, out: &mut [[f32; 2 * ROWS]]) {
    // SAFETY: as in `q4_0_x16n`.
    unsafe { dot16n::<super::Q4_1>(groups, acts, act_row, out) }
}

/// Q5_0 x Q8_0, two groups, many activation rows.
fn q5_0_x16n(groups: &[u8], acts: &[u8], act_row: usize, out: &mut [[f32; 2 * ROWS]]) {
    // SAFETY: as in `q4_0_x16n`.
    unsafe { dot16n::<super::Q5_0>(groups, acts, act_row, out) }
}

/// Q8_0 x Q8_0 (read as `w + 128`), two groups, many activation rows.
fn q8_0_x16n(groups: &[u8], acts: &[u8], act_row: usize, out: &mut [[f32; 2 * ROWS]]) {
    // SAFETY: as in `q4_0_x16n`.
    unsafe { dot16n::<super::q8_0::Q8_0Vnni>(groups, acts, act_row, out) }
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
        for (o, a) in chunk.iter_mut().zip(&acc) {
            // SAFETY: `o` is 16 writable f32; `storeu` has no alignment
            // requirement.
            unsafe { _mm512_storeu_ps(o.as_mut_ptr(), *a) };
        }
    }
}
