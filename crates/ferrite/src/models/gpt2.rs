//! GPT-2 as llama.cpp's GGUF files lay it out
//! (`general.architecture = "gpt2"`).
//!
//! The token embedding plus a learned position embedding
//! (`position_embd.weight`, one row per position up to `context_length`).
//! Per layer: LayerNorm (with bias) -> one fused Q/K/V projection with bias
//! -> causal multi-head attention (no RoPE) -> output projection with bias
//! -> residual; LayerNorm -> up projection -> tanh-approximated GELU -> down
//! projection (biases) -> residual. Then a final LayerNorm and the output
//! matrix, tied to the token embedding unless the file has `output.weight`.
//!
//! Reference: llama.cpp `src/models/gpt2.cpp`; HF `modeling_gpt2.py`
//! (`gelu_new` is the tanh approximation).
//!
//! The family's registry entry (`FAMILY`, see `models::registry`) is here
//! too (its Hugging Face mapping is written in `formats::hf_decoder`, the
//! `Family::Gpt2` arms: `Conv1D` weights transposed, its own names).

use std::sync::Arc;

use ferrite_kernels::math::Activation;

use crate::formats::gguf::GgufFile;
use crate::formats::names;
use crate::models::build;
use crate::models::hparams::HParams;
use crate::models::transformer::{Attention, Block, Decoder};
use crate::tensor::Loader;
use crate::Error;
use crate::formats::hf_decoder::Family as HfMapping;
use crate::models::registry::DecoderFamily;
use crate::convert::families::ConvertSpec;
use crate::convert::keys::{bad_key, Ctx};
use crate::formats::gguf::{Metadata, Value};

/// Loads a GPT-2 file.
pub fn load(file: Arc<GgufFile>) -> Result<Decoder, Error> {
    let source = file.path().display().to_string();
    let hp = HParams::of(&file, &source);
    let c = hp.common(&file, 1024)?;
    let eps = hp.opt_f32("attention.layer_norm_epsilon")?.unwrap_or(1e-5);
    let w = Loader::new(file.clone());
    let s = build::shape(&c);
    let scale = 1.0 / (s.head_dim as f32).sqrt();
    let blocks = (0..c.n_layers)
        .map(|l| {
            Ok(Block {
                attn_norm: build::layer_norm(&w, &names::attn_norm(l), s.dim, eps)?,
                attn: Attention {
                    qkv: build::qkv(&w, l, &s)?,
                    q_norm: None,
                    k_norm: None,
                    out: build::attn_output(&w, l, &s)?,
                    rope: None,
                    window: None,
                    scale,
                    softcap: None,
                    sinks: None,
                },
                post_attn_norm: None,
                ffn_norm: build::layer_norm(&w, &names::ffn_norm(l), s.dim, eps)?,
                mlp: build::plain_mlp(&w, l, &s, Activation::GeluTanh)?,
                post_ffn_norm: None,
            })
        })
        .collect::<Result<Vec<_>, Error>>()?;
    let (mut input, output) = build::token_input(&w, &s)?;
    input.positions = Some(w.embedding(names::POSITION_EMBD, c.n_ctx_train, s.dim)?);
    let norm = build::layer_norm(&w, names::OUTPUT_NORM, s.dim, eps)?;
    Ok(Decoder {
        arch: hp.arch.to_string(),
        shape: s,
        input,
        ropes: Vec::new(),
        blocks,
        head: build::head(norm, output),
    })
}

/// The GPT-2 family: GGUF `gpt2`, read from `GPT2LMHeadModel`.
pub(crate) const FAMILY: DecoderFamily = DecoderFamily {
    hf: &[("GPT2LMHeadModel", HfMapping::Gpt2)],
    convert: Some(ConvertSpec {
        check: Some(convert_check),
        ..ConvertSpec::new(convert_keys)
    }),
    ..DecoderFamily::new("gpt2", load)
};

/// `GPT2Model` (instead of the generic keys).
fn convert_keys(x: &Ctx, md: &mut Metadata) -> Result<(), Error> {
    x.put(md, "block_count", x.need_uint(&["n_layer"])?);
    x.put(md, "context_length", x.need_uint(&["n_ctx"])?);
    let n_embd = x.need_uint(&["n_embd"])?;
    let ff = match n_embd {
        Value::U32(n) => Value::U32(4 * n),
        _ => unreachable!("need_uint gives U32"),
    };
    x.put(md, "embedding_length", n_embd);
    x.put(md, "feed_forward_length", ff);
    x.put(md, "attention.head_count", x.need_uint(&["n_head"])?);
    x.put(
        md,
        "attention.layer_norm_epsilon",
        x.need_float(&["layer_norm_epsilon"])?,
    );
    x.file_type(md);
    Ok(())
}

/// The converter's GPT-2 reads `n_ctx` (`config.json` at `source`).
fn convert_check(c: &serde_json::Value, source: &str) -> Result<(), Error> {
    if c.get("n_ctx").is_none() {
        return Err(bad_key(
            source,
            "n_ctx",
            "missing (convert_hf_to_gguf.py's GPT-2 needs it)",
        ));
    }
    Ok(())
}
