//! The one normalization layer of every model shape: RMSNorm (Llama,
//! Gemma, Qwen; T5's variant), and LayerNorm (BERT, MPNet, nomic-bert,
//! GPT-2, Marian). A norm works on rows of `weight.len()` values.
//!
//! Gemma's `(1 + w)` form needs no variant of its own: its loader adds the
//! one to the weights.

use ferrite_kernels::math::layer_norm;

/// A normalization with its weights.
pub enum Norm {
    /// `x / sqrt(mean(x^2) + eps) * weight`, the sum of squares in f64 as
    /// ggml's `rms_norm` takes it (decoders).
    Rms { weight: Vec<f32>, eps: f32 },
    /// The same with the sum of squares in f32, as `T5LayerNorm` takes it
    /// (PyTorch's f32 `pow(2).mean(-1)`).
    RmsF32 { weight: Vec<f32>, eps: f32 },
    /// `(x - mean) / sqrt(var + eps) * weight + bias`, summed in the fixed
    /// order of `ferrite_kernels::math::layer_norm`.
    Layer {
        weight: Vec<f32>,
        bias: Vec<f32>,
        eps: f32,
    },
    /// No normalization: rows pass unchanged (a block without pre-norms,
    /// OLMo 2).
    Identity,
}

impl Norm {
    /// Normalizes each row of `x` into `out`.
    pub fn apply(&self, x: &[f32], out: &mut [f32]) {
        match self {
            Norm::Rms { weight, eps } => {
                let dim = weight.len();
                for (xr, or) in x.chunks_exact(dim).zip(out.chunks_exact_mut(dim)) {
                    let scale = rms_scale(xr, *eps);
                    for ((o, &v), &w) in or.iter_mut().zip(xr).zip(weight) {
                        *o = v * scale * w;
                    }
                }
            }
            Norm::RmsF32 { .. } | Norm::Layer { .. } => {
                out.copy_from_slice(x);
                self.apply_in_place(out);
            }
            Norm::Identity => out.copy_from_slice(x),
        }
    }

    /// Normalizes each row of `x` in place.
    pub fn apply_in_place(&self, x: &mut [f32]) {
        match self {
            Norm::Rms { weight, eps } => {
                for row in x.chunks_exact_mut(weight.len()) {
                    let scale = rms_scale(row, *eps);
                    for (v, &w) in row.iter_mut().zip(weight) {
                        *v = *v * scale * w;
                    }
                }
            }
            Norm::RmsF32 { weight, eps } => {
                for row in x.chunks_exact_mut(weight.len()) {
                    let mean = row.iter().map(|&v| v * v).sum::<f32>() / row.len() as f32;
                    let inv = 1.0 / (mean + eps).sqrt();
                    for (v, &w) in row.iter_mut().zip(weight) {
                        *v = *v * inv * w;
                    }
                }
            }
            Norm::Layer { weight, bias, eps } => {
                for row in x.chunks_exact_mut(weight.len()) {
                    layer_norm(row, weight, bias, *eps);
                }
            }
            Norm::Identity => {}
        }
    }

    /// `x = norm(x + y)`, row by row (a post-norm residual).
    pub fn add_then_apply(&self, x: &mut [f32], y: &[f32]) {
        x.iter_mut().zip(y).for_each(|(v, &a)| *v += a);
        self.apply_in_place(x);
    }
}

/// `1 / sqrt(mean(x^2) + eps)` for one row, the sum in f64.
pub fn rms_scale(x: &[f32], eps: f32) -> f32 {
    let sum: f64 = x.iter().map(|&v| f64::from(v * v)).sum();
    let mean = (sum / x.len() as f64) as f32;
    1.0 / (mean + eps).sqrt()
}
