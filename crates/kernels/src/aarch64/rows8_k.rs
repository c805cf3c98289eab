//! Eight-row kernels (`dot8`, `dot8n`) of the k-quants Q2_K..Q6_K on
//! groups of eight rows repacked by [`crate::dot::interleave`], for the
//! NEON and dotprod sets, and the many-row kernels (`dot8n`) of the i8mm
//! set.
//!
//! A super-block of the eight rows is decoded once (per activation row
//! for `dot8`, per pass of up to [`TOKENS`](super::rows8::TOKENS) rows
//! for `dot8n`) into 64 quads of values (`q[i][h]`: values `4i..4i + 4`
//! of rows `4h..4h + 4`, one row per i32 lane, offsets taken off), one i32
//! scale per 16 values and row, and (Q2_K, Q4_K, Q5_K) one min per 16 or
//! 32 values and row, the scale bytes unpacked lane by lane with shifts
//! and masks. Per 16 values, four `sdot` by element (per row half) give
//! each row's exact sum in its own lane, and one integer `mla` per group
//! of a scale multiplies it by the rows' scales: 128 `sdot` and 32 `mla`
//! (16 for Q4_K/Q5_K, whose scales cover 32 values) per super-block,
//! eight rows and token. The f32 term is the scalar reference's
//! (`crate::dot::k_quants::with_min`, `q6_k_term`), lane by lane, added in
//! block order: the bits of the one-row reference.
//!
//! The i8mm set's `dot8n` takes the activation rows two at a time: the
//! decoded quads zipped into `smmla`'s operands (eight values of two
//! weight rows; eight values of two activation rows), one `smmla` gives a
//! 2x2 block of exact sums, 128 per super-block and pair of activation
//! rows (64 per row, against 128 `sdot`), then the scales (in `smmla`'s
//! lane order) with one `mla` per group, and the same f32 terms.
//!
//! No overflow: the per-lane sums are those of the reference's bounds
//! (`|isum| <= 2^27`, `|msum| <= 16 * 63 * 32768`).

use std::arch::aarch64::*;

use super::rows8::{by_pairs, by_rows, entries, many_rows, store, ROWS};
use super::{f16x8, load_at, load_i8_at, smmla, Mul8, Neon, Sdot};
use crate::dispatch::KernelSet;
use crate::dot::{whole_blocks, Dot8Fn, Dot8NFn};
use crate::quant::BlockQ8K;
use crate::GgmlType;

/// `set`'s own eight-row kernel for `w`, if it has one.
pub(super) fn kernel8(set: KernelSet, w: GgmlType) -> Option<Dot8Fn> {
    use GgmlType::*;
    Some(match (set, w) {
        (KernelSet::Neon, Q4K) => neon::dot8_q4_k as Dot8Fn,
        (KernelSet::Neon, Q6K) => neon::dot8_q6_k,
        (KernelSet::Neon, Q2K) => neon::dot8_q2_k,
        (KernelSet::Neon, Q3K) => neon::dot8_q3_k,
        (KernelSet::Neon, Q5K) => neon::dot8_q5_k,
        (KernelSet::Dotprod, Q4K) => dotprod::dot8_q4_k,
        (KernelSet::Dotprod, Q6K) => dotprod::dot8_q6_k,
        (KernelSet::Dotprod, Q2K) => dotprod::dot8_q2_k,
        (KernelSet::Dotprod, Q3K) => dotprod::dot8_q3_k,
        (KernelSet::Dotprod, Q5K) => dotprod::dot8_q5_k,
        _ => return None,
    })
}

/// `set`'s own many-row eight-row kernel for `w`, if it has one.
pub(super) fn kernel8n(set: KernelSet, w: GgmlType) -> Option<Dot8NFn> {
    use GgmlType::*;
    Some(match (set, w) {
        (KernelSet::Neon, Q4K) => neon::dot8n_q4_k as Dot8NFn,
        (KernelSet::Neon, Q6K) => neon::dot8n_q6_k,
        (KernelSet::Neon, Q2K) => neon::dot8n_q2_k,
        (KernelSet::Neon, Q3K) => neon::dot8n_q3_k,
        (KernelSet::Neon, Q5K) => neon::dot8n_q5_k,
        (KernelSet::Dotprod, Q4K) => dotprod::dot8n_q4_k,
        (KernelSet::Dotprod, Q6K) => dotprod::dot8n_q6_k,
        (KernelSet::Dotprod, Q2K) => dotprod::dot8n_q2_k,
        (KernelSet::Dotprod, Q3K) => dotprod::dot8n_q3_k,
        (KernelSet::Dotprod, Q5K) => dotprod::dot8n_q5_k,
        (KernelSet::I8mm, Q2K) => i8mm::dot8n_q2_k,
        (KernelSet::I8mm, Q3K) => i8mm::dot8n_q3_k,
        (KernelSet::I8mm, Q4K) => i8mm::dot8n_q4_k,
        (KernelSet::I8mm, Q5K) => i8mm::dot8n_q5_k,
        (KernelSet::I8mm, Q6K) => i8mm::dot8n_q6_k,
        _ => return None,
    })
}

/// A decoded super-block of eight rows (rows 0..4 in `[0]`, 4..8 in `[1]`).
struct Decoded {
    /// Values `4i..4i + 4` of each row, offsets taken off.
    q: [[int8x16_t; 2]; 64],
    /// The scale of values `16j..16j + 16`.
    sc: [[int32x4_t; 2]; 16],
    /// (Q2_K, Q4_K) the min of values `M_VALUES * g..` (`KFormat::M_VALUES`).
    m: [[int32x4_t; 2]; 16],
    /// `d` and (Q4_K) `dmin`, as f32.
    d: [float32x4_t; 2],
    dmin: [float32x4_t; 2],
}

impl Decoded {
    fn new() -> Decoded {
        // SAFETY: NEON is part of every aarch64 target.
        unsafe {
            Decoded {
                q: [[vdupq_n_s8(0); 2]; 64],
                sc: [[vdupq_n_s32(0); 2]; 16],
                m: [[vdupq_n_s32(0); 2]; 16],
                d: [vdupq_n_f32(0.0); 2],
                dmin: [vdupq_n_f32(0.0); 2],
            }
        }
    }
}

/// A k-quant format in the interleaved layout.
trait KFormat {
    /// Bytes of one super-block of one row.
    const BLOCK: usize;
    /// Whether the term has the min part (Q2_K, Q4_K).
    const MIN: bool;
    /// Values per scale (16 or 32): `Decoded::sc[j]` is the same for the
    /// `SC_VALUES / 16` entries of a group.
    const SC_VALUES: usize = 16;
    /// Values per min (16 or 32), if `MIN`.
    const M_VALUES: usize = 16;
    /// Decodes the interleaved super-block `w` (`8 * BLOCK` bytes).
    fn decode(w: &[u8], out: &mut Decoded);
}

/// Byte `i` of each lane's run of scale bytes (`p[i / 4]`, lane by lane),
/// as a u32.
#[inline(always)]
fn lane_byte(p: &[uint32x4_t], i: usize) -> uint32x4_t {
    // SAFETY: NEON is part of every aarch64 target.
    unsafe {
        let shifted = vshlq_u32(p[i / 4], vdupq_n_s32(-8 * (i % 4) as i32));
        vandq_u32(shifted, vdupq_n_u32(0xff))
    }
}

/// `(x >> s) & mask` lane by lane.
#[inline(always)]
fn bits32(x: uint32x4_t, s: i32, mask: u32) -> uint32x4_t {
    // SAFETY: NEON is part of every aarch64 target.
    unsafe { vandq_u32(vshlq_u32(x, vdupq_n_s32(-s)), vdupq_n_u32(mask)) }
}

/// Q4_K: `d` at 0, `dmin` at 16, the 12 scale bytes as three pieces at 32,
/// then the 128 bytes of nibbles as 32 pieces at `128 + 32p`.
struct Q4K;

impl KFormat for Q4K {
    const BLOCK: usize = 144;
    const MIN: bool = true;
    const SC_VALUES: usize = 32;
    const M_VALUES: usize = 32;
    #[inline(always)]
    fn decode(w: &[u8], out: &mut Decoded) {
        decode_k4(w, 128, out);
    }
}

/// Q5_K: Q4_K's `d`, `dmin` and scales, the 32 bytes of fifth bits as
/// eight pieces at `128 + 32p`, the nibbles as 32 pieces at `384 + 32p`.
struct Q5K;

impl KFormat for Q5K {
    const BLOCK: usize = 176;
    const MIN: bool = true;
    const SC_VALUES: usize = 32;
    const M_VALUES: usize = 32;
    #[inline(always)]
    fn decode(w: &[u8], out: &mut Decoded) {
        decode_k4(w, 384, out);
        // Quad i of group g: plus 16 where bit g of fifth-bit piece i is
        // set (see `crate::dot::k_quants::q5_k_q8_k`).
        // SAFETY: NEON is part of every aarch64 target.
        unsafe {
            for h in 0..2 {
                for i in 0..8 {
                    let qh = load_at(&w[128 + 32 * i + 16 * h..]);
                    for g in 0..8 {
                        let bit = vandq_u8(vshlq_u8(qh, vdupq_n_s8(-(g as i8))), vdupq_n_u8(1));
                        let q = &mut out.q[8 * g + i][h];
                        *q = vorrq_s8(*q, vreinterpretq_s8_u8(vshlq_n_u8::<4>(bit)));
                    }
                }
            }
        }
    }
}

/// Q4_K's and Q5_K's `d` (at 0), `dmin` (16), scales and mins (three
/// pieces at 32) and nibbles (32 pieces at `nibbles + 32p`) into `out`.
#[inline(always)]
fn decode_k4(w: &[u8], nibbles: usize, out: &mut Decoded) {
    out.d = f16x8(w[..16].try_into().expect("16 bytes"));
    out.dmin = f16x8(w[16..32].try_into().expect("16 bytes"));
    // SAFETY: NEON is part of every aarch64 target.
    unsafe {
        for h in 0..2 {
            let p: [uint32x4_t; 3] =
                std::array::from_fn(|s| vreinterpretq_u32_u8(load_at(&w[32 + 32 * s + 16 * h..])));
            // As `crate::quant::q4_k::scale_min_k4`, lane by lane.
            for g in 0..8 {
                let (sc, m) = if g < 4 {
                    (
                        bits32(lane_byte(&p, g), 0, 63),
                        bits32(lane_byte(&p, g + 4), 0, 63),
                    )
                } else {
                    let b = lane_byte(&p, g + 4);
                    let sc = vorrq_u32(
                        bits32(b, 0, 0x0f),
                        vshlq_n_u32::<4>(bits32(lane_byte(&p, g - 4), 6, 3)),
                    );
                    let m = vorrq_u32(
                        bits32(b, 4, 0x0f),
                        vshlq_n_u32::<4>(bits32(lane_byte(&p, g), 6, 3)),
                    );
                    (sc, m)
                };
                let sc = vreinterpretq_s32_u32(sc);
                out.sc[2 * g][h] = sc;
                out.sc[2 * g + 1][h] = sc;
                out.m[g][h] = vreinterpretq_s32_u32(m);
            }
            // Group g: the low (even g) or high nibbles of pieces
            // 8 (g / 2)..+8.
            let mask = vdupq_n_u8(0x0f);
            for j in 0..4 {
                for k in 0..8 {
                    let bytes = load_at(&w[nibbles + 32 * (8 * j + k) + 16 * h..]);
                    out.q[8 * (2 * j) + k][h] = vreinterpretq_s8_u8(vandq_u8(bytes, mask));
                    out.q[8 * (2 * j + 1) + k][h] = vreinterpretq_s8_u8(vshrq_n_u8::<4>(bytes));
                }
            }
        }
    }
}

/// Q6_K: 128 bytes of low nibbles as 32 pieces at `32p`, 64 bytes of high
/// bits as 16 pieces at `1024 + 32p`, the 16 scales as four pieces at
/// `1536 + 32s`, `d` at 1664.
struct Q6K;

impl KFormat for Q6K {
    const BLOCK: usize = 210;
    const MIN: bool = false;
    #[inline(always)]
    fn decode(w: &[u8], out: &mut Decoded) {
        out.d = f16x8(w[1664..1680].try_into().expect("16 bytes"));
        // SAFETY: NEON is part of every aarch64 target.
        unsafe {
            for h in 0..2 {
                for j in 0..16 {
                    let p = vreinterpretq_s32_u8(load_at(&w[1536 + 32 * (j / 4) + 16 * h..]));
                    // Byte j % 4 of each lane, sign-extended.
                    let up = vshlq_s32(p, vdupq_n_s32(24 - 8 * (j % 4) as i32));
                    out.sc[j][h] = vshrq_n_s32::<24>(up);
                }
                // Run r of 32 values: half hh = r / 4, k = r % 4 (see
                // `crate::dot::k_quants::q6_k_q8_k`).
                for r in 0..8 {
                    let (hh, k) = (r / 4, r % 4);
                    for kk in 0..8 {
                        let ql = load_at(&w[32 * (16 * hh + 8 * (k % 2) + kk) + 16 * h..]);
                        let qh = load_at(&w[1024 + 32 * (8 * hh + kk) + 16 * h..]);
                        let low = vandq_u8(
                            vshlq_u8(ql, vdupq_n_s8(-4 * (k / 2) as i8)),
                            vdupq_n_u8(0x0f),
                        );
                        let top = vandq_u8(vshlq_u8(qh, vdupq_n_s8(-2 * k as i8)), vdupq_n_u8(3));
                        let q = vsubq_u8(vorrq_u8(low, vshlq_n_u8::<4>(top)), vdupq_n_u8(32));
                        out.q[8 * r + kk][h] = vreinterpretq_s8_u8(q);
                    }
                }
            }
        }
    }
}

/// The 2-bit values of Q2_K and Q3_K: the 16 pieces at `at + 32p` (rows
/// 0..4, then 4..8, 16 bytes each); piece `p` holds quad `p % 4` of the
/// groups `8 (p / 8) + 2k + (p % 8) / 4` at bits `2k..2k + 2` (see
/// `crate::dot::k_quants::q2_k_q8_k`). `f(p, k, h, low)` makes the values
/// of that quad from the two bits `low` (one per byte), stored in
/// `out.q[4g + p % 4][h]`.
#[inline(always)]
fn two_bit_values(
    w: &[u8],
    at: usize,
    out: &mut Decoded,
    f: impl Fn(usize, usize, usize, uint8x16_t) -> uint8x16_t,
) {
    // SAFETY: NEON is part of every aarch64 target.
    unsafe {
        for h in 0..2 {
            for p in 0..16 {
                let bytes = load_at(&w[at + 32 * p + 16 * h..]);
                for k in 0..4 {
                    let low = vandq_u8(vshlq_u8(bytes, vdupq_n_s8(-2 * k as i8)), vdupq_n_u8(3));
                    let g = 8 * (p / 8) + 2 * k + (p % 8) / 4;
                    out.q[4 * g + p % 4][h] = vreinterpretq_s8_u8(f(p, k, h, low));
                }
            }
        }
    }
}

/// Q2_K: the 16 scale bytes as four pieces at `32s`, the 64 bytes of
/// 2-bit values as 16 pieces at 128, `d` at 640, `dmin` at 656.
struct Q2K;

impl KFormat for Q2K {
    const BLOCK: usize = 84;
    const MIN: bool = true;
    #[inline(always)]
    fn decode(w: &[u8], out: &mut Decoded) {
        out.d = f16x8(w[640..656].try_into().expect("16 bytes"));
        out.dmin = f16x8(w[656..672].try_into().expect("16 bytes"));
        // SAFETY: NEON is part of every aarch64 target.
        unsafe {
            for h in 0..2 {
                let p: [uint32x4_t; 4] =
                    std::array::from_fn(|s| vreinterpretq_u32_u8(load_at(&w[32 * s + 16 * h..])));
                // Scale in the low nibble, min in the high one.
                for g in 0..16 {
                    let b = lane_byte(&p, g);
                    out.sc[g][h] = vreinterpretq_s32_u32(bits32(b, 0, 0x0f));
                    out.m[g][h] = vreinterpretq_s32_u32(bits32(b, 4, 0x0f));
                }
            }
        }
        two_bit_values(w, 128, out, |_, _, _, low| low);
    }
}

/// Q3_K: the 32 bytes of high bits as eight pieces at `32p`, the 2-bit
/// values as 16 pieces at 256, the 12 scale bytes as three pieces at
/// `768 + 32s`, `d` at 864.
struct Q3K;

impl KFormat for Q3K {
    const BLOCK: usize = 110;
    const MIN: bool = false;
    #[inline(always)]
    fn decode(w: &[u8], out: &mut Decoded) {
        out.d = f16x8(w[864..880].try_into().expect("16 bytes"));
        // SAFETY: NEON is part of every aarch64 target.
        unsafe {
            for h in 0..2 {
                let p: [uint32x4_t; 3] = std::array::from_fn(|s| {
                    vreinterpretq_u32_u8(load_at(&w[768 + 32 * s + 16 * h..]))
                });
                // As `crate::quant::BlockQ3K::scales`, lane by lane.
                for j in 0..16 {
                    let low = if j < 8 {
                        bits32(lane_byte(&p, j), 0, 0x0f)
                    } else {
                        bits32(lane_byte(&p, j - 8), 4, 0x0f)
                    };
                    let high = bits32(lane_byte(&p, 8 + j % 4), 2 * (j / 4) as i32, 3);
                    let sc = vreinterpretq_s32_u32(vorrq_u32(low, vshlq_n_u32::<4>(high)));
                    out.sc[j][h] = vsubq_s32(sc, vdupq_n_s32(32));
                }
            }
        }
        // Value `low - 4`, or `low` where its high bit (bit 4 (p / 8) + k
        // of the high-bit piece 4 ((p % 8) / 4) + p % 4) is set.
        two_bit_values(w, 256, out, |p, k, h, low| {
            let piece = 4 * ((p % 8) / 4) + p % 4;
            let shift = (4 * (p / 8) + k) as i8;
            // SAFETY: NEON is part of every aarch64 target.
            unsafe {
                let hm = load_at(&w[32 * piece + 16 * h..]);
                let bit = vandq_u8(vshlq_u8(hm, vdupq_n_s8(-shift)), vdupq_n_u8(1));
                vsubq_u8(vorrq_u8(low, vshlq_n_u8::<2>(bit)), vdupq_n_u8(4))
            }
        });
    }
}

/// The scalar reference's term of one super-block for the eight rows,
/// added to `acc`.
///
/// # Safety
///
/// As [`Mul8::dot4`].
#[inline(always)]
unsafe fn add_term<K: KFormat, M: Mul8>(
    acc: [float32x4_t; 2],
    b: &Decoded,
    a: &BlockQ8K,
) -> [float32x4_t; 2] {
    // SAFETY: NEON is part of every aarch64 target; the rest is the
    // caller's contract.
    unsafe {
        let mut isum = [vdupq_n_s32(0); 2];
        // Per group of `SC_VALUES` values (one or two runs of 16), each
        // row's exact sum in its lane, then times the rows' scales.
        let runs = K::SC_VALUES / 16;
        for g in 0..16 / runs {
            let mut part = [vdupq_n_s32(0); 2];
            for j in runs * g..runs * (g + 1) {
                let x = load_i8_at(&a.qs[16 * j..]);
                for (h, part) in part.iter_mut().enumerate() {
                    *part = M::dot4_lane::<0>(*part, b.q[4 * j][h], x);
                    *part = M::dot4_lane::<1>(*part, b.q[4 * j + 1][h], x);
                    *part = M::dot4_lane::<2>(*part, b.q[4 * j + 2][h], x);
                    *part = M::dot4_lane::<3>(*part, b.q[4 * j + 3][h], x);
                }
            }
            for h in 0..2 {
                isum[h] = vmlaq_s32(isum[h], part[h], b.sc[runs * g][h]);
            }
        }
        finish_term::<K>(acc, b, a, isum)
    }
}

/// `acc` plus the scalar reference's f32 term of one super-block, lane by
/// lane, from the rows' exact integer sums `isum` (rows 0..4, 4..8):
/// `(d * d_x) * isum`, minus `(dmin * d_x) * msum` if `K::MIN`.
#[inline(always)]
fn finish_term<K: KFormat>(
    acc: [float32x4_t; 2],
    b: &Decoded,
    a: &BlockQ8K,
    isum: [int32x4_t; 2],
) -> [float32x4_t; 2] {
    let d_x = a.d();
    // SAFETY: NEON is part of every aarch64 target.
    std::array::from_fn(|h| unsafe {
        let term = vmulq_f32(vmulq_n_f32(b.d[h], d_x), vcvtq_f32_s32(isum[h]));
        let term = if K::MIN {
            let per = K::M_VALUES / 16;
            let mut msum = vdupq_n_s32(0);
            for g in 0..16 / per {
                let bsum: i32 = (per * g..per * (g + 1)).map(|j| i32::from(a.bsum(j))).sum();
                msum = vmlaq_n_s32(msum, b.m[g][h], bsum);
            }
            vsubq_f32(
                term,
                vmulq_f32(vmulq_n_f32(b.dmin[h], d_x), vcvtq_f32_s32(msum)),
            )
        } else {
            term
        };
        vaddq_f32(acc[h], term)
    })
}

/// The eight rows of `group` against `act`: `out[r]` = the scalar `dot`
/// of row `r`, bit for bit.
///
/// # Safety
///
/// As [`Mul8::dot4`].
#[inline(always)]
unsafe fn dot8<K: KFormat, M: Mul8>(group: &[u8], act: &[u8], out: &mut [f32; ROWS]) {
    let step = ROWS * K::BLOCK;
    let ab = whole_blocks::<BlockQ8K>(act);
    let n = (group.len() / step).min(ab.len());
    // SAFETY: NEON is part of every aarch64 target.
    let mut acc = unsafe { [vdupq_n_f32(0.0); 2] };
    let mut b = Decoded::new();
    for (w, a) in group.chunks_exact(step).zip(&ab[..n]) {
        K::decode(w, &mut b);
        // SAFETY: the caller's contract.
        acc = unsafe { add_term::<K, M>(acc, &b, a) };
    }
    store(out, acc);
}

/// `out[t]` = [`dot8`] of `group` with activation row `t`, bit for bit,
/// each super-block decoded once per pass of up to [`TOKENS`](super::rows8::TOKENS) rows.
///
/// # Safety
///
/// As [`Mul8::dot4`].
#[inline(always)]
unsafe fn dot8n<K: KFormat, M: Mul8>(
    group: &[u8],
    acts: &[u8],
    act_row: usize,
    out: &mut [[f32; ROWS]],
) {
    let mut d = Decoded::new();
    many_rows(
        group,
        ROWS * K::BLOCK,
        acts,
        act_row,
        out,
        |w, i, rows, acc| {
            K::decode(w, &mut d);
            // SAFETY: the caller's contract.
            by_rows(i, rows, acc, |acc, a| unsafe {
                add_term::<K, M>(acc, &d, a)
            });
        },
    );
}

/// The weights of a decoded super-block as `smmla`'s left operands, with
/// the scales in the same lanes: `w[m][p]` holds values `8m..8m + 8` of
/// rows `2p` and `2p + 1`, `sc[j][p]` the scales of values `16j..` of
/// rows `2p, 2p, 2p + 1, 2p + 1` (the lanes of `smmla`'s result).
struct MmlaWeights {
    w: [[int8x16_t; 4]; 32],
    sc: [[int32x4_t; 4]; 16],
}

impl MmlaWeights {
    fn new() -> MmlaWeights {
        // SAFETY: NEON is part of every aarch64 target.
        unsafe {
            MmlaWeights {
                w: [[vdupq_n_s8(0); 4]; 32],
                sc: [[vdupq_n_s32(0); 4]; 16],
            }
        }
    }

    /// The operands of `b`.
    #[inline(always)]
    fn fill(&mut self, b: &Decoded) {
        // SAFETY: NEON is part of every aarch64 target.
        unsafe {
            for m in 0..32 {
                for h in 0..2 {
                    let (x, y) = (
                        vreinterpretq_s32_s8(b.q[2 * m][h]),
                        vreinterpretq_s32_s8(b.q[2 * m + 1][h]),
                    );
                    self.w[m][2 * h] = vreinterpretq_s8_s32(vzip1q_s32(x, y));
                    self.w[m][2 * h + 1] = vreinterpretq_s8_s32(vzip2q_s32(x, y));
                }
            }
            for j in 0..16 {
                for h in 0..2 {
                    let s = b.sc[j][h];
                    self.sc[j][2 * h] = vzip1q_s32(s, s);
                    self.sc[j][2 * h + 1] = vzip2q_s32(s, s);
                }
            }
        }
    }
}

/// The eight rows' exact integer sums (the scales applied) with two
/// activation rows' super-blocks `x0`, `x1`: `[rows 0..4, rows 4..8]`
/// for each, as [`add_term`] forms them one row at a time.
///
/// # Safety
///
/// The CPU must support FEAT_I8MM.
#[inline(always)]
unsafe fn isums_pair<K: KFormat>(
    w: &MmlaWeights,
    x0: &BlockQ8K,
    x1: &BlockQ8K,
) -> [[int32x4_t; 2]; 2] {
    // SAFETY: NEON is part of every aarch64 target; FEAT_I8MM is the
    // caller's contract.
    unsafe {
        let mut acc = [vdupq_n_s32(0); 4];
        let runs = K::SC_VALUES / 16;
        for g in 0..16 / runs {
            let mut part = [vdupq_n_s32(0); 4];
            for j in runs * g..runs * (g + 1) {
                let a = vreinterpretq_s64_s8(load_i8_at(&x0.qs[16 * j..]));
                let b = vreinterpretq_s64_s8(load_i8_at(&x1.qs[16 * j..]));
                // Values 16j..16j + 8 of both rows, then 16j + 8..16j + 16.
                let lo = vreinterpretq_s8_s64(vzip1q_s64(a, b));
                let hi = vreinterpretq_s8_s64(vzip2q_s64(a, b));
                for (p, part) in part.iter_mut().enumerate() {
                    *part = smmla(*part, w.w[2 * j][p], lo);
                    *part = smmla(*part, w.w[2 * j + 1][p], hi);
                }
            }
            for p in 0..4 {
                acc[p] = vmlaq_s32(acc[p], part[p], w.sc[runs * g][p]);
            }
        }
        // acc[p] = [r2p.x0, r2p.x1, r2p+1.x0, r2p+1.x1].
        [
            [vuzp1q_s32(acc[0], acc[1]), vuzp1q_s32(acc[2], acc[3])],
            [vuzp2q_s32(acc[0], acc[1]), vuzp2q_s32(acc[2], acc[3])],
        ]
    }
}

/// [`dot8n`] with `smmla`, two activation rows at a time (the same exact
/// integers, the same f32 operations, so the same bits): per super-block
/// and pair of rows 128 `smmla` against dotprod's 256 `sdot`.
///
/// # Safety
///
/// The CPU must support FEAT_I8MM.
#[inline(always)]
unsafe fn dot8n_mmla<K: KFormat>(
    group: &[u8],
    acts: &[u8],
    act_row: usize,
    out: &mut [[f32; ROWS]],
) {
    let mut d = Decoded::new();
    let mut mw = MmlaWeights::new();
    many_rows(
        group,
        ROWS * K::BLOCK,
        acts,
        act_row,
        out,
        |w, i, rows, acc| {
            K::decode(w, &mut d);
            mw.fill(&d);
            // SAFETY: the caller's contract.
            let isums = |x0: &BlockQ8K, x1: &BlockQ8K| unsafe { isums_pair::<K>(&mw, x0, x1) };
            let finish = |acc, isum, a: &BlockQ8K| finish_term::<K>(acc, &d, a, isum);
            by_pairs(i, rows, acc, isums, finish);
        },
    );
}

entries!(
    neon,
    "neon",
    (dot8_q4_k, dot8::<Q4K, Neon>, Dot8),
    (dot8_q6_k, dot8::<Q6K, Neon>, Dot8),
    (dot8_q2_k, dot8::<Q2K, Neon>, Dot8),
    (dot8_q3_k, dot8::<Q3K, Neon>, Dot8),
    (dot8_q5_k, dot8::<Q5K, Neon>, Dot8),
    (dot8n_q4_k, dot8n::<Q4K, Neon>, Dot8N),
    (dot8n_q6_k, dot8n::<Q6K, Neon>, Dot8N),
    (dot8n_q2_k, dot8n::<Q2K, Neon>, Dot8N),
    (dot8n_q3_k, dot8n::<Q3K, Neon>, Dot8N),
    (dot8n_q5_k, dot8n::<Q5K, Neon>, Dot8N),
);

entries!(
    dotprod,
    "neon,dotprod",
    (dot8_q4_k, dot8::<Q4K, Sdot>, Dot8),
    (dot8_q6_k, dot8::<Q6K, Sdot>, Dot8),
    (dot8_q2_k, dot8::<Q2K, Sdot>, Dot8),
    (dot8_q3_k, dot8::<Q3K, Sdot>, Dot8),
    (dot8_q5_k, dot8::<Q5K, Sdot>, Dot8),
    (dot8n_q4_k, dot8n::<Q4K, Sdot>, Dot8N),
    (dot8n_q6_k, dot8n::<Q6K, Sdot>, Dot8N),
    (dot8n_q2_k, dot8n::<Q2K, Sdot>, Dot8N),
    (dot8n_q3_k, dot8n::<Q3K, Sdot>, Dot8N),
    (dot8n_q5_k, dot8n::<Q5K, Sdot>, Dot8N),
);

entries!(
    i8mm,
    "neon,dotprod,i8mm",
    (dot8n_q2_k, dot8n_mmla::<Q2K>, Dot8N),
    (dot8n_q3_k, dot8n_mmla::<Q3K>, Dot8N),
    (dot8n_q4_k, dot8n_mmla::<Q4K>, Dot8N),
    (dot8n_q5_k, dot8n_mmla::<Q5K>, Dot8N),
    (dot8n_q6_k, dot8n_mmla::<Q6K>, Dot8N),
);
