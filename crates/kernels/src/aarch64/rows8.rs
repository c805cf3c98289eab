//! Eight-row kernels (`VecDotKernel::dot8`, `dot8n`) of the 32-value
//! formats Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0, on groups of eight weight rows
//! repacked by [`crate::dot::interleave`].
//!
//! In that layout a 4-byte piece of a block is stored for the eight rows
//! in turn: a 16-byte load holds the same four values of rows 0..4 (row
//! `r` in i32 lane `r`), the next one rows 4..8. One `sdot` by element
//! (`sdot v.4s, w.16b, x.4b[i]`: the four matching activation bytes in
//! every lane) leaves each row's partial integer sum in its own lane, so a
//! block's eight exact integer dot products come out in two vectors with no
//! horizontal adds: 16 `sdot` per block and token for Q4_0 and Q8_0 (the
//! NEON set forms the same lanes with `smull`/`saddlp`/`addp`). The eight
//! rows' f16 scales are one `fcvtl` pair. Each lane then does its row's
//! scalar sequence of f32 operations (`(d_w * d_x) * isum`, `+ m_w * s_x`
//! for Q4_1, added to the running sum in block order; `fmul` and `fadd`,
//! never fused), so `out[r]` has the bits of the scalar reference's `dot`
//! of row `r`.
//!
//! The many-row kernels decode each block of the group once for a pass of
//! up to [`TOKENS`] activation rows. The i8mm set's (`dot8n` only) takes
//! the activation rows two at a time: `smmla` multiplies two weight rows'
//! eight values by two activation rows' eight values (a 2x2 block of
//! integer sums) in one instruction, 16 per block and pair of rows against
//! dotprod's 32 `sdot`, the weights' 4-byte pieces zipped into 8-byte runs
//! once per block.
//!
//! No overflow for any bytes: every value fits in an i8 after its offset
//! (Q4_0: -8..=7, Q4_1: 0..=15, Q5_0: -16..=15, Q5_1: 0..=31, Q8_0: any
//! i8), products are at most 2^14 and a block's sum at most 2^19 in
//! magnitude.

use std::arch::aarch64::*;

use super::{f16x8, load_at, load_i8_at, smmla, Mul8, Neon, Sdot};
use crate::dispatch::KernelSet;
use crate::dot::{pass_rows, whole_blocks, Dot8Fn, Dot8NFn};
use crate::quant::{Block, BlockQ8_0, BlockQ8_1};
use crate::GgmlType;

/// Rows per interleaved group.
pub(super) const ROWS: usize = 8;

/// Activation rows per pass of the many-row kernels (their running sums
/// stay in registers or on the stack while a block is decoded once).
pub(super) const TOKENS: usize = 8;

/// `set`'s own eight-row kernel for `w`, if it has one (not the slower
/// set's).
pub(super) fn kernel8(set: KernelSet, w: GgmlType) -> Option<Dot8Fn> {
    use GgmlType::*;
    Some(match (set, w) {
        (KernelSet::Neon, Q4_0) => neon::dot8_q4_0 as Dot8Fn,
        (KernelSet::Neon, Q4_1) => neon::dot8_q4_1,
        (KernelSet::Neon, Q5_0) => neon::dot8_q5_0,
        (KernelSet::Neon, Q5_1) => neon::dot8_q5_1,
        (KernelSet::Neon, Q8_0) => neon::dot8_q8_0,
        (KernelSet::Dotprod, Q4_0) => dotprod::dot8_q4_0,
        (KernelSet::Dotprod, Q4_1) => dotprod::dot8_q4_1,
        (KernelSet::Dotprod, Q5_0) => dotprod::dot8_q5_0,
        (KernelSet::Dotprod, Q5_1) => dotprod::dot8_q5_1,
        (KernelSet::Dotprod, Q8_0) => dotprod::dot8_q8_0,
        _ => return None,
    })
}

/// `set`'s own many-row eight-row kernel for `w`, if it has one.
pub(super) fn kernel8n(set: KernelSet, w: GgmlType) -> Option<Dot8NFn> {
    use GgmlType::*;
    Some(match (set, w) {
        (KernelSet::Neon, Q4_0) => neon::dot8n_q4_0 as Dot8NFn,
        (KernelSet::Neon, Q4_1) => neon::dot8n_q4_1,
        (KernelSet::Neon, Q5_0) => neon::dot8n_q5_0,
        (KernelSet::Neon, Q5_1) => neon::dot8n_q5_1,
        (KernelSet::Neon, Q8_0) => neon::dot8n_q8_0,
        (KernelSet::Dotprod, Q4_0) => dotprod::dot8n_q4_0,
        (KernelSet::Dotprod, Q4_1) => dotprod::dot8n_q4_1,
        (KernelSet::Dotprod, Q5_0) => dotprod::dot8n_q5_0,
        (KernelSet::Dotprod, Q5_1) => dotprod::dot8n_q5_1,
        (KernelSet::Dotprod, Q8_0) => dotprod::dot8n_q8_0,
        (KernelSet::I8mm, Q4_0) => i8mm::dot8n_q4_0,
        (KernelSet::I8mm, Q4_1) => i8mm::dot8n_q4_1,
        (KernelSet::I8mm, Q5_0) => i8mm::dot8n_q5_0,
        (KernelSet::I8mm, Q5_1) => i8mm::dot8n_q5_1,
        (KernelSet::I8mm, Q8_0) => i8mm::dot8n_q8_0,
        _ => return None,
    })
}

/// An activation block of the 32-value formats.
trait Act8: Block {
    /// `d_x` and (Q8_1) `s_x`, as f32.
    fn scales(&self) -> [f32; 2];
    /// The values.
    fn qs(&self) -> &[i8; 32];
}

/// Two f16 values (little-endian bytes) as f32 with one `fcvtl` (exact,
/// as `f16_le`).
#[inline(always)]
fn f16_pair(a: [u8; 2], b: [u8; 2]) -> [f32; 2] {
    let bits = u64::from(u16::from_le_bytes(a)) | u64::from(u16::from_le_bytes(b)) << 16;
    // SAFETY: NEON is part of every aarch64 target.
    unsafe {
        let v = super::f16x4(vcreate_u16(bits));
        [vgetq_lane_f32::<0>(v), vgetq_lane_f32::<1>(v)]
    }
}

impl Act8 for BlockQ8_0 {
    fn scales(&self) -> [f32; 2] {
        f16_pair(self.d, [0; 2])
    }
    fn qs(&self) -> &[i8; 32] {
        &self.qs
    }
}

impl Act8 for BlockQ8_1 {
    fn scales(&self) -> [f32; 2] {
        f16_pair(self.d, self.s)
    }
    fn qs(&self) -> &[i8; 32] {
        &self.qs
    }
}

/// A block's values for eight rows: `q[k][h]` holds values `4k..4k + 4`
/// of rows `4h..4h + 4` (row `4h + i` in bytes `4i..4i + 4`), offsets
/// already taken off.
type Values = [[int8x16_t; 2]; 8];

/// A 32-value weight format in the interleaved layout.
trait Legacy {
    /// Bytes of one block of one row.
    const BLOCK: usize;
    /// Whether the term has the `m_w * s_x` part (the eight `m_w` are the
    /// 16 bytes after the eight `d_w`).
    const MIN: bool;
    /// The activation block format.
    type A: Act8;

    /// The eight rows' values of the interleaved block `w` (`8 * BLOCK`
    /// bytes; the eight `d_w` are its first 16).
    fn values(w: &[u8]) -> Values;
}

/// The values of four nibble pieces starting at `w[at]`: piece `c`'s low
/// nibbles are values `4c..4c + 4`, its high nibbles `16 + 4c..`; `high`
/// (Q5_0's fifth bits, `0x10` or 0 per value, in the same order) is added
/// and `offset` taken off.
#[inline(always)]
fn nibble_values(w: &[u8], at: usize, high: Option<&Values>, offset: u8) -> Values {
    // SAFETY: NEON is part of every aarch64 target.
    unsafe {
        let mask = vdupq_n_u8(0x0f);
        let off = vdupq_n_u8(offset);
        let mut q = [[vdupq_n_s8(0); 2]; 8];
        for c in 0..4 {
            for h in 0..2 {
                let bytes = load_at(&w[at + 32 * c + 16 * h..]);
                let mut lo = vandq_u8(bytes, mask);
                let mut hi = vshrq_n_u8::<4>(bytes);
                if let Some(high) = high {
                    lo = vorrq_u8(lo, vreinterpretq_u8_s8(high[c][h]));
                    hi = vorrq_u8(hi, vreinterpretq_u8_s8(high[4 + c][h]));
                }
                q[c][h] = vreinterpretq_s8_u8(vsubq_u8(lo, off));
                q[4 + c][h] = vreinterpretq_s8_u8(vsubq_u8(hi, off));
            }
        }
        q
    }
}

/// Q4_0: `d` at 0, the four nibble pieces at `16 + 32c`; `w = d (q - 8)`.
struct Q4_0;

impl Legacy for Q4_0 {
    const BLOCK: usize = 18;
    const MIN: bool = false;
    type A = BlockQ8_0;
    #[inline(always)]
    fn values(w: &[u8]) -> Values {
        nibble_values(w, 16, None, 8)
    }
}

/// Q4_1: `d` at 0, `m` at 16, the nibble pieces at `32 + 32c`.
struct Q4_1;

impl Legacy for Q4_1 {
    const BLOCK: usize = 20;
    const MIN: bool = true;
    type A = BlockQ8_1;
    #[inline(always)]
    fn values(w: &[u8]) -> Values {
        nibble_values(w, 32, None, 0)
    }
}

/// Q5_0: `d` at 0, the rows' 4-byte fifth-bit masks at 16, the nibble
/// pieces at `48 + 32c`; `w = d (q - 16)`.
struct Q5_0;

impl Legacy for Q5_0 {
    const BLOCK: usize = 22;
    const MIN: bool = false;
    type A = BlockQ8_0;
    #[inline(always)]
    fn values(w: &[u8]) -> Values {
        fifth_bit_values(w, 16, 48, 16)
    }
}

/// Q5_1: `d` at 0, `m` at 16, the fifth-bit masks at 32, the nibble
/// pieces at `64 + 32c`; `w = d q + m`.
struct Q5_1;

impl Legacy for Q5_1 {
    const BLOCK: usize = 24;
    const MIN: bool = true;
    type A = BlockQ8_1;
    #[inline(always)]
    fn values(w: &[u8]) -> Values {
        fifth_bit_values(w, 32, 64, 0)
    }
}

/// The values of Q5_0 and Q5_1: the rows' 4-byte fifth-bit masks at
/// `masks` (bit `j` of row `r`'s mask belongs to its value `j`), the
/// nibble pieces at `nibbles`, `offset` taken off.
#[inline(always)]
fn fifth_bit_values(w: &[u8], masks: usize, nibbles: usize, offset: u8) -> Values {
    // Byte j of lane r: bit 4k + j of row r's mask, as 0x10 or 0.
    const BYTE0: [u8; 16] = [0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12];
    const BIT: [u8; 16] = [1, 2, 4, 8, 1, 2, 4, 8, 1, 2, 4, 8, 1, 2, 4, 8];
    // SAFETY: NEON is part of every aarch64 target.
    let high = unsafe {
        let (byte0, bit) = (super::load_u8(&BYTE0), super::load_u8(&BIT));
        let sixteen = vdupq_n_u8(0x10);
        let mut high = [[vdupq_n_s8(0); 2]; 8];
        for h in 0..2 {
            let masks = vreinterpretq_u32_u8(load_at(&w[masks + 16 * h..]));
            for (k, high) in high.iter_mut().enumerate() {
                let shifted = vshlq_u32(masks, vdupq_n_s32(-4 * k as i32));
                let spread = vqtbl1q_u8(vreinterpretq_u8_u32(shifted), byte0);
                let set = vandq_u8(vtstq_u8(spread, bit), sixteen);
                high[h] = vreinterpretq_s8_u8(set);
            }
        }
        high
    };
    nibble_values(w, nibbles, Some(&high), offset)
}

/// Q8_0: `d` at 0, the eight value pieces at `16 + 32k`.
struct Q8_0;

impl Legacy for Q8_0 {
    const BLOCK: usize = 34;
    const MIN: bool = false;
    type A = BlockQ8_0;
    #[inline(always)]
    fn values(w: &[u8]) -> Values {
        std::array::from_fn(|k| {
            std::array::from_fn(|h| {
                // SAFETY: NEON is part of every aarch64 target.
                unsafe { vreinterpretq_s8_u8(load_at(&w[16 + 32 * k + 16 * h..])) }
            })
        })
    }
}

/// The eight `d_w` and (if `K::MIN`) `m_w` of an interleaved block, as f32
/// (rows 0..4, rows 4..8).
#[inline(always)]
fn w_scales<K: Legacy>(w: &[u8]) -> [[float32x4_t; 2]; 2] {
    let d = f16x8(w[..16].try_into().expect("16 bytes"));
    let m = if K::MIN {
        f16x8(w[16..32].try_into().expect("16 bytes"))
    } else {
        d
    };
    [d, m]
}

/// `acc` plus the scalar reference's terms of one block, lane by lane:
/// `(d_w * d_x) * isum`, `+ m_w * s_x` if `K::MIN`.
#[inline(always)]
fn add_terms<K: Legacy>(
    acc: [float32x4_t; 2],
    isum: [int32x4_t; 2],
    [d_w, m_w]: &[[float32x4_t; 2]; 2],
    a: &K::A,
) -> [float32x4_t; 2] {
    let [d_x, s_x] = a.scales();
    std::array::from_fn(|h| {
        // SAFETY: NEON is part of every aarch64 target.
        unsafe {
            let term = vmulq_f32(vmulq_n_f32(d_w[h], d_x), vcvtq_f32_s32(isum[h]));
            let term = if K::MIN {
                vaddq_f32(term, vmulq_n_f32(m_w[h], s_x))
            } else {
                term
            };
            vaddq_f32(acc[h], term)
        }
    })
}

/// Lane `r` of `[rows 0..4, rows 4..8]`: row `r`'s exact integer dot
/// product with the activation values `x`.
///
/// # Safety
///
/// As [`Mul8::dot4`].
#[inline(always)]
unsafe fn isums<M: Mul8>(q: &Values, x: &[i8; 32]) -> [int32x4_t; 2] {
    // SAFETY: NEON is part of every aarch64 target; the rest is the
    // caller's contract.
    unsafe {
        let x0 = load_i8_at(&x[..16]);
        let x1 = load_i8_at(&x[16..]);
        let mut s = [vdupq_n_s32(0); 2];
        for h in 0..2 {
            s[h] = M::dot4_lane::<0>(s[h], q[0][h], x0);
            s[h] = M::dot4_lane::<1>(s[h], q[1][h], x0);
            s[h] = M::dot4_lane::<2>(s[h], q[2][h], x0);
            s[h] = M::dot4_lane::<3>(s[h], q[3][h], x0);
            s[h] = M::dot4_lane::<0>(s[h], q[4][h], x1);
            s[h] = M::dot4_lane::<1>(s[h], q[5][h], x1);
            s[h] = M::dot4_lane::<2>(s[h], q[6][h], x1);
            s[h] = M::dot4_lane::<3>(s[h], q[7][h], x1);
        }
        s
    }
}

/// Stores the eight lanes of `acc` in `out`.
#[inline(always)]
pub(super) fn store(out: &mut [f32; ROWS], acc: Acc) {
    // SAFETY: `out` is 8 writable f32; `st1` has no alignment requirement.
    unsafe {
        vst1q_f32(out.as_mut_ptr(), acc[0]);
        vst1q_f32(out.as_mut_ptr().add(4), acc[1]);
    }
}

/// The eight rows of `group` against the activation row `act`:
/// `out[r]` = the scalar `dot` of row `r`, bit for bit.
///
/// # Safety
///
/// As [`Mul8::dot4`].
#[inline(always)]
unsafe fn dot8<K: Legacy, M: Mul8>(group: &[u8], act: &[u8], out: &mut [f32; ROWS]) {
    let step = ROWS * K::BLOCK;
    let ab = whole_blocks::<K::A>(act);
    // As the one-row kernels: the whole blocks common to a row (there are
    // `group.len() / step` of them in each) and the activations.
    let n = (group.len() / step).min(ab.len());
    // SAFETY: NEON is part of every aarch64 target.
    let mut acc = unsafe { [vdupq_n_f32(0.0); 2] };
    for (w, a) in group.chunks_exact(step).zip(&ab[..n]) {
        let q = K::values(w);
        // SAFETY: the caller's contract.
        let isum = unsafe { isums::<M>(&q, a.qs()) };
        acc = add_terms::<K>(acc, isum, &w_scales::<K>(w), a);
    }
    store(out, acc);
}

/// `out[t]` = [`dot8`] of `group` with activation row `t` (bytes
/// `t * act_row..(t + 1) * act_row` of `acts`; a missing row counts as
/// empty), bit for bit: each block is decoded once per pass of up to
/// [`TOKENS`] rows, and each row's sums add their terms in block order.
///
/// # Safety
///
/// As [`Mul8::dot4`].
#[inline(always)]
unsafe fn dot8n<K: Legacy, M: Mul8>(
    group: &[u8],
    acts: &[u8],
    act_row: usize,
    out: &mut [[f32; ROWS]],
) {
    many_rows(
        group,
        ROWS * K::BLOCK,
        acts,
        act_row,
        out,
        |w, b, rows, acc| {
            let q = K::values(w);
            let scales = w_scales::<K>(w);
            by_rows(b, rows, acc, |acc, a: &K::A| {
                // SAFETY: the caller's contract.
                let isum = unsafe { isums::<M>(&q, a.qs()) };
                add_terms::<K>(acc, isum, &scales, a)
            });
        },
    );
}

/// Running sums of a group's eight rows (rows 0..4, rows 4..8).
pub(super) type Acc = [float32x4_t; 2];

/// The skeleton of the many-row kernels: `out[t]` is the sum of activation
/// row `t` (bytes `t * act_row..(t + 1) * act_row` of `acts`; a missing
/// row counts as empty), from zero; for each pass of up to [`TOKENS`] rows
/// and each block `w` of the group (`step` bytes) that the pass's longest
/// row reaches, `block(w, b, rows, acc)` adds block `b` of the rows that
/// have it (see [`by_rows`], [`by_pairs`]). Each block is decoded once
/// per pass, and each row's sums add their terms in block order.
#[inline(always)]
pub(super) fn many_rows<A: Block>(
    group: &[u8],
    step: usize,
    acts: &[u8],
    act_row: usize,
    out: &mut [[f32; ROWS]],
    mut block: impl FnMut(&[u8], usize, &[&[A]; TOKENS], &mut [Acc; TOKENS]),
) {
    for (c, chunk) in out.chunks_mut(TOKENS).enumerate() {
        let rows: [&[A]; TOKENS] = pass_rows(acts, act_row, c, chunk.len());
        let longest = rows.iter().map(|r| r.len()).max().unwrap_or(0);
        let n = (group.len() / step).min(longest);
        // SAFETY: NEON is part of every aarch64 target.
        let mut acc = unsafe { [[vdupq_n_f32(0.0); 2]; TOKENS] };
        for (b, w) in group.chunks_exact(step).take(n).enumerate() {
            block(w, b, &rows, &mut acc);
        }
        for (o, a) in chunk.iter_mut().zip(acc) {
            store(o, a);
        }
    }
}

/// `acc[t] = term(acc[t], a)` for block `a` (number `b`) of each row `t`
/// of a pass that has it (rows shorter than the group stop where `dot8`
/// would; rows past the pass are empty).
#[inline(always)]
pub(super) fn by_rows<A>(
    b: usize,
    rows: &[&[A]; TOKENS],
    acc: &mut [Acc; TOKENS],
    term: impl Fn(Acc, &A) -> Acc,
) {
    for (acc, r) in acc.iter_mut().zip(rows) {
        if let Some(a) = r.get(b) {
            *acc = term(*acc, a);
        }
    }
}

/// [`by_rows`] two rows at a time, for `smmla`: `isums(x0, x1)` gives the
/// eight weight rows' exact integer sums with the blocks of both (`[rows
/// 0..4, rows 4..8]` each), `finish(acc, isum, a)` adds a row's term. A row
/// without block `b` adds nothing; its partner's block stands in for its
/// own.
#[inline(always)]
pub(super) fn by_pairs<A>(
    b: usize,
    rows: &[&[A]; TOKENS],
    acc: &mut [Acc; TOKENS],
    isums: impl Fn(&A, &A) -> [[int32x4_t; 2]; 2],
    finish: impl Fn(Acc, [int32x4_t; 2], &A) -> Acc,
) {
    for (accs, pair) in acc.chunks_exact_mut(2).zip(rows.chunks_exact(2)) {
        let (a0, a1) = (pair[0].get(b), pair[1].get(b));
        let Some(first) = a0.or(a1) else {
            continue;
        };
        let [s0, s1] = isums(a0.unwrap_or(first), a1.unwrap_or(first));
        if let Some(a) = a0 {
            accs[0] = finish(accs[0], s0, a);
        }
        if let Some(a) = a1 {
            accs[1] = finish(accs[1], s1, a);
        }
    }
}

/// The weights of a decoded block as `smmla`'s left operands: `w[j][p]`
/// holds values `8j..8j + 8` of rows `2p` and `2p + 1`.
#[inline(always)]
fn mmla_weights(q: &Values) -> [[int8x16_t; 4]; 4] {
    std::array::from_fn(|j| {
        let (a, b) = (&q[2 * j], &q[2 * j + 1]);
        // SAFETY: NEON is part of every aarch64 target.
        unsafe {
            let zip = |x: int8x16_t, y: int8x16_t, second: bool| {
                let (x, y) = (vreinterpretq_s32_s8(x), vreinterpretq_s32_s8(y));
                vreinterpretq_s8_s32(if second {
                    vzip2q_s32(x, y)
                } else {
                    vzip1q_s32(x, y)
                })
            };
            [
                zip(a[0], b[0], false),
                zip(a[0], b[0], true),
                zip(a[1], b[1], false),
                zip(a[1], b[1], true),
            ]
        }
    })
}

/// The exact integer sums of the eight rows with two activation blocks'
/// values (`x0`, `x1`): `[rows 0..4, rows 4..8]` for each.
///
/// # Safety
///
/// The CPU must support FEAT_I8MM.
#[inline(always)]
unsafe fn isums_pair(w: &[[int8x16_t; 4]; 4], x0: &[i8; 32], x1: &[i8; 32]) -> [[int32x4_t; 2]; 2] {
    // SAFETY: NEON is part of every aarch64 target; FEAT_I8MM is the
    // caller's contract; the loads read 8 bytes at `8j <= 24` of 32.
    unsafe {
        let mut acc = [vdupq_n_s32(0); 4];
        for (j, w) in w.iter().enumerate() {
            let x = vcombine_s8(
                vld1_s8(x0.as_ptr().add(8 * j)),
                vld1_s8(x1.as_ptr().add(8 * j)),
            );
            for p in 0..4 {
                acc[p] = smmla(acc[p], w[p], x);
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
/// integers, the same f32 operations, so the same bits).
///
/// # Safety
///
/// The CPU must support FEAT_I8MM.
#[inline(always)]
unsafe fn dot8n_mmla<K: Legacy>(
    group: &[u8],
    acts: &[u8],
    act_row: usize,
    out: &mut [[f32; ROWS]],
) {
    many_rows(
        group,
        ROWS * K::BLOCK,
        acts,
        act_row,
        out,
        |w, b, rows, acc| {
            let q = mmla_weights(&K::values(w));
            let scales = w_scales::<K>(w);
            // SAFETY: the caller's contract.
            let isums = |x0: &K::A, x1: &K::A| unsafe { isums_pair(&q, x0.qs(), x1.qs()) };
            let finish = |acc, isum, a: &K::A| add_terms::<K>(acc, isum, &scales, a);
            by_pairs(b, rows, acc, isums, finish);
        },
    );
}

/// Safe entry points of one set: each runs a generic kernel inside a
/// function compiled for the set's features.
macro_rules! entries {
    ($set:ident, $features:literal, $(($name:ident, $kernel:ident::<$($ty:ty),*>, $sig:ident)),* $(,)?) => {
        mod $set {
            use super::*;
            $(
                entries!(@one $name, $kernel::<$($ty),*>, $features, $sig);
            )*
        }
    };
    (@one $name:ident, $kernel:ident::<$($ty:ty),*>, $features:literal, Dot8) => {
        pub(super) fn $name(group: &[u8], act: &[u8], out: &mut [f32; ROWS]) {
            #[target_feature(enable = $features)]
            unsafe fn k(group: &[u8], act: &[u8], out: &mut [f32; ROWS]) {
                // SAFETY: compiled for, and (see below) run on, a CPU with
                // the set's features.
                unsafe { $kernel::<$($ty),*>(group, act, out) }
            }
            // SAFETY: `kernel8` hands this function out only for its set,
            // which `crate::dispatch` hands out only after detecting the
            // set's features.
            unsafe { k(group, act, out) }
        }
    };
    (@one $name:ident, $kernel:ident::<$($ty:ty),*>, $features:literal, Dot8N) => {
        pub(super) fn $name(group: &[u8], acts: &[u8], act_row: usize, out: &mut [[f32; ROWS]]) {
            #[target_feature(enable = $features)]
            unsafe fn k(group: &[u8], acts: &[u8], act_row: usize, out: &mut [[f32; ROWS]]) {
                // SAFETY: compiled for, and (see below) run on, a CPU with
                // the set's features.
                unsafe { $kernel::<$($ty),*>(group, acts, act_row, out) }
            }
            // SAFETY: `kernel8n` hands this function out only for its set,
            // which `crate::dispatch` hands out only after detecting the
            // set's features.
            unsafe { k(group, acts, act_row, out) }
        }
    };
}

pub(super) use entries;

entries!(
    neon,
    "neon",
    (dot8_q4_0, dot8::<Q4_0, Neon>, Dot8),
    (dot8_q4_1, dot8::<Q4_1, Neon>, Dot8),
    (dot8_q5_0, dot8::<Q5_0, Neon>, Dot8),
    (dot8_q5_1, dot8::<Q5_1, Neon>, Dot8),
    (dot8_q8_0, dot8::<Q8_0, Neon>, Dot8),
    (dot8n_q4_0, dot8n::<Q4_0, Neon>, Dot8N),
    (dot8n_q4_1, dot8n::<Q4_1, Neon>, Dot8N),
    (dot8n_q5_0, dot8n::<Q5_0, Neon>, Dot8N),
    (dot8n_q5_1, dot8n::<Q5_1, Neon>, Dot8N),
    (dot8n_q8_0, dot8n::<Q8_0, Neon>, Dot8N),
);

entries!(
    dotprod,
    "neon,dotprod",
    (dot8_q4_0, dot8::<Q4_0, Sdot>, Dot8),
    (dot8_q4_1, dot8::<Q4_1, Sdot>, Dot8),
    (dot8_q5_0, dot8::<Q5_0, Sdot>, Dot8),
    (dot8_q5_1, dot8::<Q5_1, Sdot>, Dot8),
    (dot8_q8_0, dot8::<Q8_0, Sdot>, Dot8),
    (dot8n_q4_0, dot8n::<Q4_0, Sdot>, Dot8N),
    (dot8n_q4_1, dot8n::<Q4_1, Sdot>, Dot8N),
    (dot8n_q5_0, dot8n::<Q5_0, Sdot>, Dot8N),
    (dot8n_q5_1, dot8n::<Q5_1, Sdot>, Dot8N),
    (dot8n_q8_0, dot8n::<Q8_0, Sdot>, Dot8N),
);

entries!(
    i8mm,
    "neon,dotprod,i8mm",
    (dot8n_q4_0, dot8n_mmla::<Q4_0>, Dot8N),
    (dot8n_q4_1, dot8n_mmla::<Q4_1>, Dot8N),
    (dot8n_q5_0, dot8n_mmla::<Q5_0>, Dot8N),
    (dot8n_q5_1, dot8n_mmla::<Q5_1>, Dot8N),
    (dot8n_q8_0, dot8n_mmla::<Q8_0>, Dot8N),
);
