//! Eight-row kernels (`dot8`, `dot8n`) of Q4_K and Q6_K, the k-quants of
//! the common Q4_K_M files, on groups of eight rows repacked by
//! [`crate::dot::interleave`], for the NEON and dotprod sets.
//!
//! A super-block of the eight rows is decoded once (per activation row
//! for `dot8`, per pass of up to [`TOKENS`] rows for `dot8n`) into 64
//! quads of values (`q[i][h]`: values `4i..4i + 4` of rows `4h..4h + 4`,
//! one row per i32 lane, offsets taken off), one i32 scale per 16 values
//! and row, and (Q4_K) one min per 32 values and row, the scale bytes
//! unpacked lane by lane with shifts and masks. Per 16 values, four `sdot`
//! by element (per row half) give each row's exact sum in its own lane,
//! and one integer `mla` multiplies it by the rows' scales: 128 `sdot` and
//! 32 `mla` per super-block, eight rows and token. The f32 term is the
//! scalar reference's (`crate::dot::k_quants::with_min`, `q6_k_term`),
//! lane by lane, added in block order: the bits of the one-row reference.
//!
//! No overflow: the per-lane sums are those of the reference's bounds
//! (`|isum| <= 2^27`, `|msum| <= 16 * 63 * 32768`).

use std::arch::aarch64::*;

use super::rows8::entries;
use super::{f16x8, load_at, load_i8_at, Mul8, Neon, Sdot};
use crate::dispatch::KernelSet;
use crate::dot::{pass_rows, whole_blocks, Dot8Fn, Dot8NFn};
use crate::quant::BlockQ8K;
use crate::GgmlType;

/// Rows per interleaved group.
const ROWS: usize = 8;

/// Activation rows per pass of the many-row kernels.
const TOKENS: usize = 8;

/// `set`'s own eight-row kernel for `w`, if it has one.
pub(super) fn kernel8(set: KernelSet, w: GgmlType) -> Option<Dot8Fn> {
    use GgmlType::*;
    Some(match (set, w) {
        (KernelSet::Neon, Q4K) => neon::dot8_q4_k as Dot8Fn,
        (KernelSet::Neon, Q6K) => neon::dot8_q6_k,
        (KernelSet::Dotprod, Q4K) => dotprod::dot8_q4_k,
        (KernelSet::Dotprod, Q6K) => dotprod::dot8_q6_k,
        _ => return None,
    })
}

/// `set`'s own many-row eight-row kernel for `w`, if it has one.
pub(super) fn kernel8n(set: KernelSet, w: GgmlType) -> Option<Dot8NFn> {
    use GgmlType::*;
    Some(match (set, w) {
        (KernelSet::Neon, Q4K) => neon::dot8n_q4_k as Dot8NFn,
        (KernelSet::Neon, Q6K) => neon::dot8n_q6_k,
        (KernelSet::Dotprod, Q4K) => dotprod::dot8n_q4_k,
        (KernelSet::Dotprod, Q6K) => dotprod::dot8n_q6_k,
        _ => return None,
    })
}

/// A decoded super-block of eight rows (rows 0..4 in `[0]`, 4..8 in `[1]`).
struct Decoded {
    /// Values `4i..4i + 4` of each row, offsets taken off.
    q: [[int8x16_t; 2]; 64],
    /// The scale of values `16j..16j + 16`.
    sc: [[int32x4_t; 2]; 16],
    /// (Q4_K) the min of values `32g..32g + 32`.
    m: [[int32x4_t; 2]; 8],
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
                m: [[vdupq_n_s32(0); 2]; 8],
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
    /// Whether the term has the min part (Q4_K).
    const MIN: bool;
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
    #[inline(always)]
    fn decode(w: &[u8], out: &mut Decoded) {
        out.d = f16x8(w[..16].try_into().expect("16 bytes"));
        out.dmin = f16x8(w[16..32].try_into().expect("16 bytes"));
        // SAFETY: NEON is part of every aarch64 target.
        unsafe {
            for h in 0..2 {
                let p: [uint32x4_t; 3] = std::array::from_fn(|s| {
                    vreinterpretq_u32_u8(load_at(&w[32 + 32 * s + 16 * h..]))
                });
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
                        let bytes = load_at(&w[128 + 32 * (8 * j + k) + 16 * h..]);
                        out.q[8 * (2 * j) + k][h] = vreinterpretq_s8_u8(vandq_u8(bytes, mask));
                        out.q[8 * (2 * j + 1) + k][h] = vreinterpretq_s8_u8(vshrq_n_u8::<4>(bytes));
                    }
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
        for j in 0..16 {
            let x = load_i8_at(&a.qs[16 * j..]);
            for (h, isum) in isum.iter_mut().enumerate() {
                let mut part = vdupq_n_s32(0);
                part = M::dot4_lane::<0>(part, b.q[4 * j][h], x);
                part = M::dot4_lane::<1>(part, b.q[4 * j + 1][h], x);
                part = M::dot4_lane::<2>(part, b.q[4 * j + 2][h], x);
                part = M::dot4_lane::<3>(part, b.q[4 * j + 3][h], x);
                *isum = vmlaq_s32(*isum, part, b.sc[j][h]);
            }
        }
        let d_x = a.d();
        std::array::from_fn(|h| {
            let term = vmulq_f32(vmulq_n_f32(b.d[h], d_x), vcvtq_f32_s32(isum[h]));
            let term = if K::MIN {
                let mut msum = vdupq_n_s32(0);
                for g in 0..8 {
                    let bsum = i32::from(a.bsum(2 * g)) + i32::from(a.bsum(2 * g + 1));
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
}

/// Stores the eight lanes of `acc` in `out`.
#[inline(always)]
fn store(out: &mut [f32; ROWS], acc: [float32x4_t; 2]) {
    // SAFETY: `out` is 8 writable f32; `st1` has no alignment requirement.
    unsafe {
        vst1q_f32(out.as_mut_ptr(), acc[0]);
        vst1q_f32(out.as_mut_ptr().add(4), acc[1]);
    }
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
/// each super-block decoded once per pass of up to [`TOKENS`] rows.
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
    let step = ROWS * K::BLOCK;
    let mut b = Decoded::new();
    for (c, chunk) in out.chunks_mut(TOKENS).enumerate() {
        let rows: [&[BlockQ8K]; TOKENS] = pass_rows(acts, act_row, c, chunk.len());
        let longest = rows.iter().map(|r| r.len()).max().unwrap_or(0);
        let n = (group.len() / step).min(longest);
        // SAFETY: NEON is part of every aarch64 target.
        let mut acc = unsafe { [[vdupq_n_f32(0.0); 2]; TOKENS] };
        for (i, w) in group.chunks_exact(step).take(n).enumerate() {
            K::decode(w, &mut b);
            for (acc, r) in acc.iter_mut().zip(&rows[..chunk.len()]) {
                // Rows shorter than the group stop where `dot8` would.
                if let Some(a) = r.get(i) {
                    // SAFETY: the caller's contract.
                    *acc = unsafe { add_term::<K, M>(*acc, &b, a) };
                }
            }
        }
        for (o, a) in chunk.iter_mut().zip(acc) {
            store(o, a);
        }
    }
}

entries!(
    neon,
    "neon",
    (dot8_q4_k, dot8::<Q4K, Neon>, Dot8),
    (dot8_q6_k, dot8::<Q6K, Neon>, Dot8),
    (dot8n_q4_k, dot8n::<Q4K, Neon>, Dot8N),
    (dot8n_q6_k, dot8n::<Q6K, Neon>, Dot8N),
);

entries!(
    dotprod,
    "neon,dotprod",
    (dot8_q4_k, dot8::<Q4K, Sdot>, Dot8),
    (dot8_q6_k, dot8::<Q6K, Sdot>, Dot8),
    (dot8n_q4_k, dot8n::<Q4K, Sdot>, Dot8N),
    (dot8n_q6_k, dot8n::<Q6K, Sdot>, Dot8N),
);
