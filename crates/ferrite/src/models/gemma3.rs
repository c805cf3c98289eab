//! Gemma 3 (text) as llama.cpp's GGUF files lay it out
//! (`general.architecture = "gemma3"`).
//!
//! The token embedding is scaled by `sqrt(dim)`. Per layer: RMSNorm -> Q/K/V
//! projections -> per-head RMSNorm of Q and K -> RoPE (halves, ggml "neox")
//! -> grouped-query causal attention, over the last `sliding_window`
//! positions in local layers and over everything in global layers -> output
//! projection -> RMSNorm -> residual; RMSNorm -> GeGLU MLP (tanh GELU) ->
//! RMSNorm -> residual. Then a final RMSNorm and the output matrix (tied to
//! the embedding), optionally soft-capped.
//!
//! Local and global layers rotate with different RoPE bases
//! (`rope.freq_base_swa`, default 10 000, and `rope.freq_base`); linear RoPE
//! scaling (`rope.scaling.factor`, Gemma 3 4B and up) applies to global
//! layers only. Which layers are local comes from
//! `attention.sliding_window_pattern` (an array of per-layer flags, or a
//! period `n`: every `n`-th layer is global), by default a period of 6. The
//! norm weights are used as stored: the GGUF converter already added the 1
//! that Gemma's RMSNorm adds. Attention scores are scaled by
//! `1/sqrt(head_dim)` (`dim / heads` for the 27B model): llama.cpp multiplies
//! the queries by that (`f_attention_scale`) and then uses a softmax scale
//! of 1, the same product.
//!
//! A local layer's KV cache is a ring of `window + MAX_CHUNK - 1` slots
//! (position `p` in slot `p % capacity`), enough that storing a whole chunk
//! never overwrites a key an earlier token of the chunk still attends to.
//!
//! Reference: llama.cpp `src/models/gemma3.cpp` (graph and hyper-parameters),
//! `src/llama-hparams.cpp` (`set_swa_pattern`, `is_masked_swa`).

use std::ops::Range;
use std::sync::Arc;

use crate::formats::gguf::GgufFile;
use crate::formats::names;
use crate::layers::activation::geglu_in_place;
use crate::layers::attention::{attention, AttnShape, Positions};
use crate::layers::norm::{rms_norm, rms_norm_in_place};
use crate::layers::rope::{Rope, RopeStyle};
use crate::models::decoder::{
    add_in_place, rope_and_store, DecoderDims, DecoderState, Logits, QkvRows, Workspace, MAX_CHUNK,
};
use crate::models::hparams::{vocab_size, HParams};
use crate::models::CausalLm;
use crate::parallel::Threads;
use crate::tensor::{matmul_many, Embedding, Linear, Loader, MatmulJob};
use crate::Error;

/// Period of local/global layers when the file does not say
/// (llama.cpp's default for Gemma 3: five local layers, then a global one).
const DEFAULT_SWA_PERIOD: usize = 6;

/// RoPE base of local layers when the file does not say.
const DEFAULT_LOCAL_ROPE_BASE: f32 = 10_000.0;

/// Hyper-parameters of a Gemma 3 model, from GGUF metadata.
#[derive(Clone, Debug, PartialEq)]
pub struct Gemma3Config {
    pub n_vocab: usize,
    pub dim: usize,
    pub n_layers: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub ffn_dim: usize,
    pub norm_eps: f32,
    /// Values per head that RoPE rotates.
    pub rope_dims: usize,
    /// RoPE base of global layers.
    pub rope_base: f32,
    /// `1 / rope.scaling.factor` for global layers, else 1.
    pub rope_freq_scale: f32,
    /// RoPE base of local (sliding-window) layers.
    pub rope_base_local: f32,
    /// Positions a local layer attends to (including the current one);
    /// `None`: every layer is global.
    pub sliding_window: Option<usize>,
    /// Whether each layer is local (sliding-window).
    pub local: Vec<bool>,
    /// Multiplies `q . k` before the softmax.
    pub attention_scale: f32,
    /// `cap * tanh(logit / cap)` on the output logits, if set.
    pub final_logit_softcap: Option<f32>,
    /// The context length the model was trained with.
    pub n_ctx_train: usize,
}

impl Gemma3Config {
    pub fn from_gguf(file: &GgufFile) -> Result<Gemma3Config, Error> {
        let source = file.path().display().to_string();
        let hp = HParams {
            meta: file.metadata(),
            arch: file.header.architecture().unwrap_or("gemma3"),
            source: &source,
        };
        let dim = hp.size("embedding_length")?;
        let n_layers = hp.size("block_count")?;
        let heads = hp.heads(dim)?;
        let head_dim = heads.head_dim;

        let rope_dims = hp.opt_size("rope.dimension_count")?.unwrap_or(head_dim);
        if rope_dims > head_dim || rope_dims % 2 != 0 {
            return Err(hp.error(
                "rope.dimension_count",
                &format!("{rope_dims} does not fit head size {head_dim}"),
            ));
        }
        // Per-layer-type head and rope sizes exist in the format; Gemma 3
        // uses one size for both layer types.
        for (what, want) in [
            ("attention.key_length_swa", head_dim),
            ("attention.value_length_swa", head_dim),
            ("rope.dimension_count_swa", rope_dims),
        ] {
            if let Some(v) = hp.opt_size(what)? {
                if v != want {
                    return Err(hp.error(what, &format!("{v} differs from {want} (not supported)")));
                }
            }
        }
        let rope_freq_scale = match hp.opt_str("rope.scaling.type") {
            None | Some("none") | Some("linear") => match hp.opt_f32("rope.scaling.factor")? {
                Some(f) if f > 0.0 => 1.0 / f,
                Some(0.0) | None => 1.0,
                Some(f) => return Err(hp.error("rope.scaling.factor", &format!("{f} is negative"))),
            },
            Some(other) => {
                return Err(hp.error(
                    "rope.scaling.type",
                    &format!("'{other}' is not supported yet"),
                ))
            }
        };

        let sliding_window = hp.opt_size("attention.sliding_window")?;
        let local = match sliding_window {
            None => vec![false; n_layers],
            Some(_) => swa_layers(&hp, n_layers)?,
        };

        // llama.cpp scales queries by 1/sqrt(head_dim), except for the 27B
        // model (62 layers), whose `query_pre_attn_scalar` is dim / heads
        // (Gemma's reference config, gemma_pytorch `config.py`). The file
        // does not carry that scalar, so the rule is llama.cpp's.
        const GEMMA3_27B_LAYERS: usize = 62;
        let scale_dim = if n_layers == GEMMA3_27B_LAYERS {
            dim / heads.n_heads
        } else {
            head_dim
        };
        let final_logit_softcap = match hp.opt_f32("final_logit_softcapping")? {
            Some(c) if c > 0.0 => Some(c),
            Some(0.0) | None => None,
            Some(c) => return Err(hp.error("final_logit_softcapping", &format!("{c} is negative"))),
        };
        let norm_eps = hp
            .opt_f32("attention.layer_norm_rms_epsilon")?
            .ok_or_else(|| hp.error("attention.layer_norm_rms_epsilon", "missing"))?;
        Ok(Gemma3Config {
            n_vocab: vocab_size(file, dim)?,
            dim,
            n_layers,
            n_heads: heads.n_heads,
            n_kv_heads: heads.n_kv_heads,
            head_dim,
            ffn_dim: hp.size("feed_forward_length")?,
            norm_eps,
            rope_dims,
            rope_base: hp.opt_f32("rope.freq_base")?.unwrap_or(10_000.0),
            rope_freq_scale,
            rope_base_local: hp
                .opt_f32("rope.freq_base_swa")?
                .unwrap_or(DEFAULT_LOCAL_ROPE_BASE),
            sliding_window,
            local,
            attention_scale: 1.0 / (scale_dim as f32).sqrt(),
            final_logit_softcap,
            n_ctx_train: hp.opt_size("context_length")?.unwrap_or(8192),
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

    /// Cache slots layer `l` needs for a context of `n_ctx` positions: all
    /// of them for a global layer; for a local one, the window plus room for
    /// a whole chunk, so that storing a chunk's keys never overwrites a key
    /// an earlier token of the chunk still attends to.
    pub fn cache_capacity(&self, l: usize, n_ctx: usize) -> usize {
        match self.sliding_window {
            Some(w) if self.local[l] => n_ctx.min(w + MAX_CHUNK - 1),
            _ => n_ctx,
        }
    }

    /// How far back a cache of `n_ctx` positions can be truncated: local
    /// layers whose ring of slots wraps keep `capacity - window + 1`
    /// positions of slack; `None` when no layer wraps.
    pub fn max_rewind(&self, n_ctx: usize) -> Option<usize> {
        let w = self.sliding_window?;
        (0..self.n_layers)
            .filter(|&l| self.local[l])
            .map(|l| self.cache_capacity(l, n_ctx))
            .filter(|&cap| cap < n_ctx)
            .map(|cap| cap + 1 - w)
            .min()
    }
}

/// Which layers are local: `attention.sliding_window_pattern` as per-layer
/// flags, or as a period `n` (layer `l` is local unless `l % n == n - 1`;
/// `n = 0`: all local), by default [`DEFAULT_SWA_PERIOD`].
fn swa_layers(hp: &HParams, n_layers: usize) -> Result<Vec<bool>, Error> {
    const KEY: &str = "attention.sliding_window_pattern";
    let period = match hp.opt_value(KEY) {
        None => DEFAULT_SWA_PERIOD,
        Some(v) if v.as_array().is_some() => {
            return hp
                .opt_flags(KEY, n_layers)?
                .ok_or_else(|| hp.error(KEY, "missing"))
        }
        Some(v) => match v.as_u64().and_then(|n| usize::try_from(n).ok()) {
            Some(n) => n,
            None => return Err(hp.error(KEY, &format!("{v} is not a layer period"))),
        },
    };
    Ok((0..n_layers)
        .map(|l| period == 0 || l % period < period - 1)
        .collect())
}

struct Layer {
    attn_norm: Vec<f32>,      // (dim)
    wq: Linear,               // (q_dim, dim)
    wk: Linear,               // (kv_dim, dim)
    wv: Linear,               // (kv_dim, dim)
    q_norm: Vec<f32>,         // (head_dim)
    k_norm: Vec<f32>,         // (head_dim)
    wo: Linear,               // (dim, q_dim)
    post_attn_norm: Vec<f32>, // (dim)
    ffn_norm: Vec<f32>,       // (dim)
    w_gate: Linear,           // (ffn_dim, dim)
    w_up: Linear,             // (ffn_dim, dim)
    w_down: Linear,           // (dim, ffn_dim)
    post_ffw_norm: Vec<f32>,  // (dim)
    /// Sliding-window layer (else global).
    local: bool,
}

pub struct Gemma3 {
    pub config: Gemma3Config,
    token_embd: Embedding, // (n_vocab, dim)
    /// `sqrt(dim)`, applied to every embedding row.
    embd_scale: f32,
    layers: Vec<Layer>,
    output_norm: Vec<f32>, // (dim)
    output: Linear,        // (n_vocab, dim)
    rope_global: Rope,
    rope_local: Rope,
}

impl Gemma3 {
    pub fn load(file: Arc<GgufFile>) -> Result<Gemma3, Error> {
        let c = Gemma3Config::from_gguf(&file)?;
        let w = Loader::new(file);
        let (q_dim, kv_dim) = (c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim);
        let layers = (0..c.n_layers)
            .map(|l| {
                Ok(Layer {
                    attn_norm: w.vector(&names::attn_norm(l), c.dim)?,
                    wq: w.linear(&names::attn_q(l), q_dim, c.dim)?,
                    wk: w.linear(&names::attn_k(l), kv_dim, c.dim)?,
                    wv: w.linear(&names::attn_v(l), kv_dim, c.dim)?,
                    q_norm: w.vector(&names::attn_q_norm(l), c.head_dim)?,
                    k_norm: w.vector(&names::attn_k_norm(l), c.head_dim)?,
                    wo: w.linear(&names::attn_output(l), c.dim, q_dim)?,
                    post_attn_norm: w.vector(&names::post_attention_norm(l), c.dim)?,
                    ffn_norm: w.vector(&names::ffn_norm(l), c.dim)?,
                    w_gate: w.linear(&names::ffn_gate(l), c.ffn_dim, c.dim)?,
                    w_up: w.linear(&names::ffn_up(l), c.ffn_dim, c.dim)?,
                    w_down: w.linear(&names::ffn_down(l), c.dim, c.ffn_dim)?,
                    post_ffw_norm: w.vector(&names::post_ffw_norm(l), c.dim)?,
                    local: c.local[l],
                })
            })
            .collect::<Result<Vec<_>, Error>>()?;
        let output_name = if w.has(names::OUTPUT) {
            names::OUTPUT
        } else {
            names::TOKEN_EMBD // tied embeddings
        };
        let (token_embd, output) =
            w.embedding_and_output(names::TOKEN_EMBD, output_name, c.n_vocab, c.dim)?;
        Ok(Gemma3 {
            token_embd,
            embd_scale: (c.dim as f32).sqrt(),
            output_norm: w.vector(names::OUTPUT_NORM, c.dim)?,
            output,
            rope_global: Rope::new(
                c.rope_dims,
                c.rope_base,
                c.rope_freq_scale,
                RopeStyle::Halves,
            ),
            rope_local: Rope::new(c.rope_dims, c.rope_base_local, 1.0, RopeStyle::Halves),
            layers,
            config: c,
        })
    }

    fn attn_shape(&self, local: bool) -> AttnShape {
        let c = &self.config;
        AttnShape {
            n_heads: c.n_heads,
            n_kv_heads: c.n_kv_heads,
            head_dim: c.head_dim,
            scale: c.attention_scale,
            window: if local { c.sliding_window } else { None },
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
        let (dim, hd, eps) = (c.dim, c.head_dim, c.norm_eps);
        let (q_dim, kv_dim, ffn) = (c.n_heads * hd, c.n_kv_heads * hd, c.ffn_dim);
        let threads = &st.threads;
        let ws: &mut Workspace = &mut st.ws;
        let x = &mut ws.x[..n * dim];
        for (t, &tok) in tokens.iter().enumerate() {
            let row = &mut x[t * dim..(t + 1) * dim];
            self.token_embd.lookup(tok, row)?;
            for v in row.iter_mut() {
                *v *= self.embd_scale;
            }
        }
        // The workspace has one table of RoPE angles: it is refilled when
        // the layer type (and so the RoPE base) changes.
        let mut table_is_local = None;

        for (layer, kv) in self.layers.iter().zip(st.cache.layers.iter_mut()) {
            let xn = &mut ws.xn[..n * dim];
            rms_norm(x, &layer.attn_norm, eps, xn);
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
            rms_norm_in_place(q, &layer.q_norm, eps);
            rms_norm_in_place(k, &layer.k_norm, eps);

            let rope = if layer.local {
                &self.rope_local
            } else {
                &self.rope_global
            };
            if table_is_local != Some(layer.local) {
                ws.rope.fill(rope, pos0, n);
                table_is_local = Some(layer.local);
            }
            let rows = QkvRows {
                q: &mut *q,
                k: &mut *k,
                v: &*v,
                n,
                head_dim: hd,
            };
            rope_and_store(rope, &ws.rope, rows, kv, pos0);
            let att = &mut ws.att[..n * q_dim];
            let at = Positions { start: pos0, n };
            let shape = self.attn_shape(layer.local);
            attention(q, kv, at, &shape, &mut ws.attn_scratch, att, threads);
            let proj = &mut ws.proj[..n * dim];
            layer.wo.matmul(att, proj, &mut ws.acts, threads)?;
            rms_norm(proj, &layer.post_attn_norm, eps, xn);
            add_in_place(x, xn);

            rms_norm(x, &layer.ffn_norm, eps, xn);
            let (gate, up) = (&mut ws.gate[..n * ffn], &mut ws.up[..n * ffn]);
            let gate_up = &mut [
                MatmulJob::new(&layer.w_gate, &mut *gate),
                MatmulJob::new(&layer.w_up, &mut *up),
            ];
            matmul_many(gate_up, xn, &mut ws.acts, threads)?;
            geglu_in_place(gate, up);
            layer.w_down.matmul(gate, proj, &mut ws.acts, threads)?;
            rms_norm(proj, &layer.post_ffw_norm, eps, xn);
            add_in_place(x, xn);
        }
        Ok(())
    }

    /// Final norm, output projection and soft-capping of the hidden states
    /// of chunk rows `rows`, into `out` (`n_vocab` per row).
    fn head(
        &self,
        rows: Range<usize>,
        st: &mut DecoderState,
        out: &mut [f32],
    ) -> Result<(), Error> {
        let (dim, n) = (self.config.dim, rows.len());
        let ws = &mut st.ws;
        rms_norm(
            &ws.x[rows.start * dim..rows.end * dim],
            &self.output_norm,
            self.config.norm_eps,
            &mut ws.xn[..n * dim],
        );
        self.output
            .matmul(&ws.xn[..n * dim], out, &mut ws.acts, &st.threads)?;
        if let Some(cap) = self.config.final_logit_softcap {
            let inv = 1.0 / cap;
            for v in out.iter_mut() {
                *v = (*v * inv).tanh() * cap;
            }
        }
        Ok(())
    }
}

impl CausalLm for Gemma3 {
    fn n_vocab(&self) -> usize {
        self.config.n_vocab
    }

    fn n_ctx_train(&self) -> usize {
        self.config.n_ctx_train
    }

    fn new_state(&self, n_ctx: usize, threads: Threads) -> Result<DecoderState, Error> {
        let c = &self.config;
        let capacities: Vec<usize> = (0..c.n_layers)
            .map(|l| c.cache_capacity(l, n_ctx))
            .collect();
        let mut st = DecoderState::new(c.dims(), n_ctx, &capacities, threads)?;
        if let Some(rewind) = c.max_rewind(n_ctx) {
            st.cache.set_max_rewind(rewind);
        }
        Ok(st)
    }

    fn forward(
        &self,
        tokens: &[u32],
        st: &mut DecoderState,
        which: Logits,
        logits: &mut Vec<f32>,
    ) -> Result<(), Error> {
        st.run_chunks(
            tokens,
            which,
            self.config.n_vocab,
            logits,
            |chunk, pos0, st| self.forward_chunk(chunk, pos0, st),
            |rows, st, out| self.head(rows, st, out),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::gguf::{write_gguf, Array, Metadata, TensorToWrite, Value};
    use ferrite_kernels::GgmlType;

    /// The config of a small Gemma 3 file: 12 layers, 4 heads of 32 over 2
    /// KV heads, a 16-position window; `set` overrides or adds keys, `drop`
    /// removes them. The only tensor is a 10-token embedding.
    fn config(set: &[(&str, Value)], drop: &[&str]) -> Result<Gemma3Config, Error> {
        let base = [
            ("general.architecture", Value::String("gemma3".into())),
            ("gemma3.embedding_length", Value::U32(64)),
            ("gemma3.block_count", Value::U32(12)),
            ("gemma3.feed_forward_length", Value::U32(128)),
            ("gemma3.attention.head_count", Value::U32(4)),
            ("gemma3.attention.head_count_kv", Value::U32(2)),
            ("gemma3.attention.key_length", Value::U32(32)),
            ("gemma3.attention.value_length", Value::U32(32)),
            ("gemma3.attention.layer_norm_rms_epsilon", Value::F32(1e-6)),
            ("gemma3.rope.freq_base", Value::F32(1e6)),
            ("gemma3.attention.sliding_window", Value::U32(16)),
        ];
        let mut meta = Metadata::default();
        for (k, v) in set.iter().cloned().chain(base) {
            if !drop.contains(&k) {
                meta.insert(k.to_string(), v);
            }
        }
        let embd = vec![0u8; 64 * 10 * 4];
        let tensors = [TensorToWrite {
            name: names::TOKEN_EMBD,
            dims: &[64, 10],
            ty: GgmlType::F32,
            data: &embd,
        }];
        let mut bytes = Vec::new();
        write_gguf(&mut bytes, 3, &meta, &tensors).unwrap();
        Gemma3Config::from_gguf(&GgufFile::from_vec("test.gguf", bytes)?)
    }

    fn pattern(local: &[bool]) -> String {
        local.iter().map(|&l| if l { 'L' } else { 'G' }).collect()
    }

    #[test]
    fn defaults_follow_llama_cpp() {
        let c = config(&[], &[]).unwrap();
        assert_eq!(pattern(&c.local), "LLLLLGLLLLLG");
        assert_eq!(
            (c.n_vocab, c.n_heads, c.n_kv_heads, c.head_dim),
            (10, 4, 2, 32)
        );
        assert_eq!(
            (c.rope_base, c.rope_base_local, c.rope_freq_scale),
            (1e6, 1e4, 1.0)
        );
        assert_eq!(c.attention_scale, 1.0 / 32f32.sqrt());
        assert_eq!(c.final_logit_softcap, None);
        assert_eq!(c.sliding_window, Some(16));
        let ring = 16 + MAX_CHUNK - 1;
        assert_eq!(
            (c.cache_capacity(0, 4096), c.cache_capacity(5, 4096)),
            (ring, 4096)
        );
        assert_eq!(c.max_rewind(4096), Some(MAX_CHUNK));
        // A context no larger than the ring needs no ring.
        assert_eq!(c.cache_capacity(0, 100), 100);
        assert_eq!(c.max_rewind(100), None);
    }

    #[test]
    fn the_sliding_window_pattern_is_read_in_every_form() {
        let key = "gemma3.attention.sliding_window_pattern";
        let c = config(&[(key, Value::U32(3))], &[]).unwrap();
        assert_eq!(pattern(&c.local), "LLGLLGLLGLLG");
        let c = config(&[(key, Value::U32(0))], &[]).unwrap();
        assert_eq!(pattern(&c.local), "LLLLLLLLLLLL");
        let c = config(&[(key, Value::U32(1))], &[]).unwrap();
        assert_eq!(pattern(&c.local), "GGGGGGGGGGGG");
        let flags: Vec<bool> = (0..12).map(|l| l % 2 == 0).collect();
        let c = config(&[(key, Value::Array(Array::Bool(flags)))], &[]).unwrap();
        assert_eq!(pattern(&c.local), "LGLGLGLGLGLG");
        let c = config(&[(key, Value::Array(Array::I32(vec![1; 12])))], &[]).unwrap();
        assert_eq!(pattern(&c.local), "LLLLLLLLLLLL");
        let err = config(&[(key, Value::Array(Array::Bool(vec![true; 11])))], &[]).unwrap_err();
        assert!(err.to_string().contains(key), "{err}");
        let err = config(&[(key, Value::String("6".into()))], &[]).unwrap_err();
        assert!(err.to_string().contains(key), "{err}");
        // Without a window every layer is global, whatever the pattern.
        let c = config(
            &[(key, Value::U32(2))],
            &["gemma3.attention.sliding_window"],
        )
        .unwrap();
        assert_eq!(pattern(&c.local), "GGGGGGGGGGGG");
        assert_eq!(c.max_rewind(4096), None);
    }

    #[test]
    fn larger_models_options_are_read() {
        // Gemma 3 4B and up: linear RoPE scaling of global layers, a local
        // base, soft-capping; 27B (62 layers): queries scaled by dim/heads.
        let c = config(
            &[
                ("gemma3.rope.scaling.type", Value::String("linear".into())),
                ("gemma3.rope.scaling.factor", Value::F32(8.0)),
                ("gemma3.rope.freq_base_swa", Value::F32(5e3)),
                ("gemma3.final_logit_softcapping", Value::F32(30.0)),
                ("gemma3.block_count", Value::U32(62)),
            ],
            &[],
        )
        .unwrap();
        assert_eq!((c.rope_freq_scale, c.rope_base_local), (0.125, 5e3));
        assert_eq!(c.final_logit_softcap, Some(30.0));
        assert_eq!(c.attention_scale, 1.0 / (64f32 / 4.0).sqrt());
        let err = config(
            &[("gemma3.rope.scaling.type", Value::String("yarn".into()))],
            &[],
        )
        .unwrap_err();
        assert!(err.to_string().contains("not supported"), "{err}");
    }

    #[test]
    fn bad_metadata_is_an_error_naming_the_key() {
        for (set, drop, key) in [
            (
                vec![],
                vec!["gemma3.attention.layer_norm_rms_epsilon"],
                "layer_norm_rms_epsilon",
            ),
            (
                vec![("gemma3.attention.head_count_kv", Value::U32(3))],
                vec![],
                "head_count_kv",
            ),
            (
                vec![("gemma3.attention.value_length", Value::U32(16))],
                vec![],
                "value_length",
            ),
            (
                vec![("gemma3.rope.dimension_count", Value::U32(33))],
                vec![],
                "dimension_count",
            ),
            (
                vec![("gemma3.embedding_length", Value::U32(32))],
                vec![],
                "token_embd",
            ),
        ] {
            let err = config(&set, &drop).unwrap_err().to_string();
            assert!(err.contains(key), "{key}: {err}");
        }
    }
}
