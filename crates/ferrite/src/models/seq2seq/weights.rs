//! Loading an encoder-decoder's matrices as [`Proj`]s: packed f32 for the
//! GEMM, or quantized to Q8_0 at load into a `Linear` (the decoders'
//! matrix type and kernels), and running them over rows of activations.

use ferrite_kernels::math::Activation;
use ferrite_kernels::GgmlType;

use super::Proj;
use crate::models::encoder::dense;
use crate::models::encoder::weights::{Dense, WeightSource};
use crate::parallel::{DisjointSlice, Threads};
use crate::tensor::{matmul_many, Linear, MatmulJob, QuantizedActs};
use crate::Error;

/// How matrices are kept in memory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WeightFormat {
    /// As read, converted to f32.
    #[default]
    F32,
    /// Quantized to Q8_0 at load (blocks of 32 values with one f16 scale);
    /// matrices whose rows are not whole blocks stay f32.
    Q8_0,
}

/// Reads matrices from a weight source in one format.
pub struct ProjLoader<'a> {
    pub src: &'a WeightSource,
    pub format: WeightFormat,
}

impl ProjLoader<'_> {
    /// Matrix `w` (`rows x cols`) with the bias `b` (`rows`) if named.
    pub fn proj(&self, w: &str, b: Option<&str>, rows: usize, cols: usize) -> Result<Proj, Error> {
        let weights = self.src.matrix(w, rows, cols)?;
        let bias = b.map(|b| self.src.vector(b, rows)).transpose()?;
        self.from_values(w, &weights, bias, rows, cols)
    }

    /// A matrix given as values (e.g. a tied embedding table).
    #[allow(clippy::wrong_self_convention)] // `self` holds the weight format
    pub fn from_values(
        &self,
        name: &str,
        weights: &[f32],
        bias: Option<Vec<f32>>,
        rows: usize,
        cols: usize,
    ) -> Result<Proj, Error> {
        let block = GgmlType::Q8_0.block_size();
        if self.format == WeightFormat::Q8_0 && cols.is_multiple_of(block) {
            let mut w = Linear::quantized(name, GgmlType::Q8_0, weights, rows, cols)?;
            w.bias = bias;
            return Ok(Proj::Quant(w));
        }
        Ok(Proj::F32(Dense::new(weights, bias, rows, cols)))
    }
}

/// `out = act(x · Wᵀ + b)` for `m` rows of `x`; `out` is `m x rows`.
/// `acts` is reused for quantized weights' activation rows.
pub fn apply(
    p: &Proj,
    x: &[f32],
    m: usize,
    out: &mut [f32],
    act: Option<Activation>,
    acts: &mut QuantizedActs,
    threads: &Threads,
) -> Result<(), Error> {
    let (n, k) = (p.rows(), p.cols());
    let (x, out) = (&x[..m * k], &mut out[..m * n]);
    match p {
        Proj::F32(d) => dense(d, x, m, out, act, threads),
        Proj::Quant(w) => {
            // The bias and the activation are applied by the product's
            // threads, as each value is stored.
            w.matmul_act(x, out, act, acts, threads)?;
        }
    }
    Ok(())
}

/// `f` on every row (`width` values) of `out`, the rows split across
/// threads (element-wise work, such as an activation or a bias: each value
/// the same whichever thread computes it).
pub fn each_row(out: &mut [f32], width: usize, threads: &Threads, f: impl Fn(&mut [f32]) + Sync) {
    if width == 0 {
        return;
    }
    let m = out.len() / width;
    let out = DisjointSlice::new(&mut out[..m * width]);
    threads.split(m, |rows| {
        // SAFETY: the row ranges of different threads are disjoint, so are
        // these segments.
        let seg = unsafe { out.segment(rows.start * width, rows.len() * width) };
        seg.chunks_exact_mut(width).for_each(&f);
    });
}

/// [`apply`] (no activation) of several projections of the same `m` rows
/// of `x`, each into its `out`: when all are quantized, as one
/// `matmul_many` (the rows quantized once, one parallel step), else one
/// by one. The same values either way: each is one dot product per output.
pub fn apply_same_input(
    jobs: &mut [(&Proj, &mut [f32])],
    x: &[f32],
    m: usize,
    acts: &mut QuantizedActs,
    threads: &Threads,
) -> Result<(), Error> {
    let cols = jobs.first().map_or(0, |(p, _)| p.cols());
    let quant: Option<Vec<MatmulJob>> = jobs
        .iter_mut()
        .map(|(p, out)| match p {
            Proj::Quant(w) => Some(MatmulJob::new(w, &mut out[..m * w.rows])),
            Proj::F32(_) => None,
        })
        .collect();
    if let Some(mut quant) = quant {
        // Biases included (Linear::bias, added by the products' threads).
        matmul_many(&mut quant, &x[..m * cols], acts, threads)?;
        return Ok(());
    }
    for (p, out) in jobs.iter_mut() {
        apply(p, x, m, out, None, acts, threads)?;
    }
    Ok(())
}
