//! Weights as the model code sees them: a [`Linear`] matrix in any block
//! format, and an [`Embedding`] table, both borrowing their bytes from the
//! memory-mapped model file.
//!
//! One model file serves every weight format: the format is data (a
//! [`GgmlType`]), and the matmul picks the matching dot product from the
//! kernels crate.

use std::ops::Range;
use std::sync::Arc;

use ferrite_kernels::dot::interleave::{self, RowOf};
use ferrite_kernels::matmul::{Matrix as MatrixView, RowKernels};
use ferrite_kernels::quant::{dequantize, quantize};
use ferrite_kernels::GgmlType;

use crate::formats::gguf::GgufFile;
use crate::formats::names;
use crate::Error;

mod acts;
mod matmul;
mod packed;

pub use acts::QuantizedActs;
pub use matmul::{matmul_each, matmul_many, MatmulJob, TILE_ROWS};
pub use packed::Packed;

/// Bytes of one tensor: a stretch of a shared, memory-mapped file, or
/// bytes made in memory (weights quantized at load).
#[derive(Clone)]
pub struct TensorBytes {
    src: Source,
    range: Range<usize>,
}

#[derive(Clone)]
enum Source {
    File(Arc<GgufFile>),
    Owned(Arc<[u8]>),
}

impl TensorBytes {
    pub fn bytes(&self) -> &[u8] {
        // The range was taken from a validated tensor view of this file,
        // or is the whole of the owned bytes.
        match &self.src {
            Source::File(f) => &f.bytes()[self.range.clone()],
            Source::Owned(b) => &b[self.range.clone()],
        }
    }

    /// Whether both are the same bytes of the same file.
    fn same_as(&self, other: &TensorBytes) -> bool {
        let same_src = match (&self.src, &other.src) {
            (Source::File(a), Source::File(b)) => Arc::ptr_eq(a, b),
            (Source::Owned(a), Source::Owned(b)) => Arc::ptr_eq(a, b),
            _ => false,
        };
        same_src && self.range == other.range
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
            src: Source::File(self.file.clone()),
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
        self.linear_of(name, ty, bytes, rows, cols)
    }

    /// Matrix `e` of the `n` matrices of `rows x cols` stacked in the 3-D
    /// tensor `name` (ggml dims `[cols, rows, n]`: mixture-of-experts
    /// weights, one matrix per expert), a [`Linear`] over its own stretch
    /// of the tensor.
    pub fn stacked_linear(
        &self,
        name: &str,
        (e, n): (usize, usize),
        rows: usize,
        cols: usize,
    ) -> Result<Linear, Error> {
        let (ty, bytes) = self.get(name, &[cols as u64, rows as u64, n as u64])?;
        let each = bytes.range.len() / n.max(1);
        let start = bytes.range.start + e * each;
        let part = TensorBytes {
            src: bytes.src,
            range: start..start + each,
        };
        self.linear_of(name, ty, part, rows, cols)
    }

    /// Rows `part` of the `total x cols` matrix stored as `name`, as a
    /// matrix of their own (Phi-3's gate and up halves of `ffn_up`).
    pub fn linear_rows(
        &self,
        name: &str,
        total: usize,
        cols: usize,
        part: Range<usize>,
    ) -> Result<Linear, Error> {
        let (ty, mut bytes) = self.get(name, &[cols as u64, total as u64])?;
        if part.is_empty() || part.end > total {
            return Err(Error::model(
                self.source(),
                format!("tensor '{name}': rows {part:?} of {total}"),
            ));
        }
        let row_bytes = bytes.bytes().len() / total;
        let start = bytes.range.start;
        bytes.range = start + part.start * row_bytes..start + part.end * row_bytes;
        self.linear_of(name, ty, bytes, part.len(), cols)
    }

    /// A `rows x cols` matrix of type `ty` over `bytes` (of tensor `name`).
    fn linear_of(
        &self,
        name: &str,
        ty: GgmlType,
        bytes: TensorBytes,
        rows: usize,
        cols: usize,
    ) -> Result<Linear, Error> {
        // The grouped rows are read from the copy from now on.
        let start = bytes.range.start;
        let release = |r: Range<usize>| self.file.release(start + r.start..start + r.end);
        let int8_groups = self.int8_groups(ty, cols)?;
        Linear::new(
            &self.source(),
            name,
            ty,
            bytes,
            (rows, cols),
            release,
            int8_groups,
        )
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

    /// The `n` vectors of `len` values stacked in the 2-D tensor `name`
    /// (ggml dims `[len, n]`: the biases of mixture-of-experts weights, one
    /// per expert), dequantized to f32.
    pub fn stacked_vectors(
        &self,
        name: &str,
        n: usize,
        len: usize,
    ) -> Result<Vec<Vec<f32>>, Error> {
        let (ty, bytes) = self.get(name, &[len as u64, n as u64])?;
        let mut all = vec![0f32; n * len];
        dequantize(ty, bytes.bytes(), &mut all)
            .map_err(|e| Error::model(self.source(), format!("tensor '{name}': {e}")))?;
        Ok(all.chunks_exact(len.max(1)).map(<[f32]>::to_vec).collect())
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
            n_vocab,
            bytes,
            groups: None,
        })
    }
}

/// An embedding table: row `i` is the vector of token `i`.
pub struct Embedding {
    pub ty: GgmlType,
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
        let same = self.bytes.same_as(&output.bytes) && self.ty == output.ty;
        if same {
            self.groups = output
                .groups
                .clone()
                .map(|g| (g, output.kernels.group_rows()));
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
    /// The active kernel set's kernels for this type (`ferrite_kernels::matmul`
    /// decides how they run).
    kernels: RowKernels,
    /// When the kernels read an interleaved copy: the first
    /// `rows / R * R` rows, repacked in groups of `R = kernels.group_rows()`
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

impl Linear {
    /// A `rows x cols` matrix of type `ty` over `bytes` (of tensor `name`
    /// in `source`, for messages), repacked for the active kernels where
    /// they read a repacked copy; `release(range)` is told which of `bytes`
    /// were copied.
    fn new(
        source: &str,
        name: &str,
        ty: GgmlType,
        bytes: TensorBytes,
        (rows, cols): (usize, usize),
        release: impl Fn(Range<usize>),
        int8_groups: Option<usize>,
    ) -> Result<Linear, Error> {
        let kernels = RowKernels::for_type(ty).ok_or_else(|| {
            Error::model(
                source,
                format!("tensor '{name}': no matmul kernel for type {ty}"),
            )
        })?;
        let row_bytes = bytes.bytes().len() / rows.max(1);
        let matrix = Matrix {
            ty,
            rows,
            row_bytes,
        };
        let groups = kernels
            .interleaves()
            .then(|| interleave_groups(matrix, kernels.group_rows(), bytes.bytes(), release))
            .flatten()
            .map(Arc::new);
        Ok(Linear {
            ty,
            rows,
            cols,
            row_bytes,
            bytes,
            kernels,
            groups,
            bias: None,
            int8_groups,
        })
    }

    /// `weights` (`rows x cols` f32 values, row after row) quantized to
    /// `ty` at load, with the reference quantizer (`name` for messages).
    pub fn quantized(
        name: &str,
        ty: GgmlType,
        weights: &[f32],
        rows: usize,
        cols: usize,
    ) -> Result<Linear, Error> {
        let err = |e: String| Error::model(name, format!("{ty} quantization: {e}"));
        let row_bytes = ty
            .bytes_for(cols as u64)
            .ok_or_else(|| err(format!("{cols} columns are not whole blocks")))?
            as usize;
        if weights.len() != rows * cols {
            return Err(err(format!("{} values for {rows} x {cols}", weights.len())));
        }
        let mut data = vec![0u8; rows * row_bytes];
        for (src, dst) in weights
            .chunks_exact(cols.max(1))
            .zip(data.chunks_exact_mut(row_bytes.max(1)))
        {
            quantize(ty, src, dst).map_err(|e| err(e.to_string()))?;
        }
        let bytes = TensorBytes {
            range: 0..data.len(),
            src: Source::Owned(data.into()),
        };
        Linear::new(name, name, ty, bytes, (rows, cols), |_| {}, None)
    }

    /// The matrix as the kernels' matmul reads it.
    fn view(&self) -> MatrixView<'_> {
        MatrixView {
            kernels: &self.kernels,
            rows: self.rows,
            row_bytes: self.row_bytes,
            data: self.bytes.bytes(),
            groups: self.groups.as_deref().map(|g| &g[..]),
        }
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
