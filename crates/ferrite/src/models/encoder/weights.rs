//! Where an encoder's weights come from: a GGUF file (any block type,
//! dequantized) or a safetensors directory (F32, F16 or BF16), read by name
//! with the shape checked, then packed for the f32 GEMM: F16 matrices stay
//! in f16 (`ferrite_kernels::gemm_f16`, same bits as converting them to
//! f32, half the memory), others are read into f32.

use std::sync::Arc;

use std::ops::Range;

use ferrite_kernels::gemm::{gemm_panels, Acts, OutPtr, PackedWeights};
use ferrite_kernels::gemm_bf16::{gemm_bf16_panels, PackedBf16};
use ferrite_kernels::gemm_f16::{gemm_f16_panels, PackedF16};
use ferrite_kernels::gemm_w8a16::{gemm_w8a16_panels, PackedW8};
use ferrite_kernels::quant::dequantize;
use ferrite_kernels::GgmlType;

use crate::formats::gguf::GgufFile;
use crate::formats::safetensors::SafetensorsDir;
use crate::Error;

/// A model file or directory that tensors are read from.
pub enum WeightSource {
    Gguf(Arc<GgufFile>),
    Safetensors(SafetensorsDir),
}

impl WeightSource {
    /// The path, for error messages.
    pub fn source(&self) -> String {
        match self {
            WeightSource::Gguf(f) => f.path().display().to_string(),
            WeightSource::Safetensors(d) => d.dir().display().to_string(),
        }
    }

    pub fn has(&self, name: &str) -> bool {
        match self {
            WeightSource::Gguf(f) => f.tensor(name).is_some(),
            WeightSource::Safetensors(d) => d.tensor_info(name).is_some(),
        }
    }

    /// The shape of `name` in row-major order (rows first), if present.
    pub fn shape(&self, name: &str) -> Option<Vec<usize>> {
        match self {
            WeightSource::Gguf(f) => f
                .tensor(name)
                .map(|t| t.info.dims.iter().rev().map(|&d| d as usize).collect()),
            WeightSource::Safetensors(d) => d.tensor_info(name).map(|t| t.shape.clone()),
        }
    }

    /// Tensor `name`, which must have `shape` (row-major): its type and
    /// bytes.
    fn raw(&self, name: &str, shape: &[usize]) -> Result<(GgmlType, &[u8]), Error> {
        let found = self
            .shape(name)
            .ok_or_else(|| Error::model(self.source(), format!("missing tensor '{name}'")))?;
        // A vector may be stored as [n] or [1, n]; compare without leading 1s.
        let strip = |s: &[usize]| -> Vec<usize> {
            let first = s.iter().position(|&d| d != 1).unwrap_or(s.len());
            s[first..].to_vec()
        };
        if strip(&found) != strip(shape) {
            return Err(Error::model(
                self.source(),
                format!("tensor '{name}' has shape {found:?}, expected {shape:?}"),
            ));
        }
        Ok(match self {
            WeightSource::Gguf(f) => {
                // Present: its shape was found above.
                let t = f.tensor(name).expect("tensor present");
                (t.info.ty, t.data)
            }
            WeightSource::Safetensors(d) => {
                let info = d.tensor_info(name).expect("tensor present");
                let ty = info
                    .ty
                    .filter(|t| matches!(t, GgmlType::F32 | GgmlType::F16 | GgmlType::Bf16));
                let ty = ty.ok_or_else(|| {
                    Error::model(
                        self.source(),
                        format!(
                            "tensor '{name}': dtype {} is not F32, F16 or BF16",
                            info.dtype
                        ),
                    )
                })?;
                (ty, d.tensor_data(info))
            }
        })
    }

    /// Tensor `name`, which must have `shape` (row-major), as f32 values.
    pub fn read(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>, Error> {
        let (ty, bytes) = self.raw(name, shape)?;
        let n: usize = shape.iter().product();
        let mut out = vec![0f32; n];
        dequantize(ty, bytes, &mut out)
            .map_err(|e| Error::model(self.source(), format!("tensor '{name}': {e}")))?;
        Ok(out)
    }

    /// Matrix `name` (`rows x cols`) packed for the GEMM: kept in f16 if
    /// stored so, else read into f32.
    pub fn packed(&self, name: &str, rows: usize, cols: usize) -> Result<Matrix, Error> {
        let (ty, bytes) = self.raw(name, &[rows, cols])?;
        if ty == GgmlType::F16 {
            if bytes.len() != 2 * rows * cols {
                return Err(Error::model(
                    self.source(),
                    format!(
                        "tensor '{name}': {} bytes for {rows} x {cols} f16",
                        bytes.len()
                    ),
                ));
            }
            return Ok(Matrix::F16(PackedF16::pack(bytes, rows, cols)));
        }
        let w = self.matrix(name, rows, cols)?;
        Ok(Matrix::F32(PackedWeights::pack(&w, rows, cols)))
    }

    /// A vector of `n` values.
    pub fn vector(&self, name: &str, n: usize) -> Result<Vec<f32>, Error> {
        self.read(name, &[n])
    }

    /// A matrix of `rows x cols`.
    pub fn matrix(&self, name: &str, rows: usize, cols: usize) -> Result<Vec<f32>, Error> {
        self.read(name, &[rows, cols])
    }
}

/// An encoder's input tables.
pub struct TokenTables {
    pub n_vocab: usize,
    /// `(n_vocab, dim)`.
    pub token_embd: Vec<f32>,
    /// The token type table, `(n_types, dim)`, if the model has one
    /// (inputs are type 0 but for a cross-encoder's second text).
    pub types: Option<Vec<f32>>,
}

/// The token embedding table stored as `token` and the token type table
/// `token_type`, shapes checked against `dim`.
pub fn token_tables(
    src: &WeightSource,
    token: &str,
    token_type: &str,
    dim: usize,
) -> Result<TokenTables, Error> {
    let n_vocab = match src.shape(token).as_deref() {
        Some([n, d]) if *d == dim && *n > 0 => *n,
        other => {
            return Err(Error::model(
                src.source(),
                format!("'{token}' has shape {other:?}, expected (n_vocab, {dim})"),
            ))
        }
    };
    let types = match src.shape(token_type).as_deref() {
        Some([n, d]) if *d == dim && *n > 0 => Some(src.matrix(token_type, *n, dim)?),
        None => None,
        other => {
            return Err(Error::model(
                src.source(),
                format!("'{token_type}' has shape {other:?}, expected (n_types, {dim})"),
            ))
        }
    };
    Ok(TokenTables {
        n_vocab,
        token_embd: src.matrix(token, n_vocab, dim)?,
        types,
    })
}

/// A weight matrix packed for the GEMM, in f32 or kept in f16, or rounded
/// to bf16 or int8 for the optional products ([`Matrix::to_bf16`],
/// [`Matrix::to_int8`]).
pub enum Matrix {
    F32(PackedWeights),
    F16(PackedF16),
    Bf16(PackedBf16),
    Int8(PackedW8),
}

impl Matrix {
    /// Output features.
    pub fn n(&self) -> usize {
        match self {
            Matrix::F32(w) => w.n(),
            Matrix::F16(w) => w.n(),
            Matrix::Bf16(w) => w.n(),
            Matrix::Int8(w) => w.n(),
        }
    }

    /// Input features.
    pub fn k(&self) -> usize {
        match self {
            Matrix::F32(w) => w.k(),
            Matrix::F16(w) => w.k(),
            Matrix::Bf16(w) => w.k(),
            Matrix::Int8(w) => w.k(),
        }
    }

    pub fn n_panels(&self) -> usize {
        match self {
            Matrix::F32(w) => w.n_panels(),
            Matrix::F16(w) => w.n_panels(),
            Matrix::Bf16(w) => w.n_panels(),
            Matrix::Int8(w) => w.n_panels(),
        }
    }

    /// This matrix rounded to bf16 (see `ferrite_kernels::gemm_bf16`).
    pub fn to_bf16(&self) -> Matrix {
        match self {
            Matrix::Bf16(w) => Matrix::Bf16(w.clone()),
            _ => Matrix::Bf16(PackedBf16::from_rows(self.n(), self.k(), |j, out| {
                self.row(j, out)
            })),
        }
    }

    /// This matrix rounded to int8 per feature and group of inputs (see
    /// `ferrite_kernels::gemm_w8a16`), its inputs smoothed for activations
    /// whose largest magnitudes per input are `x_max` (SmoothQuant: input
    /// `kk` divided by `s = x_max^α / w_max^(1 - α)`, `w_max` its weights'
    /// largest magnitude, [`super::SMOOTH_ALPHA`]; 1 where either is 0).
    ///
    /// # Panics
    /// If `x_max` is not `k` long, or the matrix is already rounded.
    pub fn to_int8(&self, x_max: &[f32]) -> Matrix {
        let (n, k) = (self.n(), self.k());
        assert_eq!(x_max.len(), k, "one range per input");
        let mut w_max = vec![0f32; k];
        let mut buf = vec![0f32; k];
        for j in 0..n {
            self.row(j, &mut buf);
            w_max
                .iter_mut()
                .zip(&buf)
                .for_each(|(m, &v)| *m = m.max(v.abs()));
        }
        let alpha = super::SMOOTH_ALPHA;
        let smooth: Vec<f32> = x_max
            .iter()
            .zip(&w_max)
            .map(|(&x, &w)| {
                let s = x.powf(alpha) / w.powf(1.0 - alpha);
                if s.is_finite() && s > 0.0 {
                    s
                } else {
                    1.0
                }
            })
            .collect();
        Matrix::Int8(PackedW8::from_rows(n, k, Some(&smooth), |j, out| {
            self.row(j, out)
        }))
    }

    /// Row `j` (output feature `j`'s weights) as f32, for a matrix in f32
    /// or f16 (the rounded ones are not read back).
    fn row(&self, j: usize, out: &mut [f32]) {
        match self {
            Matrix::F32(w) => w.row(j, out),
            Matrix::F16(w) => w.row(j, out),
            Matrix::Bf16(_) | Matrix::Int8(_) => {
                unreachable!("a rounded matrix is not rounded again")
            }
        }
    }

    /// `C = A · Wᵀ` for the output features of `panels`.
    ///
    /// # Safety
    /// As `ferrite_kernels::gemm::gemm_panels`.
    pub unsafe fn gemm_panels(&self, a: Acts, panels: Range<usize>, out: OutPtr) {
        // SAFETY: the contract is the caller's.
        unsafe {
            match self {
                Matrix::F32(w) => gemm_panels(a, w, panels, out),
                Matrix::F16(w) => gemm_f16_panels(a, w, panels, out),
                Matrix::Bf16(w) => gemm_bf16_panels(a, w, panels, out),
                Matrix::Int8(w) => gemm_w8a16_panels(a, w, panels, out),
            }
        }
    }
}

/// A fully connected layer `y = x · Wᵀ + b` on packed weights.
pub struct Dense {
    pub w: Matrix,
    /// `(n,)`, if the layer has one.
    pub bias: Option<Vec<f32>>,
}

impl Dense {
    /// Stacks several weight matrices (each `rows_i x cols`) into one layer
    /// with `sum rows_i` outputs, e.g. Q, K and V into one product.
    pub fn stacked(parts: &[(Vec<f32>, Option<Vec<f32>>)], cols: usize) -> Dense {
        let rows: Vec<usize> = parts.iter().map(|(w, _)| w.len() / cols).collect();
        let n: usize = rows.iter().sum();
        let mut w = PackedWeights::default();
        w.repack(n, cols, |j, out| {
            let mut j = j;
            for ((part, _), &r) in parts.iter().zip(&rows) {
                if j < r {
                    out.copy_from_slice(&part[j * cols..(j + 1) * cols]);
                    return;
                }
                j -= r;
            }
        });
        // A part without a bias adds zeros, if any other part has one.
        let bias = parts.iter().any(|(_, b)| b.is_some()).then(|| {
            parts
                .iter()
                .zip(&rows)
                .flat_map(|((_, b), &r)| b.clone().unwrap_or_else(|| vec![0.0; r]))
                .collect()
        });
        Dense {
            w: Matrix::F32(w),
            bias,
        }
    }

    pub fn new(w: &[f32], bias: Option<Vec<f32>>, rows: usize, cols: usize) -> Dense {
        Dense {
            w: Matrix::F32(PackedWeights::pack(w, rows, cols)),
            bias,
        }
    }

    /// `C = A · Wᵀ` for the output features of `panels` (bias and
    /// activation as `out` says).
    ///
    /// # Safety
    /// As `ferrite_kernels::gemm::gemm_panels`.
    pub unsafe fn gemm_panels(&self, a: Acts, panels: Range<usize>, out: OutPtr) {
        // SAFETY: the contract is the caller's.
        unsafe { self.w.gemm_panels(a, panels, out) }
    }
}
