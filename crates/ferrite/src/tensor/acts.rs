//! Activations quantized once per product into the block format the
//! weight's dot kernel takes ([`QuantizedActs`]).

use ferrite_kernels::matmul::ActRows;
use ferrite_kernels::quant::{
    quantize, quantize_acts_row, ActBlockFacts, BlockQ8_0, ACT_PANEL_ROWS,
};
use ferrite_kernels::GgmlType;

use crate::parallel::{DisjointSlice, Threads};
use crate::Error;

/// Most activation values [`QuantizedActs::quantize`] quantizes on the
/// calling thread (a few microseconds of work, about what a parallel step's
/// hand-off costs).
const INLINE_QUANTIZE: usize = 16 * 1024;

/// Activations quantized into the format a weight type's dot product
/// takes, one row per token. Reused across matmuls to avoid allocation.
#[derive(Default)]
pub struct QuantizedActs {
    ty: Option<GgmlType>,
    cols: usize,
    pub(super) row_bytes: usize,
    /// Backed by u64 so that f32 activations are 4-byte aligned.
    buf: Vec<u64>,
    /// For Q8_0 rows (sixteen or more): the rows again in panels for the
    /// many-row kernels ([`act_panels`]: blocks of sixteen rows side by
    /// side, with their scales as f32 and their sums), worked out once
    /// here instead of once per group of weight rows.
    panels: Vec<ActBlockFacts>,
}

/// The bytes of `buf`.
fn as_bytes_mut(buf: &mut [u64]) -> &mut [u8] {
    let len = buf.len() * 8;
    // SAFETY: a u64 slice is valid as bytes of 8x the length; u8 has no
    // alignment or validity requirements and the borrow is unique.
    unsafe { std::slice::from_raw_parts_mut(buf.as_mut_ptr().cast::<u8>(), len) }
}

impl QuantizedActs {
    /// Quantizes `n_tokens` rows of `cols` values from `x` into format `ty`,
    /// the rows split across `threads` (each row is quantized on its own,
    /// so the bytes do not depend on the split).
    pub fn quantize(
        &mut self,
        ty: GgmlType,
        x: &[f32],
        cols: usize,
        threads: &Threads,
    ) -> Result<(), Error> {
        let n_tokens = x.len() / cols.max(1);
        if ty == GgmlType::Q8_0 && cols > 0 && n_tokens >= ACT_PANEL_ROWS {
            return self.quantize_q8_0_panels(x, cols, threads);
        }
        self.panels.clear();
        self.quantize_rows(ty, x, cols, threads)
    }

    /// Room for `n_tokens` rows of `cols` values in format `ty`, recorded
    /// as the current contents; returns the bytes per row.
    fn prepare(&mut self, ty: GgmlType, n_tokens: usize, cols: usize) -> Result<usize, Error> {
        let row_bytes = ty
            .bytes_for(cols as u64)
            .ok_or_else(|| Error::Input(format!("{cols} values are not whole {ty} blocks")))?
            as usize;
        let words = (n_tokens * row_bytes).div_ceil(8);
        if self.buf.len() < words {
            self.buf.resize(words, 0);
        }
        self.ty = Some(ty);
        self.cols = cols;
        self.row_bytes = row_bytes;
        Ok(row_bytes)
    }

    /// [`QuantizedActs::quantize`] into Q8_0 with the panels of every
    /// whole sixteen rows, made in the same pass over the values
    /// ([`quantize_acts_row`]: the bytes [`quantize`] writes and the facts
    /// [`act_panels`](ferrite_kernels::quant::act_panels) works out of
    /// them). Threads take whole panels (and the rows after the last one
    /// singly), so each writes its own part of both.
    fn quantize_q8_0_panels(
        &mut self,
        x: &[f32],
        cols: usize,
        threads: &Threads,
    ) -> Result<(), Error> {
        let ty = GgmlType::Q8_0;
        let n_tokens = x.len() / cols;
        let row_bytes = self.prepare(ty, n_tokens, cols)?;
        let per_row = row_bytes / std::mem::size_of::<BlockQ8_0>();
        let whole = n_tokens / ACT_PANEL_ROWS;
        let panel_len = ACT_PANEL_ROWS * per_row;
        self.panels
            .resize(whole * panel_len, ActBlockFacts::default());
        let bytes = DisjointSlice::new(&mut as_bytes_mut(&mut self.buf)[..n_tokens * row_bytes]);
        let panels = DisjointSlice::new(&mut self.panels[..]);
        let unit = |u: usize| {
            if u < whole {
                let first = u * ACT_PANEL_ROWS;
                // SAFETY: each unit is one thread's; panel u's rows and
                // facts are written by this unit only.
                let (rows, facts) = unsafe {
                    (
                        bytes.segment(first * row_bytes, ACT_PANEL_ROWS * row_bytes),
                        panels.segment(u * panel_len, panel_len),
                    )
                };
                for (r, dst) in rows.chunks_exact_mut(row_bytes).enumerate() {
                    let src = &x[(first + r) * cols..(first + r + 1) * cols];
                    quantize_acts_row(src, dst, &mut facts[r..]);
                }
            } else {
                let t = whole * ACT_PANEL_ROWS + (u - whole);
                // SAFETY: row t (after the panels) is this unit's only.
                let dst = unsafe { bytes.segment(t * row_bytes, row_bytes) };
                quantize_acts_row(&x[t * cols..(t + 1) * cols], dst, &mut []);
            }
        };
        let units = whole + (n_tokens - whole * ACT_PANEL_ROWS);
        if n_tokens * cols <= INLINE_QUANTIZE {
            (0..units).for_each(unit);
        } else {
            threads.split(units, |range| range.for_each(unit));
        }
        Ok(())
    }

    /// [`QuantizedActs::quantize`] without the panels.
    fn quantize_rows(
        &mut self,
        ty: GgmlType,
        x: &[f32],
        cols: usize,
        threads: &Threads,
    ) -> Result<(), Error> {
        let n_tokens = x.len() / cols;
        let row_bytes = self.prepare(ty, n_tokens, cols)?;
        let bytes = &mut self.bytes_mut()[..n_tokens * row_bytes];
        // The first row on its own: it fails exactly when any row would
        // (a type without quantization), and then nothing runs in threads.
        let (first, rest) = bytes.split_at_mut(row_bytes.min(bytes.len()));
        if n_tokens == 0 {
            return Ok(());
        }
        quantize(ty, &x[..cols], first).map_err(|e| Error::Input(e.to_string()))?;
        if n_tokens == 1 {
            return Ok(());
        }
        if n_tokens * cols <= INLINE_QUANTIZE {
            // A few rows (decoding a batch): quicker here than waking the
            // workers for it (each row is quantized on its own either way).
            for (src, dst) in x[cols..]
                .chunks_exact(cols)
                .zip(rest.chunks_exact_mut(row_bytes))
            {
                // Cannot fail: the same type and lengths as the first row.
                let _ = quantize(ty, src, dst);
            }
            return Ok(());
        }
        let rest = DisjointSlice::new(rest);
        threads.split(n_tokens - 1, |rows| {
            // SAFETY: the row ranges of different threads are disjoint, so
            // are these byte segments.
            let dst = unsafe { rest.segment(rows.start * row_bytes, rows.len() * row_bytes) };
            let src = &x[(rows.start + 1) * cols..(rows.end + 1) * cols];
            for (src, dst) in src.chunks_exact(cols).zip(dst.chunks_exact_mut(row_bytes)) {
                // Cannot fail: the same type and lengths as the first row.
                let _ = quantize(ty, src, dst);
            }
        });
        Ok(())
    }

    /// Rounds f32 activations (the last `quantize` into F32) as llama2.c's
    /// runq.c quantizes its matmul inputs: per group of `gs` values,
    /// `scale = max|x| / 127` and `x = round(x / scale) * scale` (half away
    /// from zero; an all-zero group stays zero). runq.c then multiplies the
    /// int8 values exactly and scales each group's integer sum; ferrite
    /// multiplies the rounded f32 values, which differs from that only by
    /// f32 rounding, far less than the rounding of the inputs itself.
    /// `n_values` is the length of the input just quantized.
    pub fn round_as_int8(&mut self, gs: usize, n_values: usize) {
        if self.ty != Some(GgmlType::F32) || gs == 0 {
            return;
        }
        let len = n_values.min(self.buf.len() * 2);
        // SAFETY: the u64 buffer holds at least `len` f32 (two per word),
        // 4-byte aligned; f32 has no invalid bit patterns and the borrow
        // is unique.
        let values: &mut [f32] =
            unsafe { std::slice::from_raw_parts_mut(self.buf.as_mut_ptr().cast::<f32>(), len) };
        for group in values.chunks_exact_mut(gs) {
            let max = group.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            let scale = max / 127.0;
            for v in group.iter_mut() {
                *v = if scale > 0.0 {
                    (*v / scale).round().clamp(-128.0, 127.0) * scale
                } else {
                    0.0
                };
            }
        }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        as_bytes_mut(&mut self.buf)
    }

    fn bytes(&self) -> &[u8] {
        let len = self.buf.len() * 8;
        // SAFETY: as in bytes_mut, for a shared borrow.
        unsafe { std::slice::from_raw_parts(self.buf.as_ptr().cast::<u8>(), len) }
    }

    /// Row `t` alone, as the kernels' matmul reads it (without panels:
    /// the kernels' values do not depend on them).
    pub(super) fn row_view(&self, t: usize) -> ActRows<'_> {
        ActRows {
            data: &self.bytes()[t * self.row_bytes..(t + 1) * self.row_bytes],
            row_bytes: self.row_bytes,
            n: 1,
            panels: &[],
        }
    }

    /// The first `n` rows as the kernels' matmul reads them.
    pub(super) fn view(&self, n: usize) -> ActRows<'_> {
        ActRows {
            data: &self.bytes()[..n * self.row_bytes],
            row_bytes: self.row_bytes,
            n,
            panels: &self.panels,
        }
    }
}
