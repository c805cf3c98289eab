//! One weight row against one activation row (`VecDotKernel::dot`) for
//! every block format, NEON and dotprod: the scalar reference's block loop
//! (`crate::dot::sum_blocks`) and f32 terms, with each block's exact
//! integer dot product computed sixteen bytes at a time by the set's
//! [`Mul8`] (`sdot`, or NEON's widening multiplies).
//!
//! Per 32 values: Q4_0 and Q4_1 two `sdot` (after an `and` and a shift
//! unpack the nibbles), Q5_0/Q5_1 two more `tst`/`and`/`orr` for the fifth
//! bits, Q8_0 two `sdot`; the k-quants one `sdot` per 16 values and one
//! integer `mla` per group scale; the per-block f32 term is the scalar
//! reference's expression. No overflow for any bytes: every weight value
//! fits in an i8 after its offset (Q4: -8..=15, Q5: -16..=31, K: -32..=31),
//! and the bounds of `crate::dot` hold for the sums.

use std::arch::aarch64::*;

use super::{load_at, load_i8_at, Mul8, Neon, Sdot};
use crate::dispatch::KernelSet;
use crate::dot::float::{add_chunk, fold_lanes, LANES};
use crate::dot::k_quants::{q6_k_term, with_min};
use crate::dot::sum_blocks;
use crate::quant::float::f16_le;
use crate::quant::q4_k::scale_min_k4;
use crate::quant::{
    BlockIq4Nl, BlockIq4Xs, BlockMxfp4, BlockQ2K, BlockQ3K, BlockQ4K, BlockQ4_0, BlockQ4_1,
    BlockQ5K, BlockQ5_0, BlockQ5_1, BlockQ6K, BlockQ8K, BlockQ8_0, BlockQ8_1, QK,
};
use crate::GgmlType;

/// A one-row kernel, as `VecDotKernel::dot`.
type DotFn = fn(&[u8], &[u8]) -> f32;

/// `set`'s own one-row kernel for `w`, if it has one (not the slower
/// set's).
pub(super) fn kernel(set: KernelSet, w: GgmlType) -> Option<DotFn> {
    use GgmlType::*;
    Some(match (set, w) {
        (KernelSet::Neon, F32) => float_f32 as DotFn,
        (KernelSet::Neon, F16) => float_f16,
        (KernelSet::Neon, Bf16) => float_bf16,
        (KernelSet::Neon, Q4_0) => neon::q4_0,
        (KernelSet::Neon, Q4_1) => neon::q4_1,
        (KernelSet::Neon, Q5_0) => neon::q5_0,
        (KernelSet::Neon, Q5_1) => neon::q5_1,
        (KernelSet::Neon, Q8_0) => neon::q8_0,
        (KernelSet::Neon, Q2K) => neon::q2_k,
        (KernelSet::Neon, Q3K) => neon::q3_k,
        (KernelSet::Neon, Q4K) => neon::q4_k,
        (KernelSet::Neon, Q5K) => neon::q5_k,
        (KernelSet::Neon, Q6K) => neon::q6_k,
        (KernelSet::Neon, Mxfp4) => neon::mxfp4,
        (KernelSet::Neon, Iq4Nl) => neon::iq4_nl,
        (KernelSet::Neon, Iq4Xs) => neon::iq4_xs,
        (KernelSet::Dotprod, Q4_0) => dotprod::q4_0,
        (KernelSet::Dotprod, Q4_1) => dotprod::q4_1,
        (KernelSet::Dotprod, Q5_0) => dotprod::q5_0,
        (KernelSet::Dotprod, Q5_1) => dotprod::q5_1,
        (KernelSet::Dotprod, Q8_0) => dotprod::q8_0,
        (KernelSet::Dotprod, Q2K) => dotprod::q2_k,
        (KernelSet::Dotprod, Q3K) => dotprod::q3_k,
        (KernelSet::Dotprod, Q4K) => dotprod::q4_k,
        (KernelSet::Dotprod, Q5K) => dotprod::q5_k,
        (KernelSet::Dotprod, Q6K) => dotprod::q6_k,
        (KernelSet::Dotprod, Mxfp4) => dotprod::mxfp4,
        (KernelSet::Dotprod, Iq4Nl) => dotprod::iq4_nl,
        (KernelSet::Dotprod, Iq4Xs) => dotprod::iq4_xs,
        _ => return None,
    })
}

/// Safe entry points of one set: each runs the generic kernel with the
/// set's [`Mul8`] inside a function compiled for the set's features.
macro_rules! entries {
    ($set:ident, $mul:ty, $features:literal, $($name:ident),*) => {
        mod $set {
            use super::*;
            $(
                pub(super) fn $name(w: &[u8], a: &[u8]) -> f32 {
                    #[target_feature(enable = $features)]
                    unsafe fn k(w: &[u8], a: &[u8]) -> f32 {
                        // SAFETY: compiled for, and (see below) run on, a
                        // CPU with the set's features.
                        unsafe { super::$name::<$mul>(w, a) }
                    }
                    // SAFETY: `kernel` hands this function out only for
                    // its set, which `crate::dispatch` hands out only after
                    // detecting the set's features.
                    unsafe { k(w, a) }
                }
            )*
        }
    };
}

entries!(
    neon, Neon, "neon", q4_0, q4_1, q5_0, q5_1, q8_0, q2_k, q3_k, q4_k, q5_k, q6_k, mxfp4, iq4_nl,
    iq4_xs
);
entries!(
    dotprod,
    Sdot,
    "neon,dotprod",
    q4_0,
    q4_1,
    q5_0,
    q5_1,
    q8_0,
    q2_k,
    q3_k,
    q4_k,
    q5_k,
    q6_k,
    mxfp4,
    iq4_nl,
    iq4_xs
);

/// Float weights: the scalar reference's 32 lanes (`crate::dot::float`)
/// are eight vectors of four, lane `i % 32` in vector `(i % 32) / 4`; each
/// full chunk of 32 values is one `fmul` and one `fadd` per vector. The
/// last partial chunk and the fold `lane[i] += lane[i + w]` (w = 16, 8, 4,
/// 2, 1) are the reference's scalar code on the stored lanes.
trait FloatWeights {
    /// Bytes per value.
    const SIZE: usize;
    /// Four values from the front of `b` (at least `4 * SIZE` bytes).
    fn load4(b: &[u8]) -> float32x4_t;
    /// One value, as the scalar reference decodes it.
    fn decode(b: &[u8]) -> f32;
}

struct F32;
impl FloatWeights for F32 {
    const SIZE: usize = 4;
    #[inline(always)]
    fn load4(b: &[u8]) -> float32x4_t {
        // SAFETY: NEON is part of every aarch64 target.
        unsafe { vreinterpretq_f32_u8(load_at(b)) }
    }
    fn decode(b: &[u8]) -> f32 {
        f32::from_le_bytes([b[0], b[1], b[2], b[3]])
    }
}

struct F16;
impl FloatWeights for F16 {
    const SIZE: usize = 2;
    #[inline(always)]
    fn load4(b: &[u8]) -> float32x4_t {
        let b = &b[..8];
        // SAFETY: `b` is 8 readable bytes; NEON is part of every aarch64
        // target.
        super::f16x4(unsafe { vld1_u16(b.as_ptr().cast()) })
    }
    fn decode(b: &[u8]) -> f32 {
        f16_le([b[0], b[1]])
    }
}

struct Bf16;
impl FloatWeights for Bf16 {
    const SIZE: usize = 2;
    #[inline(always)]
    fn load4(b: &[u8]) -> float32x4_t {
        let b = &b[..8];
        // SAFETY: `b` is 8 readable bytes; NEON is part of every aarch64
        // target. A bf16 is the top half of an f32.
        unsafe { vreinterpretq_f32_u32(vshll_n_u16::<16>(vld1_u16(b.as_ptr().cast()))) }
    }
    fn decode(b: &[u8]) -> f32 {
        f32::from_bits(u32::from(u16::from_le_bytes([b[0], b[1]])) << 16)
    }
}

/// `crate::dot::float`'s dot product, vectorized as [`FloatWeights`] says.
#[inline(always)]
fn float_dot<W: FloatWeights>(w: &[u8], a: &[u8]) -> f32 {
    let n = (w.len() / W::SIZE).min(a.len() / 4);
    let (w, a) = (&w[..n * W::SIZE], &a[..n * 4]);
    let (w_chunks, a_chunks) = (w.chunks_exact(W::SIZE * LANES), a.chunks_exact(4 * LANES));
    let (w_tail, a_tail) = (w_chunks.remainder(), a_chunks.remainder());
    // SAFETY: NEON is part of every aarch64 target.
    let mut acc = unsafe { [vdupq_n_f32(0.0); LANES / 4] };
    for (wc, ac) in w_chunks.zip(a_chunks) {
        for (v, acc) in acc.iter_mut().enumerate() {
            let x = F32::load4(&ac[16 * v..]);
            let wv = W::load4(&wc[4 * W::SIZE * v..]);
            // SAFETY: NEON is part of every aarch64 target.
            *acc = unsafe { vaddq_f32(*acc, vmulq_f32(wv, x)) };
        }
    }
    let mut lanes = [0f32; LANES];
    for (l, v) in lanes.chunks_exact_mut(4).zip(acc) {
        // SAFETY: `l` is 4 writable f32; `st1` has no alignment requirement.
        unsafe { vst1q_f32(l.as_mut_ptr(), v) };
    }
    add_chunk(&mut lanes, (w_tail, W::SIZE), a_tail, W::decode);
    fold_lanes(lanes)
}

fn float_f32(w: &[u8], a: &[u8]) -> f32 {
    float_dot::<F32>(w, a)
}

fn float_f16(w: &[u8], a: &[u8]) -> f32 {
    float_dot::<F16>(w, a)
}

fn float_bf16(w: &[u8], a: &[u8]) -> f32 {
    float_dot::<Bf16>(w, a)
}

/// The low and high nibbles of 16 bytes: values `j` and `j + 16` of a
/// 32-value block.
#[inline(always)]
fn nibbles(qs: &[u8; QK / 2]) -> (uint8x16_t, uint8x16_t) {
    let q = load_at(qs);
    // SAFETY: NEON is part of every aarch64 target.
    unsafe { (vandq_u8(q, vdupq_n_u8(0x0f)), vshrq_n_u8::<4>(q)) }
}

/// `0x10` in the bytes of values `j` and `j + 16` whose fifth bit (bit `j`,
/// `j + 16` of the little-endian `qh`) is set, 0 elsewhere.
#[inline(always)]
fn fifth_bits(qh: [u8; 4]) -> (uint8x16_t, uint8x16_t) {
    const BITS: [u8; 16] = [1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128];
    // SAFETY: NEON is part of every aarch64 target.
    unsafe {
        let bits = super::load_u8(&BITS);
        let sixteen = vdupq_n_u8(0x10);
        let lo = vcombine_u8(vdup_n_u8(qh[0]), vdup_n_u8(qh[1]));
        let hi = vcombine_u8(vdup_n_u8(qh[2]), vdup_n_u8(qh[3]));
        (
            vandq_u8(vtstq_u8(lo, bits), sixteen),
            vandq_u8(vtstq_u8(hi, bits), sixteen),
        )
    }
}

/// The exact integer dot product of 32 weight values (`lo`: values 0..16,
/// `hi`: 16..32, as unsigned bytes before `offset` is taken off) with 32
/// activation values.
///
/// # Safety
///
/// As [`Mul8::dot4`].
#[inline(always)]
unsafe fn block_dot<M: Mul8>(lo: uint8x16_t, hi: uint8x16_t, offset: u8, x: &[i8; QK]) -> i32 {
    // SAFETY: NEON is part of every aarch64 target; the rest is the
    // caller's contract.
    unsafe {
        let off = vdupq_n_u8(offset);
        let w0 = vreinterpretq_s8_u8(vsubq_u8(lo, off));
        let w1 = vreinterpretq_s8_u8(vsubq_u8(hi, off));
        let acc = M::dot4(vdupq_n_s32(0), w0, load_i8_at(&x[..16]));
        vaddvq_s32(M::dot4(acc, w1, load_i8_at(&x[16..])))
    }
}

/// Q4_0 x Q8_0, as `crate::dot::legacy::q4_0_q8_0`.
///
/// # Safety
///
/// As [`Mul8::dot4`].
#[inline(always)]
unsafe fn q4_0<M: Mul8>(w: &[u8], a: &[u8]) -> f32 {
    sum_blocks(w, a, |wb: &BlockQ4_0, ab: &BlockQ8_0| {
        let (lo, hi) = nibbles(&wb.qs);
        // SAFETY: the caller's contract.
        let isum = unsafe { block_dot::<M>(lo, hi, 8, &ab.qs) };
        (wb.d() * ab.d()) * isum as f32
    })
}

/// MXFP4 x Q8_0, as `crate::dot::legacy::mxfp4_q8_0`: the codes looked
/// up in `KVALUES` (one `tbl` per 16), then Q4_0's exact sum and term.
///
/// # Safety
///
/// As [`Mul8::dot4`].
#[inline(always)]
unsafe fn mxfp4<M: Mul8>(w: &[u8], a: &[u8]) -> f32 {
    // SAFETY: NEON is part of every aarch64 target.
    let table = unsafe { vreinterpretq_u8_s8(super::load_i8(&crate::quant::mxfp4::KVALUES)) };
    sum_blocks(w, a, |wb: &BlockMxfp4, ab: &BlockQ8_0| {
        let (lo, hi) = nibbles(&wb.qs);
        // SAFETY: NEON is part of every aarch64 target; the rest is the
        // caller's contract.
        let isum = unsafe {
            let (lo, hi) = (vqtbl1q_u8(table, lo), vqtbl1q_u8(table, hi));
            block_dot::<M>(lo, hi, 0, &ab.qs)
        };
        (wb.d() * ab.d()) * isum as f32
    })
}

/// One run of sixteen IQ4 code bytes against its 32 activations: the codes
/// looked up in `KVALUES_IQ4NL` (one `tbl` per 16), then the exact sum.
/// (Every product fits: `|KVALUES_IQ4NL| <= 127`, so `|w * x| <= 127 * 128`.)
///
/// # Safety
///
/// As [`Mul8::dot4`].
#[inline(always)]
unsafe fn iq4_run<M: Mul8>(table: uint8x16_t, qs: &[u8; QK / 2], x: &[i8; QK]) -> i32 {
    let (lo, hi) = nibbles(qs);
    // SAFETY: NEON is part of every aarch64 target; the rest is the
    // caller's contract.
    unsafe { block_dot::<M>(vqtbl1q_u8(table, lo), vqtbl1q_u8(table, hi), 0, x) }
}

/// The IQ4 table as NEON bytes.
#[inline(always)]
fn iq4_table() -> uint8x16_t {
    // SAFETY: NEON is part of every aarch64 target.
    unsafe { vreinterpretq_u8_s8(super::load_i8(&crate::quant::iq4::KVALUES_IQ4NL)) }
}

/// IQ4_NL x Q8_0, as `crate::dot::iq4::iq4_nl_q8_0`.
///
/// # Safety
///
/// As [`Mul8::dot4`].
#[inline(always)]
unsafe fn iq4_nl<M: Mul8>(w: &[u8], a: &[u8]) -> f32 {
    let table = iq4_table();
    sum_blocks(w, a, |wb: &BlockIq4Nl, ab: &BlockQ8_0| {
        // SAFETY: the caller's contract.
        let isum = unsafe { iq4_run::<M>(table, &wb.qs, &ab.qs) };
        (wb.d() * ab.d()) * isum as f32
    })
}

/// IQ4_XS x Q8_K, as `crate::dot::iq4::iq4_xs_q8_k`: each run's exact sum
/// times its scale, one term per super-block.
///
/// # Safety
///
/// As [`Mul8::dot4`].
#[inline(always)]
unsafe fn iq4_xs<M: Mul8>(w: &[u8], a: &[u8]) -> f32 {
    let table = iq4_table();
    sum_blocks(w, a, |wb: &BlockIq4Xs, ab: &BlockQ8K| {
        let mut isum = 0i32;
        for r in 0..8 {
            let qs: &[u8; QK / 2] = wb.qs[16 * r..16 * r + 16].try_into().expect("16 bytes");
            let x: &[i8; QK] = ab.qs[32 * r..32 * r + 32].try_into().expect("32 values");
            // SAFETY: the caller's contract.
            isum += wb.run_scale(r) * unsafe { iq4_run::<M>(table, qs, x) };
        }
        (wb.d() * ab.d()) * isum as f32
    })
}

/// Q4_1 x Q8_1, as `crate::dot::legacy::q4_1_q8_1`.
///
/// # Safety
///
/// As [`Mul8::dot4`].
#[inline(always)]
unsafe fn q4_1<M: Mul8>(w: &[u8], a: &[u8]) -> f32 {
    sum_blocks(w, a, |wb: &BlockQ4_1, ab: &BlockQ8_1| {
        let (lo, hi) = nibbles(&wb.qs);
        // SAFETY: the caller's contract.
        let isum = unsafe { block_dot::<M>(lo, hi, 0, &ab.qs) };
        (wb.d() * ab.d()) * isum as f32 + wb.m() * ab.s()
    })
}

/// The 5-bit values of a Q5_0/Q5_1 block, values 0..16 and 16..32.
#[inline(always)]
fn five_bits(qs: &[u8; QK / 2], qh: [u8; 4]) -> (uint8x16_t, uint8x16_t) {
    let (lo, hi) = nibbles(qs);
    let (h0, h1) = fifth_bits(qh);
    // SAFETY: NEON is part of every aarch64 target.
    unsafe { (vorrq_u8(lo, h0), vorrq_u8(hi, h1)) }
}

/// Q5_0 x Q8_0, as `crate::dot::legacy::q5_0_q8_0`.
///
/// # Safety
///
/// As [`Mul8::dot4`].
#[inline(always)]
unsafe fn q5_0<M: Mul8>(w: &[u8], a: &[u8]) -> f32 {
    sum_blocks(w, a, |wb: &BlockQ5_0, ab: &BlockQ8_0| {
        let (lo, hi) = five_bits(&wb.qs, wb.qh);
        // SAFETY: the caller's contract.
        let isum = unsafe { block_dot::<M>(lo, hi, 16, &ab.qs) };
        (wb.d() * ab.d()) * isum as f32
    })
}

/// Q5_1 x Q8_1, as `crate::dot::legacy::q5_1_q8_1`.
///
/// # Safety
///
/// As [`Mul8::dot4`].
#[inline(always)]
unsafe fn q5_1<M: Mul8>(w: &[u8], a: &[u8]) -> f32 {
    sum_blocks(w, a, |wb: &BlockQ5_1, ab: &BlockQ8_1| {
        let (lo, hi) = five_bits(&wb.qs, wb.qh);
        // SAFETY: the caller's contract.
        let isum = unsafe { block_dot::<M>(lo, hi, 0, &ab.qs) };
        (wb.d() * ab.d()) * isum as f32 + wb.m() * ab.s()
    })
}

/// Q8_0 x Q8_0, as `crate::dot::legacy::q8_0_q8_0`.
///
/// # Safety
///
/// As [`Mul8::dot4`].
#[inline(always)]
unsafe fn q8_0<M: Mul8>(w: &[u8], a: &[u8]) -> f32 {
    sum_blocks(w, a, |wb: &BlockQ8_0, ab: &BlockQ8_0| {
        // SAFETY: NEON is part of every aarch64 target; the rest is the
        // caller's contract.
        let isum = unsafe {
            let acc = M::dot4(
                vdupq_n_s32(0),
                load_i8_at(&wb.qs[..16]),
                load_i8_at(&ab.qs[..16]),
            );
            vaddvq_s32(M::dot4(
                acc,
                load_i8_at(&wb.qs[16..]),
                load_i8_at(&ab.qs[16..]),
            ))
        };
        (wb.d() * ab.d()) * isum as f32
    })
}

/// `acc + sc * (q . x)` lane by lane, for 16 weight values `q` (i8) and
/// the 16 activation values at `x`.
///
/// # Safety
///
/// As [`Mul8::dot4`].
#[inline(always)]
unsafe fn scaled<M: Mul8>(acc: int32x4_t, q: int8x16_t, x: &[i8], sc: i32) -> int32x4_t {
    // SAFETY: NEON is part of every aarch64 target; the rest is the
    // caller's contract.
    unsafe {
        let part = M::dot4(vdupq_n_s32(0), q, load_i8_at(x));
        vmlaq_s32(acc, part, vdupq_n_s32(sc))
    }
}

/// `(bytes >> shift) & mask` for sixteen bytes (`shift` in 0..8).
#[inline(always)]
fn bits(bytes: uint8x16_t, shift: usize, mask: u8) -> uint8x16_t {
    // SAFETY: NEON is part of every aarch64 target.
    unsafe {
        vandq_u8(
            vshlq_u8(bytes, vdupq_n_s8(-(shift as i8))),
            vdupq_n_u8(mask),
        )
    }
}

/// Q2_K x Q8_K, as `crate::dot::k_quants::q2_k_q8_k`.
///
/// # Safety
///
/// As [`Mul8::dot4`].
#[inline(always)]
unsafe fn q2_k<M: Mul8>(w: &[u8], a: &[u8]) -> f32 {
    sum_blocks(w, a, |wb: &BlockQ2K, ab: &BlockQ8K| {
        // SAFETY: NEON is part of every aarch64 target.
        let mut acc = unsafe { vdupq_n_s32(0) };
        let mut msum = 0i32;
        for (g, &sc) in wb.scales.iter().enumerate() {
            let shift = 2 * ((g / 2) % 4);
            let q = bits(load_at(&wb.qs[32 * (g / 8) + 16 * (g % 2)..]), shift, 3);
            let x = &ab.qs[16 * g..];
            // SAFETY: the caller's contract.
            acc = unsafe { scaled::<M>(acc, vreinterpretq_s8_u8(q), x, i32::from(sc & 0x0f)) };
            msum += i32::from(sc >> 4) * i32::from(ab.bsum(g));
        }
        // SAFETY: NEON is part of every aarch64 target.
        let isum = unsafe { vaddvq_s32(acc) };
        with_min(ab.d(), wb.d, wb.dmin, isum, msum)
    })
}

/// Q3_K x Q8_K, as `crate::dot::k_quants::q3_k_q8_k`.
///
/// # Safety
///
/// As [`Mul8::dot4`].
#[inline(always)]
unsafe fn q3_k<M: Mul8>(w: &[u8], a: &[u8]) -> f32 {
    sum_blocks(w, a, |wb: &BlockQ3K, ab: &BlockQ8K| {
        // SAFETY: NEON is part of every aarch64 target.
        let mut acc = unsafe { vdupq_n_s32(0) };
        for (g, &sc) in wb.scales().iter().enumerate() {
            let k = (g / 2) % 4;
            let high = 1u8 << (4 * (g / 8) + k);
            let lo = 16 * (g % 2);
            let low = bits(load_at(&wb.qs[32 * (g / 8) + lo..]), 2 * k, 3);
            // SAFETY: NEON is part of every aarch64 target; the rest is
            // the caller's contract.
            acc = unsafe {
                // low - 4, plus 4 where the hmask bit is set.
                let set = vtstq_u8(load_at(&wb.hmask[lo..]), vdupq_n_u8(high));
                let q = vsubq_u8(vorrq_u8(low, vandq_u8(set, vdupq_n_u8(4))), vdupq_n_u8(4));
                scaled::<M>(acc, vreinterpretq_s8_u8(q), &ab.qs[16 * g..], i32::from(sc))
            };
        }
        // SAFETY: NEON is part of every aarch64 target.
        let isum = unsafe { vaddvq_s32(acc) };
        (f16_le(wb.d) * ab.d()) * isum as f32
    })
}

/// `msum` of Q4_K and Q5_K: each group's min times its activations' sum.
#[inline(always)]
fn k4_msum(scales: &[u8; 12], ab: &BlockQ8K) -> i32 {
    (0..8)
        .map(|g| {
            let (_, m) = scale_min_k4(g, scales);
            let bsum = i32::from(ab.bsum(2 * g)) + i32::from(ab.bsum(2 * g + 1));
            i32::from(m) * bsum
        })
        .sum()
}

/// `isum` of Q4_K/Q5_K: group `g`'s 32 values, as two runs of 16 bytes,
/// from `q(g)`, times its scale.
///
/// # Safety
///
/// As [`Mul8::dot4`].
#[inline(always)]
unsafe fn k4_isum<M: Mul8>(
    scales: &[u8; 12],
    ab: &BlockQ8K,
    q: impl Fn(usize) -> [uint8x16_t; 2],
) -> i32 {
    // SAFETY: NEON is part of every aarch64 target; the rest is the
    // caller's contract.
    unsafe {
        let mut acc = vdupq_n_s32(0);
        for g in 0..8 {
            let (sc, _) = scale_min_k4(g, scales);
            let [q0, q1] = q(g);
            let x = &ab.qs[32 * g..];
            let part = M::dot4(vdupq_n_s32(0), vreinterpretq_s8_u8(q0), load_i8_at(x));
            let part = M::dot4(part, vreinterpretq_s8_u8(q1), load_i8_at(&x[16..]));
            acc = vmlaq_s32(acc, part, vdupq_n_s32(i32::from(sc)));
        }
        vaddvq_s32(acc)
    }
}

/// Q4_K x Q8_K, as `crate::dot::k_quants::q4_k_q8_k`.
///
/// # Safety
///
/// As [`Mul8::dot4`].
#[inline(always)]
unsafe fn q4_k<M: Mul8>(w: &[u8], a: &[u8]) -> f32 {
    sum_blocks(w, a, |wb: &BlockQ4K, ab: &BlockQ8K| {
        let q = |g: usize| {
            let bytes = &wb.qs[32 * (g / 2)..];
            let shift = 4 * (g % 2);
            [
                bits(load_at(bytes), shift, 0x0f),
                bits(load_at(&bytes[16..]), shift, 0x0f),
            ]
        };
        // SAFETY: the caller's contract.
        let isum = unsafe { k4_isum::<M>(&wb.scales, ab, q) };
        with_min(ab.d(), wb.d, wb.dmin, isum, k4_msum(&wb.scales, ab))
    })
}

/// Q5_K x Q8_K, as `crate::dot::k_quants::q5_k_q8_k`.
///
/// # Safety
///
/// As [`Mul8::dot4`].
#[inline(always)]
unsafe fn q5_k<M: Mul8>(w: &[u8], a: &[u8]) -> f32 {
    sum_blocks(w, a, |wb: &BlockQ5K, ab: &BlockQ8K| {
        let q = |g: usize| {
            let bytes = &wb.qs[32 * (g / 2)..];
            let shift = 4 * (g % 2);
            // SAFETY: NEON is part of every aarch64 target.
            unsafe {
                let high = vdupq_n_u8(1 << g);
                let sixteen = vdupq_n_u8(16);
                let h0 = vandq_u8(vtstq_u8(load_at(&wb.qh), high), sixteen);
                let h1 = vandq_u8(vtstq_u8(load_at(&wb.qh[16..]), high), sixteen);
                [
                    vorrq_u8(bits(load_at(bytes), shift, 0x0f), h0),
                    vorrq_u8(bits(load_at(&bytes[16..]), shift, 0x0f), h1),
                ]
            }
        };
        // SAFETY: the caller's contract.
        let isum = unsafe { k4_isum::<M>(&wb.scales, ab, q) };
        with_min(ab.d(), wb.d, wb.dmin, isum, k4_msum(&wb.scales, ab))
    })
}

/// Q6_K x Q8_K, as `crate::dot::k_quants::q6_k_q8_k`.
///
/// # Safety
///
/// As [`Mul8::dot4`].
#[inline(always)]
unsafe fn q6_k<M: Mul8>(w: &[u8], a: &[u8]) -> f32 {
    sum_blocks(w, a, |wb: &BlockQ6K, ab: &BlockQ8K| {
        // SAFETY: NEON is part of every aarch64 target; the rest is the
        // caller's contract.
        let isum = unsafe {
            let mut acc = vdupq_n_s32(0);
            // Run r of 32 values: half h = r / 4, k = r % 4 (see the
            // reference).
            for r in 0..8 {
                let (h, k) = (r / 4, r % 4);
                let ql = &wb.ql[64 * h + 32 * (k % 2)..];
                let qh = &wb.qh[32 * h..];
                for half in 0..2 {
                    let low = bits(load_at(&ql[16 * half..]), 4 * (k / 2), 0x0f);
                    let top = bits(load_at(&qh[16 * half..]), 2 * k, 3);
                    let q = vsubq_u8(vorrq_u8(low, vshlq_n_u8::<4>(top)), vdupq_n_u8(32));
                    let x = &ab.qs[32 * r + 16 * half..];
                    let sc = i32::from(wb.scales[2 * r + half]);
                    acc = scaled::<M>(acc, vreinterpretq_s8_u8(q), x, sc);
                }
            }
            vaddvq_s32(acc)
        };
        q6_k_term(wb.d, ab, isum)
    })
}
