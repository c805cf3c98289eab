//! Running products: threads split a matrix's output rows on group
//! boundaries and each calls the kernels ([`matmul_many`], tiles for beam
//! search).

use std::ops::Range;

use ferrite_kernels::columns::store_columns;
use ferrite_kernels::dot::interleave::MAX_GROUP_ROWS;
use ferrite_kernels::dot::GroupKernels;
use ferrite_kernels::math::{activate, Activation};
use ferrite_kernels::GgmlType;

use crate::parallel::{DisjointSlice, Threads};
use crate::Error;

use super::{Linear, QuantizedActs};

/// Weight rows processed together against every token of a chunk, so that
/// they stay in cache while the activations stream past them (prefill).
const ROW_BLOCK: usize = 16;

/// Tokens per call of a many-row kernel (`dot8n`, `dot16n`).
const CHUNK: usize = 32;

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

/// Most products [`matmul_many`] runs in one parallel step (more are run
/// in groups of this many).
const MAX_JOBS: usize = 4;

/// One product of a [`matmul_many`] call: weights and where the result goes
/// (`n_tokens x w.rows`).
pub struct MatmulJob<'a> {
    pub w: &'a Linear,
    pub out: &'a mut [f32],
    /// Applied to each output value (after the bias) as it is stored.
    pub act: Option<Activation>,
}

impl<'a> MatmulJob<'a> {
    pub fn new(w: &'a Linear, out: &'a mut [f32]) -> MatmulJob<'a> {
        MatmulJob { w, out, act: None }
    }
}

impl Linear {
    /// The format activations must be quantized to for this weight.
    pub fn act_type(&self) -> GgmlType {
        self.kernel.act_type
    }

    /// `out[t][r] = sum_c W[r][c] * x[t][c]` for every token `t` of `x`
    /// (`n_tokens x cols`), into `out` (`n_tokens x rows`).
    ///
    /// Deterministic by construction: every output value is one dot product
    /// of one weight row with one activation row, computed by the same kernel
    /// in the same order whatever the thread count or batch size. Threads
    /// split the output rows, never a reduction.
    pub fn matmul(
        &self,
        x: &[f32],
        out: &mut [f32],
        acts: &mut QuantizedActs,
        threads: &Threads,
    ) -> Result<(), Error> {
        self.matmul_act(x, out, None, acts, threads)
    }

    /// [`Linear::matmul`] with `act` applied to each output value (after
    /// the bias) while the product's values are in cache: the values of an
    /// activation pass over the output afterwards, without that pass.
    pub fn matmul_act(
        &self,
        x: &[f32],
        out: &mut [f32],
        act: Option<Activation>,
        acts: &mut QuantizedActs,
        threads: &Threads,
    ) -> Result<(), Error> {
        matmul_many(&mut [MatmulJob { w: self, out, act }], x, acts, threads)
    }
}

/// Several products of the same input `x` (`n_tokens x cols`), e.g. the Q,
/// K and V projections: the input is quantized once per activation format
/// and all output rows are split across the threads in one parallel step.
/// Each output value is the same single dot product as in
/// [`Linear::matmul`], so results do not depend on how products are grouped.
pub fn matmul_many(
    jobs: &mut [MatmulJob],
    x: &[f32],
    acts: &mut QuantizedActs,
    threads: &Threads,
) -> Result<(), Error> {
    if jobs.len() > MAX_JOBS {
        let (head, tail) = jobs.split_at_mut(MAX_JOBS);
        matmul_many(head, x, acts, threads)?;
        return matmul_many(tail, x, acts, threads);
    }
    let Some(first) = jobs.first() else {
        return Ok(());
    };
    let (cols, act_type) = (first.w.cols, first.w.kernel.act_type);
    if jobs
        .iter()
        .any(|j| j.w.cols != cols || j.w.kernel.act_type != act_type)
    {
        // Different input formats: one group per job.
        for job in jobs.iter_mut() {
            matmul_many(
                &mut [MatmulJob {
                    w: job.w,
                    out: &mut *job.out,
                    act: job.act,
                }],
                x,
                acts,
                threads,
            )?;
        }
        return Ok(());
    }
    let n_tokens = x.len() / cols;
    debug_assert_eq!(x.len(), n_tokens * cols);
    first.w.quantize_input(x, acts, threads)?;
    let acts = &*acts;
    // (weights, output) of each job, and the first global unit of each; on
    // the stack, so that decoding allocates nothing. Threads split units
    // of a job's group rows (the last unit of a job may be shorter), so
    // that work boundaries fall on the groups of interleaved weights.
    let mut starts = [0usize; MAX_JOBS + 1];
    let mut total = 0;
    for (i, job) in jobs.iter().enumerate() {
        debug_assert_eq!(job.out.len(), n_tokens * job.w.rows);
        starts[i] = total;
        total += job.w.rows.div_ceil(job.w.kernel.group_rows);
    }
    starts[jobs.len()] = total;
    let mut outs = jobs.iter_mut();
    type Target<'t> = (&'t Linear, DisjointSlice<'t, f32>, Option<Activation>);
    let targets: [Option<Target>; MAX_JOBS] = std::array::from_fn(|_| {
        outs.next()
            .map(|j| (j.w, DisjointSlice::new(&mut *j.out), j.act))
    });
    threads.split(total, |range| {
        // Walk this thread's units job by job, in blocks of rows.
        for (i, (w, out, act)) in targets.iter().flatten().enumerate() {
            let lo = range.start.max(starts[i]);
            let hi = range.end.min(starts[i + 1]);
            if lo >= hi {
                continue;
            }
            let unit = w.kernel.group_rows;
            let end = ((hi - starts[i]) * unit).min(w.rows);
            let mut r0 = (lo - starts[i]) * unit;
            while r0 < end {
                let r1 = (r0 + ROW_BLOCK).min(end);
                // The bias added to each product as it is stored, as
                // llama.cpp adds it (one f32 add per output value, the
                // same in every batch and thread split), then the
                // activation.
                let layout = Layout::ByToken {
                    bias: w.bias.as_deref(),
                    act: *act,
                };
                w.block_products(r0..r1, n_tokens, acts, out, layout);
                r0 = r1;
            }
        }
    });
    Ok(())
}

/// Where [`Linear::block_products`] writes row `r`'s value for token `t`.
#[derive(Clone, Copy)]
enum Layout<'b> {
    /// At `t * rows + r` (the whole product, token by token), plus
    /// `bias[r]` if there is a bias, then through `act` if there is one.
    ByToken {
        bias: Option<&'b [f32]>,
        act: Option<Activation>,
    },
    /// At `(r - first) * n_tokens + t` (a tile of rows, row by row).
    ByRow { first: usize },
}

/// Weight rows per tile of [`Linear::matmul_tiles`] (a multiple of every
/// kernel's group rows, so that tiles start on groups).
pub const TILE_ROWS: usize = ferrite_kernels::columns::TILE;

impl Linear {
    /// `x` (`n_tokens x cols`) in the format this matrix's kernel takes,
    /// into `acts` (and rounded as llama2.c's int8 matmul does, for such
    /// a model).
    fn quantize_input(
        &self,
        x: &[f32],
        acts: &mut QuantizedActs,
        threads: &Threads,
    ) -> Result<(), Error> {
        acts.quantize(self.kernel.act_type, x, self.cols, threads)?;
        if let Some(gs) = self.int8_groups {
            acts.round_as_int8(gs, x.len());
        }
        Ok(())
    }

    /// The product of `x` (`n_tokens x cols`) with this matrix, tile by
    /// tile instead of stored: the values of weight rows `rows` (at most
    /// [`TILE_ROWS`], starting at a multiple of it) for every token are
    /// handed, bias added, to `f(thread, rows, tile)` while they are in
    /// cache, the tile holding row `r`'s value for token `t` at
    /// `(r - rows.start) * n_tokens + t`; `thread` (`0..threads.count()`)
    /// is the calling thread's index, for per-thread results. The same
    /// values as [`Linear::matmul`]; the tiles are split across threads.
    pub fn matmul_tiles<F>(
        &self,
        x: &[f32],
        acts: &mut QuantizedActs,
        threads: &Threads,
        f: F,
    ) -> Result<(), Error>
    where
        F: Fn(usize, Range<usize>, &mut [f32]) + Sync,
    {
        assert!(
            TILE_ROWS.is_multiple_of(self.kernel.group_rows),
            "tiles start on groups"
        );
        let n_tokens = x.len() / self.cols;
        self.quantize_input(x, acts, threads)?;
        let acts = &*acts;
        threads.split_indexed(self.rows.div_ceil(TILE_ROWS), |thread, tiles| {
            let mut buf = vec![0f32; TILE_ROWS * n_tokens];
            for i in tiles {
                let rows = i * TILE_ROWS..((i + 1) * TILE_ROWS).min(self.rows);
                let tile = &mut buf[..rows.len() * n_tokens];
                let out = DisjointSlice::new(&mut *tile);
                // (Bias added below, tile by tile.)
                let layout = Layout::ByRow { first: rows.start };
                self.block_products(rows.clone(), n_tokens, acts, &out, layout);
                if let Some(bias) = self.bias.as_deref().and_then(|b| b.get(rows.clone())) {
                    // As matmul_many adds it: one f32 add per value.
                    for (o, &b) in tile.chunks_exact_mut(n_tokens).zip(bias) {
                        o.iter_mut().for_each(|o| *o += b);
                    }
                }
                f(thread, rows, tile);
            }
        });
        Ok(())
    }

    /// Rows `rows` of this matrix against every token: each weight row is
    /// used for all tokens while it is in cache, a group at a time from the
    /// interleaved copy where there is one (eight or sixteen rows, as the
    /// kernel's layout has them), else four rows at a time where the kernel
    /// has a four-row version (bit-identical per row). `layout` says where
    /// in `out` each value goes.
    fn block_products(
        &self,
        rows: std::ops::Range<usize>,
        n_tokens: usize,
        acts: &QuantizedActs,
        out: &DisjointSlice<f32>,
        layout: Layout,
    ) {
        let at = |t: usize, r: usize| match layout {
            Layout::ByToken { .. } => t * self.rows + r,
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
        let w = self.bytes.bytes();
        let rb = self.row_bytes;
        let gr = self.kernel.group_rows;
        let mut rows = rows;
        let grouped_kernels = self.groups.as_deref().zip(self.kernel.group_kernels());
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
                            // SAFETY: rows g..g+span belong to this thread's
                            // range only, and are these n_tokens-long rows.
                            let seg =
                                unsafe { out.segment((g - first) * n_tokens, span * n_tokens) };
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
                                // SAFETY: rows g..g+16 belong to this
                                // thread's range only, so these output
                                // indices are written by this thread only.
                                let dst = unsafe { out.segment(t * self.rows + g, 16) };
                                store_16(dst, res);
                            } else {
                                // SAFETY: as above, for rows g..g+8.
                                let dst = unsafe { out.segment(t * self.rows + g, 8) };
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
        let grouped_end =
            grouped_kernels.map_or(0, |(groups, _)| (groups.len() / rb).min(rows.end));
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
                        // SAFETY: rows r..end belong to this thread's range
                        // only, so these output indices are written by this
                        // thread only.
                        unsafe { out.write(at(t, r), biased(r, res[r - g])) };
                    }
                    r = end;
                }
            }
            if self.kernel.dot4.is_some() {
                let mut four = [0f32; 4];
                while r + 4 <= rows.end {
                    self.kernel
                        .dot_rows4(&w[r * rb..(r + 4) * rb], a, &mut four);
                    for (i, &v) in four.iter().enumerate() {
                        // SAFETY: rows r..r+4 belong to this thread's range
                        // only, so these output indices are written by this
                        // thread only.
                        unsafe { out.write(at(t, r + i), biased(r + i, v)) };
                    }
                    r += 4;
                }
            }
            for r in r..rows.end {
                let v = (self.kernel.dot)(&w[r * rb..(r + 1) * rb], a);
                // SAFETY: row r belongs to exactly one thread's range, so
                // its index for token t is written by this thread only.
                unsafe { out.write(at(t, r), biased(r, v)) };
            }
        }
    }
}
