//! Reading an architecture's hyper-parameters from GGUF metadata
//! (`{arch}.embedding_length`, ...) with errors that name the key.

use crate::formats::gguf::{Array, GgufFile, Metadata, Value};
use crate::formats::names;
use crate::layers::rope::{default_inv_freq, scaled_inv_freq, Rope, RopeStyle, Scaling};
use crate::Error;

/// Largest value we accept for a size hyper-parameter: far above any real
/// model, low enough that products of a few of them cannot overflow.
const MAX_SIZE: u64 = 1 << 24;

/// Most layers a decoder may have (the largest open models have under 200).
pub const MAX_LAYERS: usize = 1024;

/// Largest RoPE base accepted: real models use 10^4 to 10^8; far past
/// that every frequency rounds to zero.
const MAX_ROPE_BASE: f64 = 1e12;

/// What is wrong with `x` as the value of the float hyper-parameter `key`
/// (a GGUF key or a `config.json` field), by the key's name: every value
/// must be a finite f32; an epsilon (`*epsilon`, `*_eps`) must lie in
/// (0, 1) — a negative or zero one makes normalization divide by zero or
/// take the root of a negative, and the model writes NaN text; a RoPE base
/// (`*freq_base*`, `rope_theta`, `*base_freq`) in (1, 10^12].
pub fn float_problem(key: &str, x: f64) -> Option<String> {
    let name = key.rsplit('.').next().unwrap_or(key);
    if !x.is_finite() || !(x as f32).is_finite() {
        Some(format!("{x} is not a finite number"))
    } else if name.ends_with("epsilon") || name.ends_with("_eps") {
        (!(x > 0.0 && x < 1.0)).then(|| format!("{x} is not an epsilon in (0, 1)"))
    } else if key.contains("freq_base") || name == "rope_theta" || name.ends_with("base_freq") {
        (!(x > 1.0 && x <= MAX_ROPE_BASE))
            .then(|| format!("{x} is not a RoPE base in (1, {MAX_ROPE_BASE:e}]"))
    } else {
        None
    }
}

pub struct HParams<'a> {
    pub meta: &'a Metadata,
    pub arch: &'a str,
    pub source: &'a str,
}

impl<'a> HParams<'a> {
    /// The hyper-parameters of `file` under its own architecture's keys.
    pub fn of(file: &'a GgufFile, source: &'a str) -> HParams<'a> {
        HParams {
            meta: file.metadata(),
            arch: file.header.architecture().unwrap_or(""),
            source,
        }
    }
}

impl HParams<'_> {
    fn key(&self, what: &str) -> String {
        format!("{}.{what}", self.arch)
    }

    fn bad(&self, what: &str, problem: &str) -> Error {
        Error::model(
            self.source,
            format!("metadata '{}': {problem}", self.key(what)),
        )
    }

    /// A required size (positive integer).
    pub fn size(&self, what: &str) -> Result<usize, Error> {
        self.opt_size(what)?
            .ok_or_else(|| self.bad(what, "missing"))
    }

    /// An optional size (positive integer).
    pub fn opt_size(&self, what: &str) -> Result<Option<usize>, Error> {
        match self.meta.get(&self.key(what)) {
            None => Ok(None),
            Some(v) => match v.as_u64() {
                Some(n) if n > 0 && n <= MAX_SIZE => Ok(Some(n as usize)),
                _ => Err(self.bad(what, &format!("{v} is not a size in 1..={MAX_SIZE}"))),
            },
        }
    }

    /// An optional float, in the range its key calls for
    /// ([`float_problem`]).
    pub fn opt_f32(&self, what: &str) -> Result<Option<f32>, Error> {
        match self.meta.get(&self.key(what)) {
            None => Ok(None),
            Some(v) => match v.as_f64() {
                Some(x) => match float_problem(what, x) {
                    None => Ok(Some(x as f32)),
                    Some(problem) => Err(self.bad(what, &problem)),
                },
                None => Err(self.bad(what, &format!("{v} is not a number"))),
            },
        }
    }

    pub fn opt_str(&self, what: &str) -> Option<&str> {
        self.meta.get_str(&self.key(what))
    }

    /// The raw value of `{arch}.{what}`, for keys that take several forms.
    pub fn opt_value(&self, what: &str) -> Option<&Value> {
        self.meta.get(&self.key(what))
    }

    /// An error about key `{arch}.{what}`.
    pub fn error(&self, what: &str, problem: &str) -> Error {
        self.bad(what, problem)
    }

    /// An optional array of `n` flags (booleans, or integers read as
    /// nonzero = true), one per layer.
    pub fn opt_flags(&self, what: &str, n: usize) -> Result<Option<Vec<bool>>, Error> {
        let Some(v) = self.opt_value(what) else {
            return Ok(None);
        };
        let bad = || self.bad(what, &format!("expected an array of {n} flags"));
        let arr = v.as_array().ok_or_else(bad)?;
        if arr.len() != n {
            return Err(bad());
        }
        if let Array::Bool(flags) = arr {
            return Ok(Some(flags.clone()));
        }
        (0..n)
            .map(|i| arr.get(i).and_then(|x| x.as_i64()).map(|x| x != 0))
            .collect::<Option<Vec<bool>>>()
            .map(Some)
            .ok_or_else(bad)
    }

    /// Sliding-window layers: the window `attention.sliding_window` (0 or
    /// absent: none, as the converter writes for some models) and, per
    /// layer, whether it slides: `attention.sliding_window_pattern`'s
    /// flags, else `default(layer)`.
    pub fn sliding_window(
        &self,
        n_layers: usize,
        default: impl Fn(usize) -> bool,
    ) -> Result<(Option<usize>, Vec<bool>), Error> {
        let window = match self.opt_value("attention.sliding_window") {
            None => None,
            Some(v) if v.as_u64() == Some(0) => None,
            Some(_) => Some(self.size("attention.sliding_window")?),
        };
        let slides = match window {
            None => vec![false; n_layers],
            Some(_) => self
                .opt_flags("attention.sliding_window_pattern", n_layers)?
                .unwrap_or_else(|| (0..n_layers).map(default).collect()),
        };
        Ok((window, slides))
    }

    /// Attention heads and head size, checked against each other and the
    /// embedding width: `attention.head_count`, `attention.head_count_kv`
    /// (default: as many as query heads), `attention.key_length` (default
    /// `dim / heads`), and `attention.value_length`, which must equal the
    /// key length.
    pub fn heads(&self, dim: usize) -> Result<Heads, Error> {
        let n_heads = self.size("attention.head_count")?;
        let n_kv_heads = self.opt_size("attention.head_count_kv")?.unwrap_or(n_heads);
        if n_heads % n_kv_heads != 0 {
            return Err(self.bad(
                "attention.head_count_kv",
                &format!("{n_heads} attention heads cannot be grouped over {n_kv_heads} KV heads"),
            ));
        }
        let head_dim = match self.opt_size("attention.key_length")? {
            Some(d) => d,
            None if (dim / n_heads) * n_heads != dim => {
                return Err(self.bad(
                    "attention.head_count",
                    &format!("embedding length {dim} is not divisible by {n_heads} heads"),
                ))
            }
            None => dim / n_heads,
        };
        let most = ferrite_kernels::attend_tile::MAX_HEAD_DIM;
        if head_dim == 0 || head_dim > most {
            return Err(self.bad(
                "attention.key_length",
                &format!("a head size of {head_dim} (attention takes 1 to {most})"),
            ));
        }
        if let Some(v) = self.opt_size("attention.value_length")? {
            if v != head_dim {
                return Err(self.bad(
                    "attention.value_length",
                    &format!("{v} differs from the key length {head_dim} (not supported)"),
                ));
            }
        }
        Ok(Heads {
            n_heads,
            n_kv_heads,
            head_dim,
        })
    }
}

/// RoPE settings read from `rope.*`.
#[derive(Clone, Debug, PartialEq)]
pub struct RopeParams {
    /// Values per head that are rotated.
    pub dims: usize,
    pub base: f32,
    /// `1 / rope.scaling.factor` for linear scaling, else 1.
    pub freq_scale: f32,
    /// A scaling other than linear (`rope.scaling.type` `yarn`, or
    /// ferrite's `dynamic`); Llama 3's factors come as a tensor
    /// (`rope_freqs.weight`, see [`RopeParams::build`]).
    pub scaling: Option<Scaling>,
}

impl RopeParams {
    /// The rotation: ggml's angles when unscaled or linear; per-pair
    /// inverse frequencies for YaRN, or divided by the factors of
    /// `freq_factors` (`rope_freqs.weight`: Llama 3's scaling as
    /// convert_hf_to_gguf.py stores it, one factor per pair).
    pub fn build(
        &self,
        style: RopeStyle,
        freq_factors: Option<Vec<f32>>,
        hp: &HParams,
    ) -> Result<Rope, Error> {
        match (&self.scaling, freq_factors) {
            (None, None) => Ok(Rope::new(self.dims, self.base, self.freq_scale, style)),
            (None, Some(factors)) => {
                if self.freq_scale != 1.0 {
                    return Err(hp.bad(
                        "rope.scaling.type",
                        "linear scaling together with rope_freqs.weight is not supported",
                    ));
                }
                if let Some(f) = factors.iter().find(|f| !(f.is_finite() && **f > 0.0)) {
                    return Err(Error::model(
                        hp.source,
                        format!("tensor '{}': factor {f} is not positive", names::ROPE_FREQS),
                    ));
                }
                let inv = default_inv_freq(self.dims, self.base)
                    .into_iter()
                    .zip(&factors)
                    .map(|(f, ff)| f / ff)
                    .collect();
                Ok(Rope::with_inv_freq(inv, 1.0, style))
            }
            (Some(Scaling::Dynamic { max_positions, .. }), None) => {
                let mut rope = Rope::new(self.dims, self.base, 1.0, style);
                rope.max_positions = Some(*max_positions);
                Ok(rope)
            }
            (Some(s), None) => {
                let (inv, attn) = scaled_inv_freq(self.dims, self.base, s, None);
                Ok(Rope::with_inv_freq(inv, attn, style))
            }
            (Some(s), Some(_)) => Err(hp.bad(
                "rope.scaling.type",
                &format!(
                    "'{}' together with rope_freqs.weight is not supported",
                    s.name()
                ),
            )),
        }
    }
}

/// The hyper-parameters every decoder has.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Common {
    pub n_vocab: usize,
    pub dim: usize,
    pub n_layers: usize,
    pub heads: Heads,
    pub ffn_dim: usize,
    pub n_ctx_train: usize,
}

impl HParams<'_> {
    /// Sizes shared by every decoder: `embedding_length`, `block_count`
    /// (at most [`MAX_LAYERS`]), heads,
    /// `feed_forward_length`, `context_length` (default `default_ctx`),
    /// and the vocabulary as the rows of the token embedding.
    pub fn common(&self, file: &GgufFile, default_ctx: usize) -> Result<Common, Error> {
        let dim = self.size("embedding_length")?;
        let n_layers = self.size("block_count")?;
        if n_layers > MAX_LAYERS {
            return Err(self.bad(
                "block_count",
                &format!("{n_layers} layers is more than the {MAX_LAYERS} ferrite accepts"),
            ));
        }
        Ok(Common {
            n_vocab: vocab_size(file, dim)?,
            dim,
            n_layers,
            heads: self.heads(dim)?,
            ffn_dim: self.size("feed_forward_length")?,
            n_ctx_train: self.opt_size("context_length")?.unwrap_or(default_ctx),
        })
    }

    /// `rope.dimension_count` (default: the whole head, checked to fit),
    /// `rope.freq_base` (default 10 000) and `rope.scaling.*`: none,
    /// linear, `yarn` (`factor`, `original_context_length`,
    /// `yarn_beta_fast` / `yarn_beta_slow` (default 32 / 1),
    /// `yarn_attn_factor`, `yarn_ext_factor` 1 if present) or ferrite's
    /// `dynamic` (`factor`, `original_context_length`). YaRN's correction
    /// range is rounded out to whole pairs (as ggml always does).
    pub fn rope(&self, head_dim: usize) -> Result<RopeParams, Error> {
        self.rope_truncating(head_dim, true)
    }

    /// [`HParams::rope`], with YaRN's rounding of the correction range
    /// (transformers' `truncate`) read from ferrite's own key
    /// `rope.scaling.yarn_truncate` (written by the HF directory reader
    /// when `config.json` states it), else `default_truncate` (gpt-oss was
    /// trained without it, which its GGUF files do not record).
    pub fn rope_truncating(
        &self,
        head_dim: usize,
        default_truncate: bool,
    ) -> Result<RopeParams, Error> {
        let dims = self.opt_size("rope.dimension_count")?.unwrap_or(head_dim);
        if dims > head_dim || dims % 2 != 0 {
            return Err(self.bad(
                "rope.dimension_count",
                &format!("{dims} does not fit head size {head_dim} (RoPE rotates pairs)"),
            ));
        }
        let base = self.opt_f32("rope.freq_base")?.unwrap_or(10_000.0);
        if base <= 1.0 {
            return Err(self.bad("rope.freq_base", &format!("{base} is not above 1")));
        }
        let factor = || -> Result<f32, Error> {
            match self.opt_f32("rope.scaling.factor")? {
                Some(f) if f > 0.0 => Ok(f),
                Some(f) => Err(self.bad("rope.scaling.factor", &format!("{f} is not positive"))),
                None => Err(self.bad("rope.scaling.factor", "missing")),
            }
        };
        let orig_ctx = || self.size("rope.scaling.original_context_length");
        let mut freq_scale = 1.0;
        let scaling = match self.opt_str("rope.scaling.type") {
            None | Some("none") | Some("linear") => {
                match self.opt_f32("rope.scaling.factor")? {
                    Some(f) if f > 0.0 => freq_scale = 1.0 / f,
                    Some(0.0) | None => {}
                    Some(f) => {
                        return Err(self.bad("rope.scaling.factor", &format!("{f} is negative")))
                    }
                }
                None
            }
            Some("yarn") => {
                if let Some(e) = self.opt_f32("rope.scaling.yarn_ext_factor")? {
                    if e != 1.0 {
                        return Err(self.bad(
                            "rope.scaling.yarn_ext_factor",
                            &format!("{e}: only 1 (transformers' YaRN) is supported"),
                        ));
                    }
                }
                Some(Scaling::Yarn {
                    factor: factor()?,
                    original_ctx: orig_ctx()?,
                    beta_fast: self.opt_f32("rope.scaling.yarn_beta_fast")?.unwrap_or(32.0),
                    beta_slow: self.opt_f32("rope.scaling.yarn_beta_slow")?.unwrap_or(1.0),
                    attention_factor: self.opt_f32("rope.scaling.yarn_attn_factor")?,
                    truncate: match self.opt_value("rope.scaling.yarn_truncate") {
                        None => default_truncate,
                        Some(v) => v.as_bool().ok_or_else(|| {
                            self.bad(
                                "rope.scaling.yarn_truncate",
                                &format!("{v} is not a boolean"),
                            )
                        })?,
                    },
                })
            }
            Some("dynamic") => Some(Scaling::Dynamic {
                factor: factor()?,
                max_positions: orig_ctx()?,
            }),
            Some(other) => {
                return Err(self.bad(
                    "rope.scaling.type",
                    &format!("'{other}' is not supported yet"),
                ))
            }
        };
        if let Some(s) = &scaling {
            s.check()
                .map_err(|e| self.bad("rope.scaling", &format!("{}: {e}", s.name())))?;
        }
        Ok(RopeParams {
            dims,
            base,
            freq_scale,
            scaling,
        })
    }
}

/// Attention head counts and size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Heads {
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
}

/// The vocabulary size, as the rows of the token embedding (`dim` wide).
pub fn vocab_size(file: &GgufFile, dim: usize) -> Result<usize, Error> {
    let source = file.path().display().to_string();
    let embd = file
        .tensor(names::TOKEN_EMBD)
        .ok_or_else(|| Error::model(&source, format!("missing tensor '{}'", names::TOKEN_EMBD)))?;
    match embd.info.dims[..] {
        [d, n] if d == dim as u64 && n > 0 && n <= MAX_SIZE => Ok(n as usize),
        _ => Err(Error::model(
            &source,
            format!("'{}' has shape {:?}", names::TOKEN_EMBD, embd.info.dims),
        )),
    }
}

#[cfg(test)]
mod float_tests {
    use super::*;

    /// Issue 44: `rms_norm_eps: -1.0` loaded and gave NaN text.
    #[test]
    fn absurd_epsilons_and_rope_bases_are_refused_by_key() {
        let hp_with = |key: &str, x: f32| {
            let mut meta = Metadata::default();
            meta.set(format!("llama.{key}"), Value::F32(x));
            meta
        };
        let read = |key: &str, x: f32| {
            let meta = hp_with(key, x);
            let hp = HParams {
                meta: &meta,
                arch: "llama",
                source: "model.gguf",
            };
            hp.opt_f32(key).map_err(|e| e.to_string())
        };
        for x in [-1.0, 0.0, 1.0, f32::NAN, f32::INFINITY] {
            let err = read("attention.layer_norm_rms_epsilon", x).unwrap_err();
            assert!(err.contains("layer_norm_rms_epsilon"), "{err}");
            assert!(read("attention.layer_norm_epsilon", x).is_err(), "{x}");
        }
        assert_eq!(read("attention.layer_norm_rms_epsilon", 1e-6), Ok(Some(1e-6)));
        for x in [-10_000.0, 0.5, 1e30, f32::NAN] {
            assert!(read("rope.freq_base", x).is_err(), "{x}");
            assert!(read("rope.freq_base_swa", x).is_err(), "{x}");
        }
        assert_eq!(read("rope.freq_base", 1e6), Ok(Some(1e6)));
        // Other floats only need to be finite.
        assert_eq!(read("attention.scale", -0.5), Ok(Some(-0.5)));
        assert!(float_problem("rms_norm_eps", -1.0).is_some());
        assert!(float_problem("rope_theta", 0.0).is_some());
        assert!(float_problem("layer_norm_eps", 1e-12).is_none());
    }
}
