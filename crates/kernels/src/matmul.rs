//! How a weight matrix's product with many activation rows runs.
//!
//! A caller (ferrite's `tensor`) holds a matrix's bytes and quantized
//! activations and splits the output rows across its threads; for its
//! rows, [`products`] decides everything else: which kernels of the active
//! set run (the many-row group kernels `dot16n` / `dot8n` for prefill, the
//! one-row group kernels `dot8` / `dot16`, four rows at a time, or one),
//! in which order the rows and tokens are walked so that weights stay in
//! cache, and how each value is stored (bias, activation, layout).
//!
//! Every output value is one dot product of one weight row with one
//! activation row, with the bits of the scalar reference (every kernel
//! guarantees it), so the choice changes speed only: results do not
//! depend on the thread split, the batch, or the kernel set.

use std::ops::Range;

use crate::columns::store_columns;
use crate::disjoint::DisjointSlice;
use crate::dispatch::vec_dot_kernel;
use crate::dot::interleave::MAX_GROUP_ROWS;
use crate::dot::{GroupKernels, VecDotKernel};
use crate::math::{activate, Activation};
use crate::quant::{ActBlockFacts, BlockQ8_0, ACT_PANEL_ROWS};
use crate::GgmlType;

/// Weight rows processed together against every token of a chunk, so that
/// they stay in cache while the activations stream past them (prefill).
const ROW_BLOCK: usize = 16;

/// Tokens per call of a many-row kernel (`dot8n`, `dot16n`).
const CHUNK: usize = 64;

/// The kernels of the active set for weights of one type.
#[derive(Clone, Copy)]
pub struct RowKernels(VecDotKernel);

impl RowKernels {
    /// The kernels for weights of type `ty`, or None if there are none.
    pub fn for_type(ty: GgmlType) -> Option<RowKernels> {
        vec_dot_kernel(ty).map(RowKernels)
    }

    /// The format activations must be quantized to for these weights.
    pub fn act_type(&self) -> GgmlType {
        self.0.act_type
    }

    /// Rows per interleaved group of the matrix's repacked copy.
    pub fn group_rows(&self) -> usize {
        self.0.group_rows
    }

    /// Whether matrices of this type are read from a copy repacked in
    /// groups of [`RowKernels::group_rows`] rows
    /// (`crate::dot::interleave::interleave`).
    pub fn interleaves(&self) -> bool {
        self.0.group_kernels().is_some()
    }

    /// The dot product of one weight row with one activation row (bytes
    /// of each, whole blocks).
    pub fn dot(&self, w: &[u8], a: &[u8]) -> f32 {
        (self.0.dot)(w, a)
    }
}

/// A weight matrix as [`products`] reads it: `rows` rows of `row_bytes`
/// bytes in `data`, the first rows also in `groups` (whole groups of
/// `kernels.group_rows()` rows, interleaved), where they are read from.
#[derive(Clone, Copy)]
pub struct Matrix<'a> {
    pub kernels: &'a RowKernels,
    pub rows: usize,
    pub row_bytes: usize,
    pub data: &'a [u8],
    pub groups: Option<&'a [u8]>,
}

/// Activation rows in the weights' activation format: `n` rows of
/// `row_bytes` bytes in `data`, and for Q8_0 the
/// [`act_panels`](crate::quant::act_panels) of its whole sixteen-row
/// panels (or nothing).
#[derive(Clone, Copy)]
pub struct ActRows<'a> {
    pub data: &'a [u8],
    pub row_bytes: usize,
    pub n: usize,
    pub panels: &'a [ActBlockFacts],
}

impl<'a> ActRows<'a> {
    fn row(&self, t: usize) -> &'a [u8] {
        &self.data[t * self.row_bytes..(t + 1) * self.row_bytes]
    }

    /// Rows `tokens`, one after the other.
    fn rows(&self, tokens: Range<usize>) -> &'a [u8] {
        &self.data[tokens.start * self.row_bytes..tokens.end * self.row_bytes]
    }

    /// The panels of rows `tokens`: those of its whole panels, or nothing
    /// unless it starts on a panel.
    fn panels(&self, tokens: Range<usize>) -> &'a [ActBlockFacts] {
        let per_row = self.row_bytes / std::mem::size_of::<BlockQ8_0>();
        if !tokens.start.is_multiple_of(ACT_PANEL_ROWS) {
            return &[];
        }
        let end = (tokens.end * per_row).min(self.panels.len());
        self.panels
            .get(tokens.start * per_row..end)
            .unwrap_or_default()
    }
}

/// Where [`products`] writes row `r`'s value for token `t`.
#[derive(Clone, Copy)]
pub enum Layout<'b> {
    /// At `t * rows + r` (the whole product, token by token), plus
    /// `bias[r]` if there is a bias (one f32 add per value, as llama.cpp
    /// adds it), then through `act` if there is one.
    ByToken {
        bias: Option<&'b [f32]>,
        act: Option<Activation>,
    },
    /// At `(r - first) * n_tokens + t` (a tile of rows, row by row), as
    /// computed.
    ByRow { first: usize },
}

/// `res[i] += bias[i]` for the first `bias.len()` values (sixteen or
/// eight: a fixed-size loop, inlined).
#[inline(always)]
fn add_bias(res: &mut [f32; 16], bias: &[f32]) {
    match <&[f32; 16]>::try_from(bias) {
        Ok(b) => res.iter_mut().zip(b).for_each(|(v, &b)| *v += b),
        Err(_) => res.iter_mut().zip(bias).for_each(|(v, &b)| *v += b),
    }
}

/// `dst` (sixteen values long) = `src`, as one fixed-size copy the
/// compiler inlines (a slice copy of unknown length is a `memcpy` call).
#[inline(always)]
fn store_16(dst: &mut [f32], src: &[f32; 16]) {
    if let Ok(dst) = <&mut [f32; 16]>::try_from(dst) {
        *dst = *src;
    }
}

/// Rows `rows` of `m` against every activation row of `acts`, into `out`
/// as `layout` says (with [`Layout::ByToken`], in blocks of sixteen rows,
/// each used for every token while it is in cache).
///
/// `rows` must start on a group boundary of `m`'s interleaved copy for the
/// group kernels to be used (callers split work on group boundaries).
///
/// # Safety
/// No other thread may access the places of `out` these rows are written
/// to (see [`Layout`]) while this runs.
pub unsafe fn products(
    m: &Matrix,
    rows: Range<usize>,
    acts: &ActRows,
    out: &DisjointSlice<f32>,
    layout: Layout,
) {
    match layout {
        Layout::ByToken { .. } => {
            if acts.n == 1 {
                prefetch_start(m, rows.clone());
            }
            let mut r0 = rows.start;
            while r0 < rows.end {
                let r1 = (r0 + ROW_BLOCK).min(rows.end);
                // SAFETY: rows r0..r1 are among the caller's rows.
                unsafe { block_products(m, r0..r1, acts, out, layout) };
                r0 = r1;
            }
        }
        // SAFETY: the caller's contract.
        Layout::ByRow { .. } => unsafe { block_products(m, rows, acts, out, layout) },
    }
}

/// How far ahead of the block being read the one-token group kernels
/// (`x86::avx2::rows8`) prefetch, in bytes; also how much of a product's
/// first rows [`prefetch_start`] asks for at once, so that the kernels'
/// own hints take over from there. A few groups of eight rows (a Q4_K
/// group of 1024 columns is 4.6 KiB), so that lines arrive before they are
/// read even when other processes share the memory system (4 KiB, about
/// one group, left decode waiting on memory: 24 KiB gave 3-10% more tokens
/// per CPU-second on the Qwen3-MoE bench file, Qwen2.5 0.5B Q4_K_M and
/// SmolLM2 Q4_1 at load ~10).
pub(crate) const PREFETCH_AHEAD: usize = 24576;

/// Asks the memory system for the first [`PREFETCH_AHEAD`] bytes of rows
/// `rows` of `m`, where they are read from (the interleaved copy, or the
/// file's rows), all at once. A one-token product streams each matrix
/// once. Without this, its first lines came one demand miss at a time:
/// the kernels' hints run ahead of the block being read, never at it, and
/// the hardware prefetchers restart at every matrix. A model of many small
/// matrices (a mixture of experts) pays that hundreds of times per token.
/// A hint only: no value changes.
fn prefetch_start(m: &Matrix, rows: Range<usize>) {
    let rb = m.row_bytes;
    let from = match m.groups {
        Some(g) if rows.start * rb < g.len() && m.kernels.0.group_kernels().is_some() => g,
        _ => m.data,
    };
    let start = (rows.start * rb).min(from.len());
    let end = (rows.end * rb).min(from.len()).min(start + PREFETCH_AHEAD);
    prefetch_lines(&from[start..end]);
}

/// A prefetch hint (into every cache level) for each 64-byte line of
/// `bytes`; nothing on targets without one.
#[inline]
fn prefetch_lines(bytes: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        for line in bytes.chunks(64) {
            // SAFETY: SSE is part of x86_64, and a prefetch is a hint that
            // never faults; the address is inside `bytes` anyway.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(line.as_ptr().cast::<i8>()) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = bytes;
}

/// [`products`] of one block of rows: each weight row is used for all
/// tokens while it is in cache, a group at a time from the interleaved
/// copy where there is one (eight or sixteen rows, as the kernel's layout
/// has them), else four rows at a time where the kernel has a four-row
/// version (bit-identical per row).
///
/// # Safety
/// As [`products`].
unsafe fn block_products(
    m: &Matrix,
    rows: Range<usize>,
    acts: &ActRows,
    out: &DisjointSlice<f32>,
    layout: Layout,
) {
    let n_tokens = acts.n;
    let kernel = &m.kernels.0;
    let at = |t: usize, r: usize| match layout {
        Layout::ByToken { .. } => t * m.rows + r,
        Layout::ByRow { first } => (r - first) * n_tokens + t,
    };
    let (bias, act) = match layout {
        Layout::ByToken { bias, act } => (bias, act),
        Layout::ByRow { .. } => (None, None),
    };
    // Row r's value as stored: plus its bias, if any, then activated.
    let biased = |r: usize, v: f32| {
        let mut v = match bias {
            Some(b) => v + b[r],
            None => v,
        };
        if let Some(act) = act {
            activate(act, std::slice::from_mut(&mut v));
        }
        v
    };
    let w = m.data;
    let rb = m.row_bytes;
    let gr = kernel.group_rows;
    let mut rows = rows;
    let grouped_kernels = m.groups.zip(kernel.group_kernels());
    if let Some((groups, kernels)) = grouped_kernels {
        // Several tokens: each group against the tokens in chunks, its
        // blocks decoded once per pass of the kernel over many tokens:
        // eight rows (`dot8n`) or sixteen (`dot16n`: two eight-row
        // groups, or one of sixteen) at a time.
        let (eight, sixteen) = match kernels {
            GroupKernels::Eight { dot8n, dot16n, .. } => (dot8n, dot16n),
            GroupKernels::Sixteen { dot16n, .. } => (None, Some(dot16n)),
        };
        let grouped = (groups.len() / rb).min(rows.end) / gr * gr;
        let aligned = rows.start.is_multiple_of(gr);
        if n_tokens > 1 && aligned && rows.start < grouped {
            let mut g = rows.start;
            // The kernels' results for a chunk of tokens (every value
            // a kernel call is given is written by it, so one buffer
            // serves every chunk).
            let mut buf = [[0f32; 16]; CHUNK];
            while g < grouped {
                // Sixteen rows at once where the set can (the same bits).
                let two = sixteen.filter(|_| g + 16 <= grouped);
                let span = if two.is_some() { 16 } else { 8 };
                if two.is_none() && eight.is_none() {
                    break;
                }
                let w = &groups[g * rb..(g + span) * rb];
                for t0 in (0..n_tokens).step_by(CHUNK) {
                    let t1 = (t0 + CHUNK).min(n_tokens);
                    let (a, ab) = (acts.rows(t0..t1), acts.row_bytes);
                    let part = &mut buf[..t1 - t0];
                    if let Some(dot16n) = two {
                        dot16n(w, a, ab, acts.panels(t0..t1), part);
                    } else if let Some(dot8n) = eight {
                        let mut eights = [[0f32; 8]; CHUNK];
                        dot8n(w, a, ab, &mut eights[..t1 - t0]);
                        for (o, e) in part.iter_mut().zip(&eights) {
                            o[..8].copy_from_slice(e);
                        }
                    }
                    if let Layout::ByRow { first } = layout {
                        // SAFETY: rows g..g+span are the caller's only,
                        // and are these n_tokens-long rows.
                        let seg = unsafe { out.segment((g - first) * n_tokens, span * n_tokens) };
                        for (c, tile) in part.chunks(16).enumerate() {
                            store_columns(tile, span, seg, n_tokens, t0 + 16 * c);
                        }
                        continue;
                    }
                    if let Some(b) = bias {
                        let b = &b[g..g + span];
                        for res in part.iter_mut() {
                            add_bias(res, b);
                        }
                    }
                    if let Some(act) = act {
                        // The chunk's values at once (with an 8-row
                        // group, half are unused: activated, not stored).
                        activate(act, part.as_flattened_mut());
                    }
                    for (t, res) in (t0..t1).zip(part.iter()) {
                        // Copies of constant length, inlined (a `span`
                        // long one was a memcpy call per token).
                        if span == 16 {
                            // SAFETY: rows g..g+16 are the caller's only,
                            // so these output indices are written here
                            // only.
                            let dst = unsafe { out.segment(t * m.rows + g, 16) };
                            store_16(dst, res);
                        } else {
                            // SAFETY: as above, for rows g..g+8.
                            let dst = unsafe { out.segment(t * m.rows + g, 8) };
                            dst.copy_from_slice(&res[..8]);
                        }
                    }
                }
                g += span;
            }
            rows.start = g;
        }
    }
    if rows.is_empty() {
        // All done by the grouped kernels.
        return;
    }
    // Rows that are in the interleaved copy.
    let grouped_end = grouped_kernels.map_or(0, |(groups, _)| (groups.len() / rb).min(rows.end));
    for t in 0..n_tokens {
        let a = acts.row(t);
        let mut r = rows.start;
        if let Some((groups, kernels)) = grouped_kernels {
            let grouped = grouped_end;
            let mut res = [0f32; MAX_GROUP_ROWS];
            while r < grouped {
                // The group holding row r; the callers split work on
                // group boundaries, so this is normally all of it.
                let g = r / gr * gr;
                let group = &groups[g * rb..(g + gr) * rb];
                match kernels {
                    GroupKernels::Eight { dot8, .. } => {
                        if let Some(eight) = res.first_chunk_mut::<8>() {
                            dot8(group, a, eight);
                        }
                    }
                    GroupKernels::Sixteen { dot16, .. } => {
                        if let Some(sixteen) = res.first_chunk_mut::<16>() {
                            dot16(group, a, sixteen);
                        }
                    }
                }
                let end = (g + gr).min(rows.end);
                for r in r..end {
                    // SAFETY: rows r..end are the caller's only, so these
                    // output indices are written here only.
                    unsafe { out.write(at(t, r), biased(r, res[r - g])) };
                }
                r = end;
            }
        }
        if kernel.dot4.is_some() {
            let mut four = [0f32; 4];
            while r + 4 <= rows.end {
                kernel.dot_rows4(&w[r * rb..(r + 4) * rb], a, &mut four);
                for (i, &v) in four.iter().enumerate() {
                    // SAFETY: rows r..r+4 are the caller's only, so these
                    // output indices are written here only.
                    unsafe { out.write(at(t, r + i), biased(r + i, v)) };
                }
                r += 4;
            }
        }
        for r in r..rows.end {
            let v = (kernel.dot)(&w[r * rb..(r + 1) * rb], a);
            // SAFETY: row r is the caller's only, so its index for token
            // t is written here only.
            unsafe { out.write(at(t, r), biased(r, v)) };
        }
    }
}
