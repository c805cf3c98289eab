//! Running products: threads split a matrix's output rows on group
//! boundaries and each calls the kernels ([`matmul_many`], tiles for beam
//! search).

use std::ops::Range;

use ferrite_kernels::math::Activation;
use ferrite_kernels::matmul::{products, ActRows, Layout};

use crate::parallel::{DisjointSlice, Threads};
use crate::Error;

use super::{Linear, QuantizedActs};

/// Most products [`matmul_many`] runs in one parallel step (more are run
/// in groups of this many).
const MAX_JOBS: usize = 16;

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
    let (cols, act_type) = (first.w.cols, first.w.kernels.act_type());
    if jobs
        .iter()
        .any(|j| j.w.cols != cols || j.w.kernels.act_type() != act_type)
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
    run_jobs(jobs, |_| acts.view(n_tokens), threads);
    Ok(())
}

/// Several one-token products, each of its own weights and its own input
/// row: job `i` takes row `i` of `x` (`jobs.len() x cols`) and writes its
/// `w.rows` values to its `out` (e.g. the down projections of a token's
/// experts, each on that expert's hidden values). The rows are quantized
/// in one pass and all output rows are split across the threads in one
/// parallel step. Each output value is the same single dot product as in
/// [`Linear::matmul`] of that row alone.
pub fn matmul_each(
    jobs: &mut [MatmulJob],
    x: &[f32],
    acts: &mut QuantizedActs,
    threads: &Threads,
) -> Result<(), Error> {
    let Some(first) = jobs.first() else {
        return Ok(());
    };
    let cols = first.w.cols;
    if x.len() != jobs.len() * cols {
        return Err(Error::Input(format!(
            "{} input values for {} products of {cols} columns",
            x.len(),
            jobs.len()
        )));
    }
    let same_input = |j: &MatmulJob| {
        j.w.cols == cols
            && j.w.kernels.act_type() == first.w.kernels.act_type()
            && j.w.int8_groups == first.w.int8_groups
    };
    if jobs.len() > MAX_JOBS || !jobs.iter().all(same_input) {
        // One product at a time (the same values).
        for (job, x) in jobs.iter_mut().zip(x.chunks_exact(cols)) {
            job.w.matmul_act(x, job.out, job.act, acts, threads)?;
        }
        return Ok(());
    }
    first.w.quantize_input(x, acts, threads)?;
    run_jobs(jobs, |i| acts.row_view(i), threads);
    Ok(())
}

/// The parallel step of [`matmul_many`] and [`matmul_each`]: the output
/// rows of every job (at most [`MAX_JOBS`]), against activation rows
/// `input(i)` for job `i`, split across the threads.
fn run_jobs<'v>(jobs: &mut [MatmulJob], input: impl Fn(usize) -> ActRows<'v>, threads: &Threads) {
    debug_assert!(jobs.len() <= MAX_JOBS);
    // (weights, input, output) of each job, and the first global unit of
    // each; on the stack, so that decoding allocates nothing. Threads split
    // units of a job's group rows (the last unit of a job may be shorter),
    // so that work boundaries fall on the groups of interleaved weights.
    let mut starts = [0usize; MAX_JOBS + 1];
    let mut total = 0;
    for (i, job) in jobs.iter().enumerate() {
        debug_assert_eq!(job.out.len(), input(i).n * job.w.rows);
        starts[i] = total;
        total += job.w.rows.div_ceil(job.w.kernels.group_rows());
    }
    starts[jobs.len()] = total;
    let mut outs = jobs.iter_mut().enumerate();
    type Target<'t, 'v> = (
        &'t Linear,
        ActRows<'v>,
        DisjointSlice<'t, f32>,
        Option<Activation>,
    );
    let targets: [Option<Target>; MAX_JOBS] = std::array::from_fn(|_| {
        outs.next()
            .map(|(i, j)| (j.w, input(i), DisjointSlice::new(&mut *j.out), j.act))
    });
    threads.split(total, |range| {
        // Walk this thread's units job by job, in blocks of rows.
        for (i, (w, view, out, act)) in targets.iter().flatten().enumerate() {
            let lo = range.start.max(starts[i]);
            let hi = range.end.min(starts[i + 1]);
            if lo >= hi {
                continue;
            }
            let unit = w.kernels.group_rows();
            let end = ((hi - starts[i]) * unit).min(w.rows);
            let layout = Layout::ByToken {
                bias: w.bias.as_deref(),
                act: *act,
            };
            // SAFETY: threads get disjoint ranges of units, so these rows
            // of this job's output are written by this thread only.
            unsafe { products(&w.view(), (lo - starts[i]) * unit..end, view, out, layout) };
        }
    });
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
        acts.quantize(self.kernels.act_type(), x, self.cols, threads)?;
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
            TILE_ROWS.is_multiple_of(self.kernels.group_rows()),
            "tiles start on groups"
        );
        let n_tokens = x.len() / self.cols;
        self.quantize_input(x, acts, threads)?;
        let view = acts.view(n_tokens);
        threads.split_indexed(self.rows.div_ceil(TILE_ROWS), |thread, tiles| {
            let mut buf = vec![0f32; TILE_ROWS * n_tokens];
            for i in tiles {
                let rows = i * TILE_ROWS..((i + 1) * TILE_ROWS).min(self.rows);
                let tile = &mut buf[..rows.len() * n_tokens];
                let out = DisjointSlice::new(&mut *tile);
                // (Bias added below, tile by tile.)
                let layout = Layout::ByRow { first: rows.start };
                // SAFETY: `out` is this thread's own buffer.
                unsafe { products(&self.view(), rows.clone(), &view, &out, layout) };
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
}
