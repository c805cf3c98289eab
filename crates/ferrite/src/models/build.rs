//! Loading the parts of a [`Decoder`](super::transformer::Decoder) from a
//! GGUF file by llama.cpp's tensor names: the builders every architecture
//! file shares, so that each file only says which parts its blocks have.

use ferrite_kernels::math::Activation;

use crate::formats::names;
use crate::models::hparams::Common;
use crate::models::transformer::{GatedAct, Head, Mlp, Norm, Qkv, Shape, TokenInput};
use crate::tensor::{Linear, Loader};
use crate::Error;

/// Sizes of the decoder described by `c`.
pub fn shape(c: &Common) -> Shape {
    Shape {
        n_vocab: c.n_vocab,
        dim: c.dim,
        n_heads: c.heads.n_heads,
        n_kv_heads: c.heads.n_kv_heads,
        head_dim: c.heads.head_dim,
        ffn_dim: c.ffn_dim,
        n_ctx_train: c.n_ctx_train,
    }
}

/// An RMS norm of `n` weights stored as `name`.
pub fn rms(w: &Loader, name: &str, n: usize, eps: f32) -> Result<Norm, Error> {
    Ok(Norm::Rms {
        weight: w.vector(name, n)?,
        eps,
    })
}

/// A layer norm of `n` weights stored as `name`, with its bias.
pub fn layer_norm(w: &Loader, name: &str, n: usize, eps: f32) -> Result<Norm, Error> {
    Ok(Norm::Layer {
        weight: w.vector(name, n)?,
        bias: w.vector(&names::bias_of(name), n)?,
        eps,
    })
}

/// A matrix with its bias when the file has one.
pub fn linear(w: &Loader, name: &str, rows: usize, cols: usize) -> Result<Linear, Error> {
    w.linear_opt_bias(name, &names::bias_of(name), rows, cols)
}

/// Layer `l`'s Q, K and V projections: split (`attn_q/k/v`) or fused
/// (`attn_qkv`), whichever the file has, biases included when present.
pub fn qkv(w: &Loader, l: usize, s: &Shape) -> Result<Qkv, Error> {
    let (q_dim, kv_dim, dim) = (s.q_dim(), s.kv_dim(), s.dim);
    if w.has(&names::attn_qkv(l)) {
        return Ok(Qkv::Fused(linear(
            w,
            &names::attn_qkv(l),
            q_dim + 2 * kv_dim,
            dim,
        )?));
    }
    Ok(Qkv::Split(Box::new([
        linear(w, &names::attn_q(l), q_dim, dim)?,
        linear(w, &names::attn_k(l), kv_dim, dim)?,
        linear(w, &names::attn_v(l), kv_dim, dim)?,
    ])))
}

/// Layer `l`'s attention output projection.
pub fn attn_output(w: &Loader, l: usize, s: &Shape) -> Result<Linear, Error> {
    linear(w, &names::attn_output(l), s.dim, s.q_dim())
}

/// Layer `l`'s gated MLP (`ffn_gate`, `ffn_up`, `ffn_down`).
pub fn gated_mlp(w: &Loader, l: usize, s: &Shape, act: GatedAct) -> Result<Mlp, Error> {
    Ok(Mlp::Gated {
        gate: linear(w, &names::ffn_gate(l), s.ffn_dim, s.dim)?,
        up: linear(w, &names::ffn_up(l), s.ffn_dim, s.dim)?,
        down: linear(w, &names::ffn_down(l), s.dim, s.ffn_dim)?,
        act,
    })
}

/// Layer `l`'s plain MLP (`ffn_up`, `ffn_down`, biases when present).
pub fn plain_mlp(w: &Loader, l: usize, s: &Shape, act: Activation) -> Result<Mlp, Error> {
    Ok(Mlp::Plain {
        up: linear(w, &names::ffn_up(l), s.ffn_dim, s.dim)?,
        down: linear(w, &names::ffn_down(l), s.dim, s.ffn_dim)?,
        act,
    })
}

/// The token embedding (no scale, no learned positions).
pub fn token_input(w: &Loader, s: &Shape) -> Result<(TokenInput, Linear), Error> {
    // The output matrix is the embedding itself when the file has no
    // `output.weight` (tied embeddings): one repacked copy serves both.
    let output_name = if w.has(names::OUTPUT) {
        names::OUTPUT
    } else {
        names::TOKEN_EMBD
    };
    let (table, output) =
        w.embedding_and_output(names::TOKEN_EMBD, output_name, s.n_vocab, s.dim)?;
    let input = TokenInput {
        table,
        scale: None,
        positions: None,
    };
    Ok((input, output))
}

/// The output head: `norm`, the output matrix, no soft-cap.
pub fn head(norm: Norm, output: Linear) -> Head {
    Head {
        norm,
        output,
        softcap: None,
    }
}
