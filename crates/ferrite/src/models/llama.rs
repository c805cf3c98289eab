//! The Llama architecture (Llama 1-3, SmolLM, Mistral-style dense models) as
//! llama.cpp's GGUF files lay it out (`general.architecture = "llama"`).
//!
//! Per layer: RMSNorm -> Q/K/V projections -> RoPE (adjacent pairs: the GGUF
//! converter permuted Q/K rows for ggml's "normal" rope) -> grouped-query
//! causal attention -> output projection -> residual; RMSNorm -> SwiGLU MLP
//! -> residual. Then a final RMSNorm and the output matrix (tied to the token
//! embedding when the file has no `output.weight`).
//!
//! Reference: llama.cpp `src/models/llama.cpp`; llama2.c `run.c`.

use std::sync::Arc;

use ferrite_kernels::math::silu_mul;

use crate::formats::gguf::GgufFile;
use crate::formats::names;
use crate::layers::attention::{attention, AttnShape, Positions};
use crate::layers::norm::rms_norm;
use crate::layers::rope::{Rope, RopeStyle};
use crate::models::decoder::{
    add_in_place, rope_and_store, DecoderDims, DecoderState, Logits, QkvRows, Workspace,
};
use crate::models::hparams::HParams;
use crate::models::CausalLm;
use crate::parallel::Threads;
use crate::tensor::{matmul_many, Embedding, Linear, Loader, MatmulJob};
use crate::Error;

/// Hyper-parameters of a Llama model, from GGUF metadata.
#[derive(Clone, Debug, PartialEq)]
pub struct LlamaConfig {
    pub n_vocab: usize,
    pub dim: usize,
    pub n_layers: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub ffn_dim: usize,
    pub norm_eps: f32,
    pub rope_base: f32,
    /// Values per head that RoPE rotates.
    pub rope_dims: usize,
    /// `1 / rope.scaling.factor` for linear scaling, else 1.
    pub rope_freq_scale: f32,
    /// The context length the model was trained with.
    pub n_ctx_train: usize,
}

impl LlamaConfig {
    pub fn from_gguf(file: &GgufFile) -> Result<LlamaConfig, Error> {
        let source = file.path().display().to_string();
        let arch = file.header.architecture().unwrap_or("llama");
        let hp = HParams {
            meta: file.metadata(),
            arch,
            source: &source,
        };
        let bad = |problem: String| Error::model(&source, problem);

        let dim = hp.size("embedding_length")?;
        let n_heads = hp.size("attention.head_count")?;
        let n_kv_heads = hp.opt_size("attention.head_count_kv")?.unwrap_or(n_heads);
        if n_heads % n_kv_heads != 0 {
            return Err(bad(format!(
                "{n_heads} attention heads cannot be grouped over {n_kv_heads} KV heads"
            )));
        }
        let head_dim = match hp.opt_size("attention.key_length")? {
            Some(d) => d,
            None if dim % n_heads == 0 => dim / n_heads,
            None => {
                return Err(bad(format!(
                    "embedding length {dim} is not divisible by {n_heads} heads"
                )))
            }
        };
        let rope_dims = hp.opt_size("rope.dimension_count")?.unwrap_or(head_dim);
        if rope_dims > head_dim || rope_dims % 2 != 0 {
            return Err(bad(format!(
                "rope dimension count {rope_dims} does not fit head size {head_dim}"
            )));
        }
        let rope_freq_scale = match hp.opt_str("rope.scaling.type") {
            None | Some("none") => 1.0,
            Some("linear") => match hp.opt_f32("rope.scaling.factor")? {
                Some(f) if f > 0.0 => 1.0 / f,
                _ => 1.0,
            },
            Some(other) => return Err(bad(format!("rope scaling '{other}' is not supported yet"))),
        };
        let embd = file
            .tensor(names::TOKEN_EMBD)
            .ok_or_else(|| bad(format!("missing tensor '{}'", names::TOKEN_EMBD)))?;
        let n_vocab = match embd.info.dims[..] {
            [d, n] if d == dim as u64 && n > 0 => n as usize,
            _ => {
                return Err(bad(format!(
                    "'{}' has shape {:?}",
                    names::TOKEN_EMBD,
                    embd.info.dims
                )))
            }
        };
        Ok(LlamaConfig {
            n_vocab,
            dim,
            n_layers: hp.size("block_count")?,
            n_heads,
            n_kv_heads,
            head_dim,
            ffn_dim: hp.size("feed_forward_length")?,
            norm_eps: hp
                .opt_f32("attention.layer_norm_rms_epsilon")?
                .unwrap_or(1e-5),
            rope_base: hp.opt_f32("rope.freq_base")?.unwrap_or(10_000.0),
            rope_dims,
            rope_freq_scale,
            n_ctx_train: hp.opt_size("context_length")?.unwrap_or(2048),
        })
    }

    fn dims(&self) -> DecoderDims {
        DecoderDims {
            dim: self.dim,
            q_dim: self.n_heads * self.head_dim,
            kv_dim: self.n_kv_heads * self.head_dim,
            ffn_dim: self.ffn_dim,
            head_dim: self.head_dim,
            rope_pairs: self.rope_dims / 2,
            n_layers: self.n_layers,
        }
    }
}

struct Layer {
    attn_norm: Vec<f32>, // (dim)
    wq: Linear,          // (q_dim, dim)
    wk: Linear,          // (kv_dim, dim)
    wv: Linear,          // (kv_dim, dim)
    wo: Linear,          // (dim, q_dim)
    ffn_norm: Vec<f32>,  // (dim)
    w_gate: Linear,      // (ffn_dim, dim)
    w_up: Linear,        // (ffn_dim, dim)
    w_down: Linear,      // (dim, ffn_dim)
}

pub struct Llama {
    pub config: LlamaConfig,
    token_embd: Embedding, // (n_vocab, dim)
    layers: Vec<Layer>,
    output_norm: Vec<f32>, // (dim)
    output: Linear,        // (n_vocab, dim)
    rope: Rope,
}

impl Llama {
    pub fn load(file: Arc<GgufFile>) -> Result<Llama, Error> {
        let c = LlamaConfig::from_gguf(&file)?;
        let w = Loader::new(file);
        let (q_dim, kv_dim) = (c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim);
        let layers = (0..c.n_layers)
            .map(|l| {
                Ok(Layer {
                    attn_norm: w.vector(&names::attn_norm(l), c.dim)?,
                    wq: w.linear(&names::attn_q(l), q_dim, c.dim)?,
                    wk: w.linear(&names::attn_k(l), kv_dim, c.dim)?,
                    wv: w.linear(&names::attn_v(l), kv_dim, c.dim)?,
                    wo: w.linear(&names::attn_output(l), c.dim, q_dim)?,
                    ffn_norm: w.vector(&names::ffn_norm(l), c.dim)?,
                    w_gate: w.linear(&names::ffn_gate(l), c.ffn_dim, c.dim)?,
                    w_up: w.linear(&names::ffn_up(l), c.ffn_dim, c.dim)?,
                    w_down: w.linear(&names::ffn_down(l), c.dim, c.ffn_dim)?,
                })
            })
            .collect::<Result<Vec<_>, Error>>()?;
        let output_name = if w.has(names::OUTPUT) {
            names::OUTPUT
        } else {
            names::TOKEN_EMBD // tied embeddings
        };
        if w.has(names::ROPE_FREQS) {
            return Err(Error::model(
                w.file().path().display().to_string(),
                "per-frequency RoPE factors (rope_freqs.weight, Llama 3.1 style) are not supported yet",
            ));
        }
        let (token_embd, output) =
            w.embedding_and_output(names::TOKEN_EMBD, output_name, c.n_vocab, c.dim)?;
        Ok(Llama {
            token_embd,
            output_norm: w.vector(names::OUTPUT_NORM, c.dim)?,
            output,
            rope: Rope::new(
                c.rope_dims,
                c.rope_base,
                c.rope_freq_scale,
                RopeStyle::Adjacent,
            ),
            layers,
            config: c,
        })
    }

    fn attn_shape(&self) -> AttnShape {
        let c = &self.config;
        AttnShape {
            n_heads: c.n_heads,
            n_kv_heads: c.n_kv_heads,
            head_dim: c.head_dim,
            scale: 1.0 / (c.head_dim as f32).sqrt(),
            window: None,
        }
    }

    /// Runs one chunk of tokens at positions `pos0..`, leaving the final
    /// hidden states (before the output norm) in `ws.x`.
    fn forward_chunk(
        &self,
        tokens: &[u32],
        pos0: usize,
        st: &mut DecoderState,
    ) -> Result<(), Error> {
        let c = &self.config;
        let n = tokens.len();
        let (dim, hd) = (c.dim, c.head_dim);
        let (q_dim, kv_dim, ffn) = (c.n_heads * hd, c.n_kv_heads * hd, c.ffn_dim);
        let threads = &st.threads;
        let ws: &mut Workspace = &mut st.ws;
        let x = &mut ws.x[..n * dim];
        for (t, &tok) in tokens.iter().enumerate() {
            self.token_embd
                .lookup(tok, &mut x[t * dim..(t + 1) * dim])?;
        }
        ws.rope.fill(&self.rope, pos0, n);
        let shape = self.attn_shape();

        for (layer, kv) in self.layers.iter().zip(st.cache.layers.iter_mut()) {
            let xn = &mut ws.xn[..n * dim];
            rms_norm(x, &layer.attn_norm, c.norm_eps, xn);
            let (q, k, v) = (
                &mut ws.q[..n * q_dim],
                &mut ws.k[..n * kv_dim],
                &mut ws.v[..n * kv_dim],
            );
            let qkv = &mut [
                MatmulJob::new(&layer.wq, &mut *q),
                MatmulJob::new(&layer.wk, &mut *k),
                MatmulJob::new(&layer.wv, &mut *v),
            ];
            matmul_many(qkv, xn, &mut ws.acts, threads)?;
            let rows = QkvRows {
                q: &mut *q,
                k: &mut *k,
                v: &*v,
                n,
                head_dim: hd,
            };
            rope_and_store(&self.rope, &ws.rope, rows, kv, pos0);
            let att = &mut ws.att[..n * q_dim];
            let at = Positions { start: pos0, n };
            attention(q, kv, at, &shape, &mut ws.attn_scratch, att, threads);
            let proj = &mut ws.proj[..n * dim];
            layer.wo.matmul(att, proj, &mut ws.acts, threads)?;
            add_in_place(x, proj);

            rms_norm(x, &layer.ffn_norm, c.norm_eps, xn);
            let (gate, up) = (&mut ws.gate[..n * ffn], &mut ws.up[..n * ffn]);
            let gate_up = &mut [
                MatmulJob::new(&layer.w_gate, &mut *gate),
                MatmulJob::new(&layer.w_up, &mut *up),
            ];
            matmul_many(gate_up, xn, &mut ws.acts, threads)?;
            // up = silu(gate) * up, with the kernels' vectorized SiLU.
            silu_mul(gate, up);
            layer.w_down.matmul(up, proj, &mut ws.acts, threads)?;
            add_in_place(x, proj);
        }
        Ok(())
    }
}

impl CausalLm for Llama {
    fn n_vocab(&self) -> usize {
        self.config.n_vocab
    }

    fn n_ctx_train(&self) -> usize {
        self.config.n_ctx_train
    }

    fn new_state(&self, n_ctx: usize, threads: Threads) -> Result<DecoderState, Error> {
        let capacities = vec![n_ctx; self.config.n_layers];
        DecoderState::new(self.config.dims(), n_ctx, &capacities, threads)
    }

    fn forward(
        &self,
        tokens: &[u32],
        st: &mut DecoderState,
        which: Logits,
        logits: &mut Vec<f32>,
    ) -> Result<(), Error> {
        let dim = self.config.dim;
        let body = |chunk: &[u32], pos0, st: &mut DecoderState| self.forward_chunk(chunk, pos0, st);
        // Final norm and output projection of the hidden states of `rows`.
        let head = |rows: std::ops::Range<usize>, st: &mut DecoderState, out: &mut [f32]| {
            let n = rows.len();
            let ws = &mut st.ws;
            for (i, r) in rows.enumerate() {
                let src = &ws.x[r * dim..(r + 1) * dim];
                rms_norm(
                    src,
                    &self.output_norm,
                    self.config.norm_eps,
                    &mut ws.xn[i * dim..(i + 1) * dim],
                );
            }
            self.output
                .matmul(&ws.xn[..n * dim], out, &mut ws.acts, &st.threads)
        };
        st.run_chunks(tokens, which, self.config.n_vocab, logits, body, head)
    }
}
