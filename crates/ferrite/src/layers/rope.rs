//! Rotary position embeddings (RoPE), as ggml's `rope` computes them.
//!
//! Pair `i` of the first `dims` values of a head is rotated by angle
//! `pos * base^(-2i/dims)` (divided by a linear scaling factor if the model
//! has one). Two layouts pair the values differently:
//! - [`RopeStyle::Adjacent`] rotates `(x[2i], x[2i+1])` (ggml "normal",
//!   used for Llama files, whose Q/K rows the converter permuted);
//! - [`RopeStyle::Halves`] rotates `(x[i], x[i + dims/2])` (ggml "neox",
//!   Gemma, Qwen, GPT-NeoX).
//!
//! Scalings other than linear ([`Scaling`]: Llama 3's per-frequency
//! factors, YaRN, dynamic NTK) give each pair its own inverse frequency,
//! computed as transformers' `ROPE_INIT_FUNCTIONS` compute them (in f32,
//! in their order), and the angle is `pos * inv_freq[i]` in f32, as
//! transformers' rotary embedding does; cos and sin are then multiplied by
//! the scaling's attention factor (YaRN). Unscaled and linear RoPE keep
//! ggml's angle recurrence above (their results do not change).

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
    /// Per-pair inverse frequencies and the cos/sin factor of a
    /// non-linear scaling (see the module notes); `None`: ggml's angles.
    scaled: Option<(Vec<f32>, f32)>,
    /// The most positions this rotation is exact for (dynamic NTK scaling,
    /// which ferrite computes only up to the length it starts at).
    pub max_positions: Option<usize>,
    /// LongRoPE (Phi-3): the rotation used instead of this one when the
    /// context is longer than the given original context (see
    /// [`Rope::for_context`]).
    pub long: Option<Box<(Rope, usize)>>,
}

/// A RoPE scaling, with transformers' `rope_parameters` names.
#[derive(Clone, Debug, PartialEq)]
pub enum Scaling {
    /// Positions divided by `factor` (transformers `linear`).
    Linear { factor: f32 },
    /// Llama 3.1's per-frequency factors (transformers `llama3`).
    Llama3 {
        factor: f32,
        low_freq_factor: f32,
        high_freq_factor: f32,
        original_ctx: usize,
    },
    /// YaRN (transformers `yarn`).
    Yarn {
        factor: f32,
        original_ctx: usize,
        beta_fast: f32,
        beta_slow: f32,
        /// The cos/sin factor; `None`: `0.1 ln(factor) + 1`.
        attention_factor: Option<f32>,
        /// Whether the correction range is rounded out to whole pairs.
        truncate: bool,
    },
    /// Dynamic NTK (transformers `dynamic`): the base grows once a sequence
    /// is longer than `max_positions`; unchanged up to it.
    Dynamic { factor: f32, max_positions: usize },
}

/// Why a RoPE scaling's parameters are unusable (the names are
/// transformers' `rope_parameters` keys).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ScalingError {
    #[error("{param} = {value}: must be a positive number")]
    NotPositive { param: &'static str, value: f32 },
    #[error("high_freq_factor = {high}: must exceed low_freq_factor = {low}")]
    FrequencyOrder { low: f32, high: f32 },
    #[error("original_max_position_embeddings = 0")]
    NoOriginalContext,
}

impl Scaling {
    /// The name transformers and GGUF give it.
    pub fn name(&self) -> &'static str {
        match self {
            Scaling::Linear { .. } => "linear",
            Scaling::Llama3 { .. } => "llama3",
            Scaling::Yarn { .. } => "yarn",
            Scaling::Dynamic { .. } => "dynamic",
        }
    }

    /// Checks the parameters; the error names the bad one
    /// (transformers' `rope_parameters` key).
    pub fn check(&self) -> Result<(), ScalingError> {
        let positive = |param: &'static str, value: f32| {
            if value.is_finite() && value > 0.0 {
                Ok(())
            } else {
                Err(ScalingError::NotPositive { param, value })
            }
        };
        match *self {
            Scaling::Linear { factor } | Scaling::Dynamic { factor, .. } => {
                positive("factor", factor)
            }
            Scaling::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_ctx,
            } => {
                positive("factor", factor)?;
                positive("low_freq_factor", low_freq_factor)?;
                positive("high_freq_factor", high_freq_factor)?;
                if high_freq_factor <= low_freq_factor {
                    return Err(ScalingError::FrequencyOrder {
                        low: low_freq_factor,
                        high: high_freq_factor,
                    });
                }
                if original_ctx == 0 {
                    return Err(ScalingError::NoOriginalContext);
                }
                Ok(())
            }
            Scaling::Yarn {
                factor,
                original_ctx,
                beta_fast,
                beta_slow,
                attention_factor,
                ..
            } => {
                positive("factor", factor)?;
                positive("beta_fast", beta_fast)?;
                positive("beta_slow", beta_slow)?;
                if let Some(a) = attention_factor {
                    positive("attention_factor", a)?;
                }
                if original_ctx == 0 {
                    return Err(ScalingError::NoOriginalContext);
                }
                Ok(())
            }
        }
    }
}

/// Where an inverse frequency falls in Llama 3's scaling.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Llama3Band {
    /// Wavelength under `original_ctx / high_freq_factor`: kept.
    High,
    /// Wavelength over `original_ctx / low_freq_factor`: divided by the factor.
    Low,
    /// In between: mixed, with this weight on the unscaled frequency.
    Smooth(f32),
}

impl Scaling {
    /// The band of inverse frequency `f` under a [`Scaling::Llama3`] (in
    /// f32, as transformers and convert_hf_to_gguf.py compute it); `High`
    /// for any other scaling.
    pub fn llama3_band(&self, f: f32) -> Llama3Band {
        let Scaling::Llama3 {
            low_freq_factor: low,
            high_freq_factor: high,
            original_ctx,
            ..
        } = *self
        else {
            return Llama3Band::High;
        };
        let old = original_ctx as f32;
        let wavelen = 2.0 * std::f32::consts::PI / f;
        if wavelen < old / high {
            Llama3Band::High
        } else if wavelen > old / low {
            Llama3Band::Low
        } else {
            Llama3Band::Smooth((old / wavelen - low) / (high - low))
        }
    }

    /// Llama 3's per-pair divisors of the unscaled inverse frequencies, as
    /// convert_hf_to_gguf.py stores them in `rope_freqs.weight`.
    pub fn llama3_factors(&self, dims: usize, base: f32) -> Vec<f32> {
        let factor = match *self {
            Scaling::Llama3 { factor, .. } => factor,
            _ => 1.0,
        };
        default_inv_freq(dims, base)
            .into_iter()
            .map(|f| match self.llama3_band(f) {
                Llama3Band::High => 1.0,
                Llama3Band::Low => factor,
                Llama3Band::Smooth(s) => 1.0 / ((1.0 - s) / factor + s),
            })
            .collect()
    }
}

/// LongRoPE's inverse frequencies for one factor list (one factor per
/// pair): `1 / (factor[i] * base^(2i / dims))` in f32, in transformers'
/// order (`_compute_longrope_parameters`).
pub fn longrope_inv_freq(dims: usize, base: f32, factors: &[f32]) -> Vec<f32> {
    factors
        .iter()
        .enumerate()
        .map(|(i, f)| 1.0 / (f * base.powf((2 * i) as f32 / dims as f32)))
        .collect()
}

/// LongRoPE's cos/sin factor when the config gives none:
/// `sqrt(1 + ln(factor) / ln(original_ctx))` for a factor above 1, else 1.
pub fn longrope_attention_factor(factor: f64, original_ctx: usize) -> f32 {
    if factor <= 1.0 {
        1.0
    } else {
        (1.0 + factor.ln() / (original_ctx as f64).ln()).sqrt() as f32
    }
}

/// transformers' unscaled inverse frequencies of `dims` rotated values:
/// `1 / base^(2i / dims)`, in f32.
pub fn default_inv_freq(dims: usize, base: f32) -> Vec<f32> {
    (0..dims / 2)
        .map(|i| 1.0 / base.powf((2 * i) as f32 / dims as f32))
        .collect()
}

/// The rotation of nomic-bert's encoder for a sequence of `len` tokens
/// (`dims` rotated values per head, the whole head): inverse frequencies
/// `1 / base^(2i / dims)` computed in f64 and rounded to f32, as its
/// reference computes them; with `ntk = (factor, trained)`, the base is
/// first stretched for a sequence longer than `trained` (dynamic NTK,
/// per sequence, also in f64).
pub fn encoder_rope(base: f64, ntk: Option<(f64, usize)>, dims: usize, len: usize) -> Rope {
    let base = match ntk {
        Some((factor, trained)) if len > trained => {
            let ratio = factor * len as f64 / trained as f64 - (factor - 1.0);
            base * ratio.powf(dims as f64 / (dims as f64 - 2.0))
        }
        _ => base,
    };
    let inv_freq = (0..dims / 2)
        .map(|i| (1.0 / base.powf((2 * i) as f64 / dims as f64)) as f32)
        .collect();
    Rope::with_inv_freq(inv_freq, 1.0, RopeStyle::Halves)
}

/// The inverse frequencies and cos/sin factor of `scaling` for `dims`
/// rotated values of base `base`, as transformers' `ROPE_INIT_FUNCTIONS`
/// compute them; `seq_len` is the sequence length dynamic NTK scales for
/// (`None`: its `max_positions`, i.e. unscaled).
pub fn scaled_inv_freq(
    dims: usize,
    base: f32,
    scaling: &Scaling,
    seq_len: Option<usize>,
) -> (Vec<f32>, f32) {
    let pairs = dims / 2;
    match *scaling {
        Scaling::Linear { factor } => (
            default_inv_freq(dims, base)
                .into_iter()
                .map(|f| f / factor)
                .collect(),
            1.0,
        ),
        Scaling::Llama3 { factor, .. } => {
            let inv = default_inv_freq(dims, base)
                .into_iter()
                .map(|f| match scaling.llama3_band(f) {
                    Llama3Band::High => f,
                    Llama3Band::Low => f / factor,
                    Llama3Band::Smooth(s) => (1.0 - s) * f / factor + s * f,
                })
                .collect();
            (inv, 1.0)
        }
        Scaling::Yarn {
            factor,
            original_ctx,
            beta_fast,
            beta_slow,
            attention_factor,
            truncate,
        } => {
            let d = dims as f64;
            let (b, ctx) = (base as f64, original_ctx as f64);
            let correction = |rotations: f64| {
                d * (ctx / (rotations * 2.0 * std::f64::consts::PI)).ln() / (2.0 * b.ln())
            };
            let (mut low, mut high) = (correction(beta_fast as f64), correction(beta_slow as f64));
            if truncate {
                (low, high) = (low.floor(), high.ceil());
            }
            // As transformers: the range in f64, the ramp's offset and
            // width each rounded to f32 once (`(arange_f32 - low) / (high -
            // low)` with Python floats), which matters when the range is
            // not rounded out to whole numbers.
            let (low, mut high) = (low.max(0.0), high.min(d - 1.0));
            if low == high {
                high += 0.001;
            }
            let (span, low) = ((high - low) as f32, low as f32);
            let inv = (0..pairs)
                .map(|i| {
                    let pos_freq = base.powf((2 * i) as f32 / dims as f32);
                    let extrapolation = 1.0 / pos_freq;
                    let interpolation = 1.0 / (factor * pos_freq);
                    let ramp = ((i as f32 - low) / span).clamp(0.0, 1.0);
                    let extra = 1.0 - ramp;
                    interpolation * (1.0 - extra) + extrapolation * extra
                })
                .collect();
            let attn = attention_factor.unwrap_or(if factor <= 1.0 {
                1.0
            } else {
                (0.1 * (factor as f64).ln() + 1.0) as f32
            });
            (inv, attn)
        }
        Scaling::Dynamic {
            factor,
            max_positions,
        } => {
            let seq = seq_len.unwrap_or(max_positions).max(max_positions) as f64;
            let (f, m, d) = (factor as f64, max_positions as f64, dims as f64);
            let base = base as f64 * ((f * seq / m) - (f - 1.0)).powf(d / (d - 2.0));
            (default_inv_freq(dims, base as f32), 1.0)
        }
    }
}

impl Rope {
    pub fn new(dims: usize, base: f32, freq_scale: f32, style: RopeStyle) -> Rope {
        Rope {
            dims,
            style,
            theta_scale: base.powf(-2.0 / dims as f32),
            freq_scale,
            scaled: None,
            max_positions: None,
            long: None,
        }
    }

    /// A rotation by the given per-pair inverse frequencies (`dims / 2` of
    /// them), cos and sin multiplied by `attention_factor`.
    pub fn with_inv_freq(inv_freq: Vec<f32>, attention_factor: f32, style: RopeStyle) -> Rope {
        Rope {
            dims: 2 * inv_freq.len(),
            style,
            theta_scale: 1.0,
            freq_scale: 1.0,
            scaled: Some((inv_freq, attention_factor)),
            max_positions: None,
            long: None,
        }
    }

    /// The rotation for a context of `n_ctx` positions: the long one of a
    /// LongRoPE pair when `n_ctx` exceeds its original context (as
    /// llama.cpp chooses Phi-3's `rope_factors_long` by the context size),
    /// else this one.
    pub fn for_context(&self, n_ctx: usize) -> &Rope {
        match &self.long {
            Some(pair) if n_ctx > pair.1 => &pair.0,
            _ => self,
        }
    }

    /// The per-pair inverse frequencies and cos/sin factor of a non-linear
    /// scaling, if the rotation has one (the library's own tests compare
    /// them with transformers').
    #[cfg(any(test, feature = "internals"))]
    pub fn inv_freq(&self) -> Option<(&[f32], f32)> {
        self.scaled.as_ref().map(|(f, a)| (&f[..], *a))
    }

    /// (cos, sin) of each pair's angle at `pos`: `dims / 2` values each.
    /// The angle is built as ggml builds it: start at `pos`, multiply by
    /// `theta_scale` once per pair, scale by `freq_scale`, all in f32.
    pub fn cos_sin(&self, pos: usize, cos: &mut [f32], sin: &mut [f32]) {
        if let Some((inv_freq, factor)) = &self.scaled {
            let p = pos as f32;
            for ((c, s), f) in cos.iter_mut().zip(sin.iter_mut()).zip(inv_freq) {
                let theta = p * f;
                *c = theta.cos() * factor;
                *s = theta.sin() * factor;
            }
            return;
        }
        let mut theta_base = pos as f32;
        for (c, s) in cos.iter_mut().zip(sin.iter_mut()) {
            let theta = self.freq_scale * theta_base;
            *c = theta.cos();
            *s = theta.sin();
            theta_base *= self.theta_scale;
        }
    }

    /// [`Rope::cos_sin`] of every position in `positions`, one after the
    /// other (`dims / 2` values per position) into `cos` and `sin`.
    pub fn tables(
        &self,
        positions: std::ops::Range<usize>,
        cos: &mut Vec<f32>,
        sin: &mut Vec<f32>,
    ) {
        let half = self.dims / 2;
        let n = positions.len() * half;
        cos.resize(n, 0.0);
        sin.resize(n, 0.0);
        for (i, pos) in positions.enumerate() {
            let r = i * half..(i + 1) * half;
            self.cos_sin(pos, &mut cos[r.clone()], &mut sin[r]);
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
