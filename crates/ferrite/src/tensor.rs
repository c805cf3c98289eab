//! Weights as the model code sees them: a [`Linear`] matrix in any block
//! format, and an [`Embedding`] table, both borrowing their bytes from the
//! memory-mapped model file.
//!
//! One model file serves every weight format: the format is data (a
//! [`GgmlType`]), and the matmul picks the matching dot product from the
//! kernels crate.

use std::ops::Range;
use std::sync::Arc;

use ferrite_kernels::columns::store_columns;
use ferrite_kernels::dot::interleave::{self, RowOf, MAX_GROUP_ROWS};
use ferrite_kernels::dot::{vec_dot_kernel, GroupKernels, VecDotKernel};
use ferrite_kernels::math::{activate, Activation};
use ferrite_kernels::quant::{
    dequantize, quantize, quantize_acts_row, ActBlockFacts, BlockQ8_0, ACT_PANEL_ROWS,
};
use ferrite_kernels::GgmlType;

use crate::formats::gguf::GgufFile;
use crate::formats::names;
use crate::parallel::{DisjointSlice, Threads};
use crate::Error;

/// The bytes of an f32 slice (little-endian on every platform we build
/// for), as the kernels' f32 dot product takes them.
pub fn f32_bytes(x: &[f32]) -> &[u8] {
    // SAFETY: f32 has no padding and any byte pattern may be read as u8;
    // the length is the same memory measured in bytes, and the lifetime is
    // tied to the input borrow.
    unsafe { std::slice::from_raw_parts(x.as_ptr().cast::<u8>(), std::mem::size_of_val(x)) }
}

/// Bytes of one tensor inside a shared, memory-mapped file.
#[derive(Clone)]
pub struct TensorBytes {
    file: Arc<GgufFile>,
    range: Range<usize>,
}

impl TensorBytes {
    pub fn bytes(&self) -> &[u8] {
        // The range was taken from a validated tensor view of this file.
        &self.file.bytes()[self.range.clone()]
    }
}

/// A named tensor's shape, type and bytes, fetched from a GGUF file with the
/// shape checked against what the model expects.
pub struct Loader {
    file: Arc<GgufFile>,
}

impl Loader {
    pub fn new(file: Arc<GgufFile>) -> Loader {
        Loader { file }
    }

    pub fn file(&self) -> &GgufFile {
        &self.file
    }

    /// Whether the file has tensor `name`.
    pub fn has(&self, name: &str) -> bool {
        self.file.tensor(name).is_some()
    }

    /// Tensor `name` with exactly the dims `dims` (ggml order).
    fn get(&self, name: &str, dims: &[u64]) -> Result<(GgmlType, TensorBytes), Error> {
        let t = self
            .file
            .tensor(name)
            .ok_or_else(|| Error::model(self.source(), format!("missing tensor '{name}'")))?;
        if t.info.dims != dims {
            return Err(Error::model(
                self.source(),
                format!(
                    "tensor '{name}' has shape {:?}, expected {dims:?}",
                    t.info.dims
                ),
            ));
        }
        let start = t.data.as_ptr() as usize - self.file.bytes().as_ptr() as usize;
        let range = start..start + t.data.len();
        let bytes = TensorBytes {
            file: self.file.clone(),
            range,
        };
        Ok((t.info.ty, bytes))
    }

    fn source(&self) -> String {
        self.file.path().display().to_string()
    }

    /// The group size of [`names::INT8_ACTIVATION_GROUPS`] for an f32
    /// matrix of `cols` columns, if the file asks for the rounding.
    fn int8_groups(&self, ty: GgmlType, cols: usize) -> Result<Option<usize>, Error> {
        let Some(gs) = self.file.metadata().get_u64(names::INT8_ACTIVATION_GROUPS) else {
            return Ok(None);
        };
        match usize::try_from(gs) {
            Ok(gs) if ty == GgmlType::F32 && gs > 0 && cols.is_multiple_of(gs) => Ok(Some(gs)),
            _ => Err(Error::model(
                self.source(),
                format!(
                    "{} = {gs} does not fit a {ty} matrix of {cols} columns",
                    names::INT8_ACTIVATION_GROUPS
                ),
            )),
        }
    }

    /// A `rows x cols` matrix stored as `name` (ggml dims `[cols, rows]`).
    pub fn linear(&self, name: &str, rows: usize, cols: usize) -> Result<Linear, Error> {
        let (ty, bytes) = self.get(name, &[cols as u64, rows as u64])?;
        let kernel = vec_dot_kernel(ty).ok_or_else(|| {
            Error::model(
                self.source(),
                format!("tensor '{name}': no matmul kernel for type {ty}"),
            )
        })?;
        let row_bytes = bytes.bytes().len() / rows;
        // The grouped rows are read from the copy from now on.
        let start = bytes.range.start;
        let release = |r: Range<usize>| self.file.release(start + r.start..start + r.end);
        let group_rows = kernel.group_rows;
        let groups = kernel
            .group_kernels()
            .and_then(|_| {
                let matrix = Matrix {
                    ty,
                    rows,
                    row_bytes,
                };
                interleave_groups(matrix, group_rows, bytes.bytes(), release)
            })
            .map(Arc::new);
        Ok(Linear {
            ty,
            rows,
            cols,
            row_bytes,
            bytes,
            kernel,
            groups,
            bias: None,
            int8_groups: self.int8_groups(ty, cols)?,
        })
    }

    /// As [`Loader::linear`], plus the bias vector `bias` (`rows` values)
    /// when the file has it: `out = W x + b`.
    pub fn linear_opt_bias(
        &self,
        name: &str,
        bias: &str,
        rows: usize,
        cols: usize,
    ) -> Result<Linear, Error> {
        let mut w = self.linear(name, rows, cols)?;
        if self.has(bias) {
            w.bias = Some(self.vector(bias, rows)?);
        }
        Ok(w)
    }

    /// A vector of `n` values stored as `name`, or None if the file has no
    /// tensor of that name.
    pub fn opt_vector(&self, name: &str, n: usize) -> Result<Option<Vec<f32>>, Error> {
        if self.has(name) {
            self.vector(name, n).map(Some)
        } else {
            Ok(None)
        }
    }

    /// A vector of `n` values stored as `name`, dequantized to f32.
    pub fn vector(&self, name: &str, n: usize) -> Result<Vec<f32>, Error> {
        let (ty, bytes) = self.get(name, &[n as u64])?;
        let mut out = vec![0f32; n];
        dequantize(ty, bytes.bytes(), &mut out)
            .map_err(|e| Error::model(self.source(), format!("tensor '{name}': {e}")))?;
        Ok(out)
    }

    /// The token embedding table `embd` and the output matrix `output`
    /// (`n_vocab x dim` both; the same tensor when the embeddings are
    /// tied, which then serves both from one repacked copy).
    pub fn embedding_and_output(
        &self,
        embd: &str,
        output: &str,
        n_vocab: usize,
        dim: usize,
    ) -> Result<(Embedding, Linear), Error> {
        let mut table = self.embedding(embd, n_vocab, dim)?;
        let output = self.linear(output, n_vocab, dim)?;
        table.share_rows_with(&output);
        Ok((table, output))
    }

    /// An embedding table of `n_vocab` rows of `dim` values.
    pub fn embedding(&self, name: &str, n_vocab: usize, dim: usize) -> Result<Embedding, Error> {
        let (ty, bytes) = self.get(name, &[dim as u64, n_vocab as u64])?;
        if !ty.can_dequantize() {
            return Err(Error::model(
                self.source(),
                format!("tensor '{name}': cannot dequantize type {ty}"),
            ));
        }
        Ok(Embedding {
            ty,
            dim,
            n_vocab,
            bytes,
            groups: None,
        })
    }
}

/// An embedding table: row `i` is the vector of token `i`.
pub struct Embedding {
    pub ty: GgmlType,
    pub dim: usize,
    pub n_vocab: usize,
    bytes: TensorBytes,
    /// The interleaved copy of the same tensor made for the output matrix
    /// (tied embeddings), and its rows per group: its rows are read from
    /// there, since the file's pages of those rows were released.
    groups: Option<(Arc<Packed>, usize)>,
}

impl Embedding {
    /// Writes the vector of `token` into `out` (`dim` values).
    pub fn lookup(&self, token: u32, out: &mut [f32]) -> Result<(), Error> {
        let t = token as usize;
        if t >= self.n_vocab {
            return Err(Error::TokenOutOfRange {
                token,
                n_vocab: self.n_vocab,
            });
        }
        let row_bytes = self.bytes.bytes().len() / self.n_vocab;
        let bad = |e: ferrite_kernels::quant::QuantError| Error::Input(e.to_string());
        if let Some((groups, group_rows)) = &self.groups {
            let group_rows = *group_rows;
            let (g, row) = (t / group_rows, t % group_rows);
            let at = RowOf { group_rows, row };
            let span = group_rows * row_bytes;
            if let Some(group) = groups.get(g * span..(g + 1) * span) {
                // Block by block through a small buffer: no allocation.
                let (block, values) = (self.ty.type_size(), self.ty.block_size());
                let mut buf = [0u8; 256];
                let buf = buf.get_mut(..block).ok_or_else(|| {
                    Error::Input(format!("{} blocks are too large to look up", self.ty))
                })?;
                for (b, out) in out.chunks_mut(values).enumerate() {
                    if !interleave::block_of_row(self.ty, group, at, b, buf) {
                        return Err(Error::Input(format!("token {token}: bad packed row")));
                    }
                    dequantize(self.ty, buf, out).map_err(bad)?;
                }
                return Ok(());
            }
        }
        let row = &self.bytes.bytes()[t * row_bytes..(t + 1) * row_bytes];
        dequantize(self.ty, row, out).map_err(bad)
    }

    /// Reads rows from `output`'s interleaved copy when `output` is this
    /// very tensor (tied embeddings) and has one.
    pub fn share_rows_with(&mut self, output: &Linear) {
        let same = Arc::ptr_eq(&self.bytes.file, &output.bytes.file)
            && self.bytes.range == output.bytes.range
            && self.ty == output.ty;
        if same {
            self.groups = output.groups.clone().map(|g| (g, output.kernel.group_rows));
        }
    }
}

/// A weight matrix of `rows` output features by `cols` input features, each
/// row stored contiguously in block format `ty`.
pub struct Linear {
    pub ty: GgmlType,
    pub rows: usize,
    pub cols: usize,
    row_bytes: usize,
    bytes: TensorBytes,
    kernel: VecDotKernel,
    /// When the kernel has group kernels (`dot8`, or `dot16`): the first
    /// `rows / R * R` rows, repacked in groups of `R = kernel.group_rows`
    /// (`ferrite_kernels::dot::interleave`), `R * row_bytes` bytes a group.
    /// Those rows are then read from here, not from the file; any last
    /// rows that do not fill a group still are.
    groups: Option<Arc<Packed>>,
    /// Added to every output row after the products (`rows` values).
    pub bias: Option<Vec<f32>>,
    /// For f32 weights: the inputs are first rounded as int8 values with
    /// one f32 scale per this many values
    /// ([`QuantizedActs::round_as_int8`]), when the file says its reference
    /// engine does that ([`names::INT8_ACTIVATION_GROUPS`]).
    int8_groups: Option<usize>,
}

/// Memory for repacked weights: an anonymous mapping (zero pages that only
/// become resident as they are written) for which Linux is asked to use
/// transparent huge pages. Decoding streams every weight once per token;
/// with 2 MiB pages the hardware prefetchers are not stopped at every 4 KiB
/// page boundary and the TLB covers far more of the stream.
pub struct Packed(memmap2::MmapMut);

impl Packed {
    /// `len` zero bytes, or None if the OS refuses the mapping.
    fn zeroed(len: usize) -> Option<Packed> {
        let map = memmap2::MmapMut::map_anon(len.max(1)).ok()?;
        #[cfg(target_os = "linux")]
        {
            // A hint: without huge page support the pages stay small.
            let _ = map.advise(memmap2::Advice::HugePage);
        }
        Some(Packed(map))
    }
}

impl std::ops::Deref for Packed {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl std::ops::DerefMut for Packed {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.0
    }
}

/// A matrix's shape in bytes: `rows` rows of `row_bytes`, of type `ty`.
#[derive(Clone, Copy)]
struct Matrix {
    ty: GgmlType,
    rows: usize,
    row_bytes: usize,
}

/// The whole groups of `group_rows` rows of `bytes` (`m`) repacked for a
/// group kernel, or None if the type has no such layout. `release(range)`
/// is called for each stretch of `bytes` once it has been copied, so that
/// the copy grows while the source's pages are let go and peak memory
/// stays near the file's size (the copy's zeroed pages only become
/// resident as they are written).
fn interleave_groups(
    m: Matrix,
    group_rows: usize,
    bytes: &[u8],
    release: impl Fn(Range<usize>),
) -> Option<Packed> {
    /// Bytes copied between two releases.
    const STRETCH: usize = 4 << 20;
    let Matrix {
        ty,
        rows,
        row_bytes,
    } = m;
    let group_bytes = group_rows * row_bytes;
    let n_groups = rows.checked_div(group_rows)?;
    if !interleave::has_layout(ty) || n_groups == 0 {
        return None;
    }
    let mut out = Packed::zeroed(n_groups * group_bytes)?;
    let mut released = 0;
    for (g, (src, dst)) in bytes
        .chunks_exact(group_bytes)
        .zip(out.chunks_exact_mut(group_bytes))
        .enumerate()
    {
        if !interleave::interleave(ty, group_rows, src, dst) {
            return None;
        }
        let done = (g + 1) * group_bytes;
        if done - released >= STRETCH || g + 1 == n_groups {
            release(released..done);
            released = done;
        }
    }
    Some(out)
}

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
    row_bytes: usize,
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

    fn row(&self, t: usize) -> &[u8] {
        &self.bytes()[t * self.row_bytes..(t + 1) * self.row_bytes]
    }

    /// Rows `tokens`, one after the other.
    fn rows(&self, tokens: Range<usize>) -> &[u8] {
        &self.bytes()[tokens.start * self.row_bytes..tokens.end * self.row_bytes]
    }

    /// The panels of rows `tokens` (see `panels`): those of its whole
    /// panels, or nothing unless it starts on a panel.
    fn panels(&self, tokens: Range<usize>) -> &[ActBlockFacts] {
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
