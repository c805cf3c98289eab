//! RMSNorm (Llama, Gemma) and LayerNorm (BERT, GPT-2), one row at a time.
//! Sums of squares are accumulated in f64 as ggml's `rms_norm` does.

/// `out = x / sqrt(mean(x^2) + eps) * weight`, row by row (`weight.len()`
/// values per row).
pub fn rms_norm(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    let dim = weight.len();
    for (xr, or) in x.chunks_exact(dim).zip(out.chunks_exact_mut(dim)) {
        let scale = rms_scale(xr, eps);
        for ((o, &v), &w) in or.iter_mut().zip(xr).zip(weight) {
            *o = v * scale * w;
        }
    }
}

/// `1 / sqrt(mean(x^2) + eps)` for one row.
pub fn rms_scale(x: &[f32], eps: f32) -> f32 {
    let sum: f64 = x.iter().map(|&v| f64::from(v * v)).sum();
    let mean = (sum / x.len() as f64) as f32;
    1.0 / (mean + eps).sqrt()
}

/// RMSNorm in place over each `dim`-sized piece of `x` (per-head norms).
pub fn rms_norm_in_place(x: &mut [f32], weight: &[f32], eps: f32) {
    let dim = weight.len();
    for row in x.chunks_exact_mut(dim) {
        let scale = rms_scale(row, eps);
        for (v, &w) in row.iter_mut().zip(weight) {
            *v = *v * scale * w;
        }
    }
}
