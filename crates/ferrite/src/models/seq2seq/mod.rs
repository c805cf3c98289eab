//! Encoder-decoder transformers (Marian / opus-mt, T5) described as data:
//! one encoder and one decoder forward pass ([`forward`]) over layers whose
//! differences are enums — where the norm sits ([`NormPlacement`]), which
//! norm ([`Norm`]), how positions enter ([`Positions`]), plain or gated
//! feed-forward ([`Ffn`]). Each architecture file (`marian.rs`, `t5.rs`) is
//! a config reader and a loader.
//!
//! Weights are f32 matrices packed for the f32 GEMM (`Proj::F32`, the
//! encoder framework's [`Dense`]) or, when asked at load, Q8_0 matrices run
//! by the kernels' dot products (`Proj::Quant`, the decoder's `Linear`).
//! Either way every output value is computed by the same operations in the
//! same order whatever the number of rows in the product, so a sentence's
//! translation does not depend on what it is batched with.
//!
//! References: HF transformers `models/marian/modeling_marian.py`,
//! `models/t5/modeling_t5.py`.

mod decode;
pub mod forward;
pub mod weights;

use ferrite_kernels::math::Activation;

use crate::models::encoder::weights::Dense;
use crate::tensor::Linear;

/// A weight matrix with optional bias, `(out, in)`.
pub enum Proj {
    F32(Dense),
    /// Quantized weights, with the bias (if any) as `Linear::bias`: added
    /// after the products by the products' own threads.
    Quant(Linear),
}

impl Proj {
    /// Output features.
    pub fn rows(&self) -> usize {
        match self {
            Proj::F32(d) => d.w.n(),
            Proj::Quant(w) => w.rows,
        }
    }

    /// Input features.
    pub fn cols(&self) -> usize {
        match self {
            Proj::F32(d) => d.w.k(),
            Proj::Quant(w) => w.cols,
        }
    }
}

/// Layer normalization (Marian) or T5's RMS norm with an f32 sum
/// ([`Norm::RmsF32`]): the library's one norm.
pub use crate::layers::norm::Norm;

/// Post-norm (Marian: `x = norm(x + f(x))`) or pre-norm (T5:
/// `x = x + f(norm(x))`, with a final norm after the last layer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NormPlacement {
    Post,
    Pre,
}

/// The feed-forward block.
pub enum Ffn {
    /// `down(act(up(x)))`.
    Plain {
        up: Proj,
        down: Proj,
        act: Activation,
    },
    /// `down(act(gate(x)) * up(x))` (T5 v1.1 / flan-t5 gated-GELU).
    Gated {
        gate: Proj,
        up: Proj,
        down: Proj,
        act: Activation,
    },
}

/// One attention block's projections.
pub struct AttnWeights {
    pub q: Proj,
    pub k: Proj,
    pub v: Proj,
    pub o: Proj,
}

pub struct EncoderLayer {
    pub attn: AttnWeights,
    pub attn_norm: Norm,
    pub ffn: Ffn,
    pub ffn_norm: Norm,
}

pub struct DecoderLayer {
    pub self_attn: AttnWeights,
    pub self_norm: Norm,
    pub cross_attn: AttnWeights,
    pub cross_norm: Norm,
    pub ffn: Ffn,
    pub ffn_norm: Norm,
}

/// T5's learned relative position biases: a `(n_buckets, n_heads)` table
/// per stack, looked up by the bucket of `key - query`.
pub struct RelativeBias {
    pub n_buckets: usize,
    pub max_distance: usize,
    /// `(n_buckets, n_heads)`.
    pub encoder: Vec<f32>,
    /// `(n_buckets, n_heads)`.
    pub decoder: Vec<f32>,
}

/// How positions enter the model.
pub enum Positions {
    /// Marian: a fixed sinusoidal vector per position added to the
    /// (scaled) token embedding, `(n_positions, dim)`.
    Sinusoidal { table: Vec<f32>, n: usize },
    /// T5: a bias on every attention score.
    Relative(RelativeBias),
}

/// Sizes and token roles.
#[derive(Clone, Debug)]
pub struct Seq2SeqConfig {
    pub dim: usize,
    pub n_heads: usize,
    pub head_dim: usize,
    pub n_vocab: usize,
    /// Multiplies `q . k` (Marian `head_dim^-0.5`, T5 1).
    pub attn_scale: f32,
    /// Multiplies token embeddings (Marian `sqrt(dim)`, T5 1).
    pub embed_scale: f32,
    /// Multiplies the last hidden state before the output matrix (T5 with
    /// tied embeddings: `dim^-0.5`; else 1).
    pub output_scale: f32,
    /// Longest input and output (positions), if the model has a limit.
    pub max_positions: Option<usize>,
    pub placement: NormPlacement,
    pub decoder_start: u32,
    pub eos: u32,
}

pub struct Seq2Seq {
    pub config: Seq2SeqConfig,
    /// `(n_vocab, dim)`, shared by encoder and decoder inputs.
    pub embed: Vec<f32>,
    pub positions: Positions,
    pub encoder: Vec<EncoderLayer>,
    pub decoder: Vec<DecoderLayer>,
    /// After the last layer (pre-norm models).
    pub encoder_norm: Option<Norm>,
    pub decoder_norm: Option<Norm>,
    /// `(n_vocab, dim)`.
    pub lm_head: Proj,
    /// Added to the logits (Marian `final_logits_bias`), `(n_vocab,)`.
    pub logits_bias: Option<Vec<f32>>,
}

pub use crate::layers::position::{relative_bucket, sinusoidal_table};
