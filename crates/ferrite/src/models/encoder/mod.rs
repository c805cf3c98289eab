//! Bidirectional text encoders of the BERT family, in full f32 precision:
//! BERT itself ([`bert`]: learned absolute positions, biases, GELU),
//! MPNet ([`mpnet`]: BERT plus a learned relative position bias on the
//! attention scores) and nomic-bert ([`nomic_bert`]: rotary positions,
//! SwiGLU, no biases). All are post-norm: `x = LN(x + attn(x)); x = LN(x +
//! mlp(x))`.
//!
//! The forward pass takes several sequences at once and packs their tokens
//! one after another with no padding: every matrix product runs over all
//! tokens of the batch, and attention runs per sequence and head, so no
//! token ever looks at another sequence and no mask is needed. Every value
//! of a sequence's output is computed by the same operations in the same
//! order whichever batch it is in (the GEMM's per-value order is fixed, see
//! `ferrite_kernels::gemm`), so an input's embedding is bit-identical
//! alone or in any batch, and for any thread count.
//!
//! References: Devlin et al. 2018 (BERT), HF transformers
//! `models/bert/modeling_bert.py`, `models/mpnet/modeling_mpnet.py`,
//! `models/nomic_bert/modeling_nomic_bert.py`.

pub mod bert;
pub mod config;
mod forward;
pub mod mpnet;
pub mod nomic_bert;
pub mod weights;

use ferrite_kernels::math::Activation;

use crate::parallel::Threads;
use crate::Error;
use weights::Dense;

/// The encoders' norms are [`Norm::Layer`] (weight and bias).
pub use crate::layers::norm::Norm;
pub(crate) use forward::dense;
pub use forward::Workspace;

/// How token positions enter the model.
pub enum Positions {
    /// A learned vector per position added to the input (BERT), `(n,
    /// dim)`; token `t` takes row `first + t` (`first` is 2 in MPNet and
    /// RoBERTa, whose position ids count from `padding_idx + 1`).
    Learned {
        table: Vec<f32>,
        first: usize,
    },
    /// Rotary embeddings on Q and K, rotating dimension `i` with `i +
    /// head_dim / 2` (GPT-NeoX style), frequencies `base^(-2i/head_dim)`.
    Rotary {
        base: f64,
        /// Dynamic NTK scaling past the trained length: `(factor,
        /// trained_positions)`.
        ntk: Option<(f64, usize)>,
    },
}

/// The feed-forward block.
pub enum Mlp {
    /// `down(act(up(x)))` (BERT).
    Plain {
        up: Dense,
        down: Dense,
        act: Activation,
    },
    /// `down(silu(gate(x)) * up(x))` (nomic-bert).
    SwiGlu { gate: Dense, up: Dense, down: Dense },
}

pub struct EncoderLayer {
    /// Q, K and V stacked: `(3 * dim, dim)`.
    pub qkv: Dense,
    pub out: Dense,
    pub attn_norm: Norm,
    pub mlp: Mlp,
    pub out_norm: Norm,
}

/// Sizes of an encoder.
#[derive(Clone, Debug)]
pub struct EncoderConfig {
    pub dim: usize,
    pub n_heads: usize,
    pub head_dim: usize,
    pub ffn: usize,
    pub n_vocab: usize,
    /// Longest input (tokens, with specials) the model takes.
    pub max_positions: usize,
    /// The length it was trained on: inputs are cut to this by default
    /// (equal to `max_positions` but for long-context RoPE models).
    pub trained_positions: usize,
}

/// A learned bias added to the attention scores by the distance between
/// query and key (MPNet, after T5): distances fall into `n_buckets`
/// buckets, exact for short distances and logarithmic up to
/// `max_distance`, separately for keys before and after the query.
pub struct RelativeBias {
    /// `(n_buckets, n_heads)`.
    pub table: Vec<f32>,
    pub n_buckets: usize,
    pub max_distance: usize,
}

impl RelativeBias {
    /// The bucket of key position minus query position `rel`, as HF's
    /// `MPNetEncoder.relative_position_bucket` computes it (its logarithm
    /// in f32, as torch does; tested against torch's buckets).
    pub fn bucket(&self, rel: i64) -> usize {
        crate::layers::position::relative_bucket(rel, true, self.n_buckets, self.max_distance)
    }
}

pub struct Encoder {
    pub config: EncoderConfig,
    /// `(n_vocab, dim)`.
    pub token_embd: Vec<f32>,
    /// The token type vectors, `(n_types, dim)`, if the model has token
    /// types: every input is type 0 but a cross-encoder's second text
    /// ([`Encoder::forward_typed`]).
    pub token_types: Option<Vec<f32>>,
    pub positions: Positions,
    /// Added to every layer's attention scores (MPNet).
    pub relative_bias: Option<RelativeBias>,
    pub embd_norm: Norm,
    pub layers: Vec<EncoderLayer>,
}

/// How an encoder's weight matrices multiply: in f32 (the default, the
/// reference's results), or by one of the optional faster products that
/// round their inputs (`Encoder::use_bf16`, `Encoder::use_int8`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Products {
    /// f32 weights and activations (the default; the reference's results).
    #[default]
    F32,
    /// Weight matrices and their inputs rounded to bf16, products summed in
    /// f32 (needs AVX512-BF16 or FEAT_BF16; `Encoder::use_bf16`).
    Bf16,
    /// int8 weights times 16-bit activations, summed in integers, after
    /// SmoothQuant smoothing (`Encoder::use_int8`).
    Int8,
}

impl Products {
    /// The command-line option that asks for it (`--bf16`, `--int8`), or
    /// `f32`.
    pub fn name(self) -> &'static str {
        match self {
            Products::F32 => "f32",
            Products::Bf16 => "--bf16",
            Products::Int8 => "--int8",
        }
    }
}

/// The largest magnitude of each input of a layer's products, over the
/// tokens of a calibration pass ([`Encoder::input_ranges`]).
#[derive(Clone, Debug)]
pub struct InputRanges {
    /// The Q/K/V product's inputs (the layer's input).
    pub qkv: Vec<f32>,
    /// The attention output product's inputs.
    pub out: Vec<f32>,
    /// The MLP's first product's (and gate's) inputs.
    pub up: Vec<f32>,
    /// The MLP's last product's inputs.
    pub down: Vec<f32>,
}

impl InputRanges {
    fn new(dim: usize, ffn: usize) -> InputRanges {
        InputRanges {
            qkv: vec![0.0; dim],
            out: vec![0.0; dim],
            up: vec![0.0; dim],
            down: vec![0.0; ffn],
        }
    }
}

/// `max[c] = max(max[c], |x[r][c]|)` over the rows of `x`.
fn record_max(max: &mut [f32], x: &[f32]) {
    for row in x.chunks_exact(max.len()) {
        for (m, &v) in max.iter_mut().zip(row) {
            *m = m.max(v.abs());
        }
    }
}

/// SmoothQuant's exponent: an input's activations are divided (and its
/// weights multiplied) by `max|x|^α / max|w|^(1 - α)`.
pub const SMOOTH_ALPHA: f32 = 0.5;

impl Encoder {
    /// The layers' weight matrices (attention Q/K/V and output, the MLP's).
    fn matrices(&mut self) -> impl Iterator<Item = &mut Dense> {
        self.layers.iter_mut().flat_map(|l| {
            let mut mats = vec![&mut l.qkv, &mut l.out];
            match &mut l.mlp {
                Mlp::Plain { up, down, .. } => mats.extend([up, down]),
                Mlp::SwiGlu { gate, up, down } => mats.extend([gate, up, down]),
            }
            mats
        })
    }

    /// Each layer's [`InputRanges`] over every token of `seqs`, from the
    /// f32 forward pass (whose bits do not depend on the kernel set, the
    /// threads or the batch, so neither do these).
    pub fn input_ranges(
        &self,
        seqs: &[&[u32]],
        threads: &Threads,
    ) -> Result<Vec<InputRanges>, Error> {
        let mut ranges =
            vec![InputRanges::new(self.config.dim, self.config.ffn); self.layers.len()];
        let mut ws = Workspace::default();
        self.forward_recording(seqs, None, threads, &mut ws, Some(&mut ranges))?;
        Ok(ranges)
    }

    /// Rounds every weight matrix to int8, one scale per output feature
    /// and group of 16 inputs, for the optional integer product
    /// (`ferrite_kernels::gemm_w8a16`: each product's inputs rounded to
    /// 16-bit integers per token as it starts, exact integer sums per
    /// group, scales applied in f32; not the f32 bits); attention, norms
    /// and activations stay in f32. Each product's inputs are first
    /// smoothed (SmoothQuant: an input's activations divided and its
    /// weights multiplied by the same factor) with factors from `ranges`,
    /// the f32 model's input magnitudes over calibration texts
    /// ([`Encoder::input_ranges`]): without it BERT's outlier dimensions
    /// blow up the weights' rounding errors (MiniLM's min cosine 0.995
    /// instead of 0.9997). Runs on every CPU (the same bits in every
    /// kernel set).
    pub fn use_int8(&mut self, ranges: &[InputRanges]) -> Result<(), Error> {
        // No shape limit: a group's integer sum is bounded by the group.
        assert_eq!(ranges.len(), self.layers.len(), "one range per layer");
        for (l, r) in self.layers.iter_mut().zip(ranges) {
            l.qkv.w = l.qkv.w.to_int8(&r.qkv);
            l.out.w = l.out.w.to_int8(&r.out);
            match &mut l.mlp {
                Mlp::Plain { up, down, .. } => {
                    up.w = up.w.to_int8(&r.up);
                    down.w = down.w.to_int8(&r.down);
                }
                Mlp::SwiGlu { gate, up, down } => {
                    gate.w = gate.w.to_int8(&r.up);
                    up.w = up.w.to_int8(&r.up);
                    down.w = down.w.to_int8(&r.down);
                }
            }
        }
        Ok(())
    }

    /// Rounds every weight matrix to bf16 for the optional bf16 product
    /// (`ferrite_kernels::gemm_bf16`: up to twice the f32 product's speed,
    /// not its bits); attention, norms and activations stay in f32. Fails
    /// on a CPU without AVX512-BF16 (x86-64) or FEAT_BF16 (aarch64).
    pub fn use_bf16(&mut self) -> Result<(), Error> {
        if !ferrite_kernels::gemm_bf16::available() {
            return Err(Error::Input(format!(
                "bf16 products need a CPU with AVX512-BF16 and the AVX-512 kernel set \
                 (x86-64), or FEAT_BF16 and a NEON kernel set (aarch64); this one runs \
                 the {} set{}",
                ferrite_kernels::dispatch::kernel_set_name(),
                if cfg!(any(target_arch = "x86_64", target_arch = "aarch64")) {
                    ""
                } else {
                    ", on neither"
                }
            )));
        }
        for d in self.matrices() {
            d.w = d.w.to_bf16();
        }
        Ok(())
    }
}
