//! Rotary position embeddings (RoPE), as ggml's `rope` computes them.
//!
//! Pair `i` of the first `dims` values of a head is rotated by angle
//! `pos * base^(-2i/dims)` (divided by a linear scaling factor if the model
//! has one). Two layouts pair the values differently:
//! - [`RopeStyle::Adjacent`] rotates `(x[2i], x[2i+1])` (ggml "normal",
//!   used for Llama files, whose Q/K rows the converter permuted);
//! - [`RopeStyle::Halves`] rotates `(x[i], x[i + dims/2])` (ggml "neox",
//!   Gemma, Qwen, GPT-NeoX).

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeStyle {
    Adjacent,
    Halves,
}

#[derive(Clone, Debug)]
pub struct Rope {
    /// Values per head that are rotated (`rope.dimension_count`).
    pub dims: usize,
    pub style: RopeStyle,
    /// `base^(-2/dims)`: each pair's angle is the previous one's times this.
    theta_scale: f32,
    /// Linear position scaling (`1 / rope.scaling.factor`), 1 if none.
    pub freq_scale: f32,
}

impl Rope {
    pub fn new(dims: usize, base: f32, freq_scale: f32, style: RopeStyle) -> Rope {
        Rope {
            dims,
            style,
            theta_scale: base.powf(-2.0 / dims as f32),
            freq_scale,
        }
    }

    /// (cos, sin) of each pair's angle at `pos`: `dims / 2` values each.
    /// The angle is built as ggml builds it: start at `pos`, multiply by
    /// `theta_scale` once per pair, scale by `freq_scale`, all in f32.
    pub fn cos_sin(&self, pos: usize, cos: &mut [f32], sin: &mut [f32]) {
        let mut theta_base = pos as f32;
        for (c, s) in cos.iter_mut().zip(sin.iter_mut()) {
            let theta = self.freq_scale * theta_base;
            *c = theta.cos();
            *s = theta.sin();
            theta_base *= self.theta_scale;
        }
    }

    /// Rotates every `head_dim`-sized head in `x` by the precomputed angles.
    pub fn apply(&self, x: &mut [f32], head_dim: usize, cos: &[f32], sin: &[f32]) {
        let half = self.dims / 2;
        for head in x.chunks_exact_mut(head_dim) {
            for i in 0..half {
                let (a, b) = match self.style {
                    RopeStyle::Adjacent => (2 * i, 2 * i + 1),
                    RopeStyle::Halves => (i, i + half),
                };
                let (x0, x1) = (head[a], head[b]);
                head[a] = x0 * cos[i] - x1 * sin[i];
                head[b] = x0 * sin[i] + x1 * cos[i];
            }
        }
    }
}
