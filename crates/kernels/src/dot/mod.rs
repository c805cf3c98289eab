//! Scalar reference dot products of one weight row with one activation row,
//! the inner loop of every matmul; mirrors the `vec_dot` / `vec_dot_type`
//! pairs of ggml's CPU type traits (`type_traits_cpu` in ggml-cpu.c) and the
//! portable kernels `ggml_vec_dot_*_generic` in ggml-cpu/quants.c of
//! <https://github.com/ggml-org/llama.cpp/tree/master/ggml/src>.
//!
//! The activations are first quantized (with [`crate::quant::quantize`]) to
//! the format the weight type pairs with, [`VecDotKernel::act_type`]:
//!
//! | weights                      | activations |
//! |------------------------------|-------------|
//! | Q4_0, Q5_0, Q8_0, MXFP4, IQ4_NL | Q8_0     |
//! | Q4_1, Q5_1                   | Q8_1        |
//! | Q2_K ... Q6_K, IQ4_XS        | Q8_K        |
//! | F32, F16, BF16               | F32         |
//!
//! ggml pairs F16 weights with F16 activations and BF16 with BF16; we keep
//! float activations in f32 (one activation format for all float weights,
//! and no rounding of the activations), so our F16/BF16 results are slightly
//! *more* exact than ggml's and not bit-identical to them.
//!
//! # The summation order is part of the contract
//!
//! A row's dot product must have the same bits however the matmul is split,
//! and the SIMD kernels (`crate::x86`, chosen by [`crate::dispatch`]) must
//! reproduce them exactly, so the order of every floating-point operation
//! is fixed here:
//!
//! - Quantized types: per block, an exact integer dot product (i32; the
//!   bounds noted at each kernel rule out overflow for *any* bytes), then
//!   one f32 term per block, accumulated in block order from `0.0`:
//!   `sum += (d_w * d_x) * (isum as f32)` for Q4_0/Q5_0/Q8_0/MXFP4,
//!   `sum += (d_w * d_x) * (isum as f32) + m_w * s_x` for Q4_1/Q5_1,
//!   `sum += (d_x * d_w) * (isum as f32) - (d_x * dmin_w) * (msum as f32)`
//!   for Q2_K/Q4_K/Q5_K and `sum += (d_w * d_x) * (isum as f32)` for
//!   Q3_K/Q6_K, where `isum` already includes the small per-group scales.
//!   Inside a block only integers are added, so a SIMD kernel may add them
//!   in any order.
//! - Float types: 32 independent f32 lanes, value `i` going to lane
//!   `i % 32` (a short last chunk fills lanes from 0), then the lanes are
//!   folded in halves (`lane[i] += lane[i + 16]`, then 8, 4, 2, 1). That is
//!   four 8-wide or two 16-wide vector accumulators and the usual
//!   horizontal sum.
//!
//! Products and sums are rounded separately (never a fused multiply-add);
//! Rust does not contract `a * b + c` on its own, and SIMD versions must use
//! separate multiply and add instructions to match.
//!
//! Compared with ggml's generic kernels: the legacy kernels write the same
//! expressions except Q4_0 (ggml rounds `(isum * d_w) * d_x`), though a C
//! compiler may fuse them into multiply-adds; the k-quant
//! kernels have the same integer parts, but ggml spreads the f32 part of
//! Q3_K..Q6_K over eight partial sums, where we add one term per block.
//! Like ggml's generic kernels, Q2_K, Q4_K and Q5_K take the min term from
//! the activations' precomputed `bsums`, Q3_K and Q6_K do not use them.
//!
//! Every kernel only reads whole blocks from the front of each slice and
//! stops at the end of the shorter one, so mismatched lengths give a
//! meaningless number, never a panic or an out-of-bounds read.

pub(crate) mod float;
pub mod interleave;
pub(crate) mod iq4;
pub(crate) mod k_quants;
mod legacy;

use crate::quant::{as_blocks, Block};
use crate::GgmlType;

pub use crate::dispatch::{kernel_set_name, vec_dot_kernel};

/// A weight-row x activation-row dot product for one weight type.
#[derive(Clone, Copy)]
pub struct VecDotKernel {
    /// The format the activations must be quantized to (with `quant::quantize`) before calling `dot`.
    pub act_type: GgmlType,
    /// dot(weight_row_bytes, activation_row_bytes) -> f32. Both slices hold the same number of values
    /// (whole blocks) in their respective formats. Must never panic or read out of bounds on any input whose
    /// lengths are consistent; on inconsistent lengths it may return a garbage value but must not panic/UB.
    pub dot: fn(&[u8], &[u8]) -> f32,
    /// Optional: four consecutive weight rows (`w` holds 4 * row_bytes bytes, row after row) against one
    /// activation row; `out[i]` must equal `dot(&w[i*row_bytes..(i+1)*row_bytes], act)` bit for bit, with
    /// `row_bytes = w.len() / 4`. Must never panic or read out of bounds, whatever the lengths. `None` when
    /// the set has nothing faster than four calls of `dot` ([`VecDotKernel::dot_rows4`] does that).
    pub dot4: Option<Dot4Fn>,
    /// Rows per interleaved group ([`interleave`]) of this kernel's layout: 8, or 16 where the set's one-row
    /// group kernel is `dot16` (one 64-byte load then holds a piece of sixteen rows). A matrix with a group
    /// kernel ([`VecDotKernel::group_kernels`]) is repacked in groups of this many rows at load.
    pub group_rows: usize,
    /// Optional: one group of eight rows repacked by [`interleave::interleave`] (`w.len() / 8` bytes per
    /// row) against one activation row; `out[i]` must equal `dot(row i, act)` bit for bit, row i being the
    /// row the group was made from. Must never panic or read out of bounds, whatever the lengths. `None`
    /// when the set has no eight-row kernel for this type. Read by matrices when `group_rows` is 8.
    pub dot8: Option<Dot8Fn>,
    /// Optional: `dot8` of one group against many activation rows at once (row `t` is bytes
    /// `t * act_row_bytes..` of `acts`, one row per entry of `out`; a missing row counts as empty), with
    /// the same bits as `dot8` row by row; the group's blocks are decoded once for several rows (prefill).
    pub dot8n: Option<Dot8NFn>,
    /// Optional, with `group_rows` 16: `dot8`'s contract for one group of sixteen rows (`w.len() / 16`
    /// bytes per row).
    pub dot16: Option<Dot16Fn>,
    /// Optional: sixteen grouped rows against many activation rows, `out[t]` holding the sixteen results of
    /// row `t` (a missing row counts as empty), each with the bits of the scalar `dot`. With `group_rows`
    /// 8, `groups` holds two eight-row groups (A then B, equal lengths) and the results are A's eight then
    /// B's, the same bits as two `dot8n` calls (for sets whose registers hold sixteen rows' lanes, where
    /// the per-activation-block work is then shared by twice the weight rows); with `group_rows` 16, it is
    /// one sixteen-row group, the many-row form of `dot16` (prefill).
    pub dot16n: Option<Dot16NFn>,
}

/// The group kernels a matrix in a kernel's interleaved layout uses.
#[derive(Clone, Copy)]
pub enum GroupKernels {
    /// Eight-row groups: `dot8` for one activation row, `dot8n` (if any) for many, `dot16n` (if any) for
    /// two groups and many rows.
    Eight {
        dot8: Dot8Fn,
        dot8n: Option<Dot8NFn>,
        dot16n: Option<Dot16NFn>,
    },
    /// Sixteen-row groups: `dot16` for one activation row, `dot16n` for many.
    Sixteen { dot16: Dot16Fn, dot16n: Dot16NFn },
}

/// A many-row eight-row kernel, as in [`VecDotKernel::dot8n`].
pub type Dot8NFn = fn(group: &[u8], acts: &[u8], act_row_bytes: usize, out: &mut [[f32; 8]]);

/// A many-row kernel of two eight-row groups, as in [`VecDotKernel::dot16n`].
/// `facts` are the [`act_panels`](crate::quant::act_panels) of `acts` (from its first row) when the
/// activations are Q8_0, or empty: a kernel may read them instead of the rows (the same bits either way;
/// a kernel checks their length, never trusts it).
pub type Dot16NFn = fn(
    groups: &[u8],
    acts: &[u8],
    act_row_bytes: usize,
    facts: &[crate::quant::ActBlockFacts],
    out: &mut [[f32; 16]],
);

/// A sixteen-row kernel, as in [`VecDotKernel::dot16`].
pub type Dot16Fn = fn(group: &[u8], act: &[u8], out: &mut [f32; 16]);

/// An eight-row kernel, as in [`VecDotKernel::dot8`].
pub type Dot8Fn = fn(group: &[u8], act: &[u8], out: &mut [f32; 8]);

/// A four-row kernel, as in [`VecDotKernel::dot4`].
pub type Dot4Fn = fn(w: &[u8], act: &[u8], out: &mut [f32; 4]);

impl VecDotKernel {
    /// The group kernels of this kernel's layout (`group_rows` rows per
    /// group), or `None` if it has none (the matrix then keeps the file's
    /// layout).
    pub fn group_kernels(&self) -> Option<GroupKernels> {
        match self.group_rows {
            8 => Some(GroupKernels::Eight {
                dot8: self.dot8?,
                dot8n: self.dot8n,
                dot16n: self.dot16n,
            }),
            16 => Some(GroupKernels::Sixteen {
                dot16: self.dot16?,
                dot16n: self.dot16n?,
            }),
            _ => None,
        }
    }

    /// Four consecutive weight rows against one activation row, as
    /// [`VecDotKernel::dot4`]: with it where the kernel has one, else four
    /// calls of `dot`. The same bits either way.
    #[inline]
    pub fn dot_rows4(&self, w: &[u8], act: &[u8], out: &mut [f32; 4]) {
        match self.dot4 {
            Some(dot4) => dot4(w, act, out),
            None => rows4_by_one(self.dot, w, act, out),
        }
    }
}

/// `out[i] = dot(row i, act)` for the four rows of `w` (`w.len() / 4` bytes
/// each, trailing bytes ignored): the meaning of [`VecDotKernel::dot4`],
/// and the fallback of kernels that have one for odd lengths.
#[inline]
pub(crate) fn rows4_by_one(dot: fn(&[u8], &[u8]) -> f32, w: &[u8], act: &[u8], out: &mut [f32; 4]) {
    let row_bytes = w.len() / 4;
    for (i, o) in out.iter_mut().enumerate() {
        // In bounds: (i + 1) * row_bytes <= 4 * row_bytes <= w.len().
        *o = dot(&w[i * row_bytes..(i + 1) * row_bytes], act);
    }
}

/// The scalar reference kernel for weights of type `w`, or None if we have
/// none. [`vec_dot_kernel`] hands out the fastest kernel for this CPU, with
/// the same bits.
pub fn scalar_vec_dot_kernel(w: GgmlType) -> Option<VecDotKernel> {
    use GgmlType::*;
    fn kernel(act_type: GgmlType, dot: fn(&[u8], &[u8]) -> f32) -> Option<VecDotKernel> {
        Some(VecDotKernel {
            act_type,
            dot,
            dot4: None,
            group_rows: 8,
            dot8: None,
            dot8n: None,
            dot16: None,
            dot16n: None,
        })
    }
    match w {
        F32 => kernel(F32, float::f32_f32),
        F16 => kernel(F32, float::f16_f32),
        Bf16 => kernel(F32, float::bf16_f32),
        Q4_0 => kernel(Q8_0, legacy::q4_0_q8_0),
        Q5_0 => kernel(Q8_0, legacy::q5_0_q8_0),
        Q8_0 => kernel(Q8_0, legacy::q8_0_q8_0),
        Mxfp4 => kernel(Q8_0, legacy::mxfp4_q8_0),
        Q4_1 => kernel(Q8_1, legacy::q4_1_q8_1),
        Q5_1 => kernel(Q8_1, legacy::q5_1_q8_1),
        Q2K => kernel(Q8K, k_quants::q2_k_q8_k),
        Q3K => kernel(Q8K, k_quants::q3_k_q8_k),
        Q4K => kernel(Q8K, k_quants::q4_k_q8_k),
        Q5K => kernel(Q8K, k_quants::q5_k_q8_k),
        Q6K => kernel(Q8K, k_quants::q6_k_q8_k),
        Iq4Nl => kernel(Q8_0, iq4::iq4_nl_q8_0),
        Iq4Xs => kernel(Q8K, iq4::iq4_xs_q8_k),
        _ => None,
    }
}

/// The whole blocks at the front of `bytes` (a trailing partial block is
/// ignored).
pub(crate) fn whole_blocks<B: Block>(bytes: &[u8]) -> &[B] {
    let whole = bytes.len() - bytes.len() % std::mem::size_of::<B>();
    // `whole` is a multiple of the block size, so `as_blocks` cannot fail.
    as_blocks(&bytes[..whole]).unwrap_or_default()
}

/// The activation rows of pass `c` of a many-row kernel that takes `T` rows
/// per pass: rows `c * T..` of `acts` (`act_row` bytes each) as whole
/// blocks, the first `len` of them; a missing or cut row is empty or short,
/// the rest empty.
#[inline]
pub(crate) fn pass_rows<A: Block, const T: usize>(
    acts: &[u8],
    act_row: usize,
    c: usize,
    len: usize,
) -> [&[A]; T] {
    std::array::from_fn(|i| {
        if i < len {
            let start = ((c * T + i) * act_row).min(acts.len());
            whole_blocks::<A>(&acts[start..(start + act_row).min(acts.len())])
        } else {
            &[]
        }
    })
}

/// The block-by-block skeleton of every quantized kernel: `term` gives one
/// block pair's contribution, added to an f32 sum in block order.
#[inline(always)]
pub(crate) fn sum_blocks<W: Block, A: Block>(
    w: &[u8],
    a: &[u8],
    term: impl Fn(&W, &A) -> f32,
) -> f32 {
    let mut sum = 0.0f32;
    for (wb, ab) in whole_blocks::<W>(w).iter().zip(whole_blocks::<A>(a)) {
        sum += term(wb, ab);
    }
    sum
}

/// Integer dot product of two equally long runs of small integers.
#[inline(always)]
fn idot(w: impl IntoIterator<Item = i32>, a: &[i8]) -> i32 {
    w.into_iter().zip(a).map(|(w, &a)| w * i32::from(a)).sum()
}
