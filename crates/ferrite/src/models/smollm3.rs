//! SmolLM3 as llama.cpp's GGUF files lay it out
//! (`general.architecture = "smollm3"`): the Llama block (see `llama.rs`),
//! with some layers attending without RoPE (NoPE): their queries and keys
//! are used as projected. Which ones: `smollm3.no_rope_layers` when the
//! file has it (ferrite writes it for HF directories: one flag per layer,
//! 1 = the layer uses RoPE, as HF's `no_rope_layers` list), else every
//! fourth layer (`(l + 1) % 4 == 0`), llama.cpp's fixed step, which is
//! SmolLM3-3B's `no_rope_layer_interval` (the converter writes no key).
//!
//! Reference: llama.cpp `src/models/smollm3.cpp`; HF `modeling_smollm3.py`.
//!
//! The family's registry entry (`FAMILY`, see `models::registry`) is here
//! too: the Hugging Face class read as it, with its `config.json` keys
//! and module names (`HF`), and the converter's keys (`convert_keys`).

use std::sync::Arc;

use crate::formats::gguf::GgufFile;
use crate::models::hparams::HParams;
use crate::models::llama::{load_family, LLAMA};
use crate::models::transformer::Decoder;
use crate::Error;
use crate::formats::hf_decoder::Family as HfMapping;
use crate::models::registry::DecoderFamily;
use crate::formats::hf_decoder::{llama_keys, Config, HfFamily, Hp, Keys, LLAMA_LAYER};
use crate::formats::gguf::{Array, Value};
use crate::convert::families::ConvertSpec;

/// llama.cpp's step of NoPE layers.
pub(crate) const NO_ROPE_STEP: usize = 4;

/// The key of the per-layer RoPE flags.
pub(crate) const NO_ROPE_LAYERS: &str = "no_rope_layers";

/// Loads a SmolLM3 file.
pub fn load(file: Arc<GgufFile>) -> Result<Decoder, Error> {
    let source = file.path().display().to_string();
    let uses_rope = {
        let hp = HParams::of(&file, &source);
        let n = hp.size("block_count")?;
        hp.opt_flags(NO_ROPE_LAYERS, n)?
            .unwrap_or_else(|| (0..n).map(|l| (l + 1) % NO_ROPE_STEP != 0).collect())
    };
    let mut d = load_family(file, &LLAMA)?;
    for (block, rope) in d.blocks.iter_mut().zip(uses_rope) {
        if !rope {
            block.attn.rope = None;
        }
    }
    Ok(d)
}

// How a Hugging Face directory of this family becomes its GGUF file
// (`formats::hf_decoder` runs it).

/// `SmolLM3ForCausalLM` directories.
pub(crate) const HF: HfFamily = HfFamily {
    arch: "smollm3",
    config: hf_config,
    // Llama's modules (without Qwen3's Q/K norms).
    layer: LLAMA_LAYER.split_at(9).0,
    norm_plus_one: false,
    permute_qk: true,
    mxfp4: false,
    modules: None,
    special: None,
};

/// SmolLM3's `config.json`: Llama's keys, tied by default, and the layers
/// with RoPE (`no_rope_layers`, else every `no_rope_layer_interval`-th
/// layer, default 4, goes without).
fn hf_config(c: &Config, k: &mut Keys) -> Result<Hp, Error> {
    if c.opt_bool("use_sliding_window")? == Some(true) {
        return Err(c.bad(
            "use_sliding_window",
            "sliding windows are not supported for SmolLM3",
        ));
    }
    let mut hp = llama_keys(c, k, "hidden_act", &["silu"])?;
    hp.tied = c.opt_bool("tie_word_embeddings")?.unwrap_or(true);
    if let Some(v) = hp.vocab_size {
        k.size("vocab_size", v);
    }
    let n = hp.n_layers;
    let flags = match c.get("no_rope_layers") {
        Some(v) => {
            let bad = || c.bad("no_rope_layers", format!("expected {n} flags of 0 or 1"));
            let list = v.as_array().filter(|a| a.len() == n).ok_or_else(bad)?;
            list.iter()
                .map(|x| match x.as_u64() {
                    Some(0) => Ok(false),
                    Some(1) => Ok(true),
                    _ => Err(bad()),
                })
                .collect::<Result<Vec<bool>, Error>>()?
        }
        None => {
            let step = c
                .opt_size("no_rope_layer_interval")?
                .unwrap_or(NO_ROPE_STEP);
            (0..n).map(|l| (l + 1) % step != 0).collect()
        }
    };
    k.set(NO_ROPE_LAYERS, Value::Array(Array::Bool(flags)));
    Ok(hp)
}

/// The SmolLM3 family: GGUF `smollm3`, read from `SmolLM3ForCausalLM`.
pub(crate) const FAMILY: DecoderFamily = DecoderFamily {
    hf: &[("SmolLM3ForCausalLM", HfMapping::Table(&HF))],
    // The converter's `SmolLM3Model` writes Llama's keys.
    convert: Some(ConvertSpec::new(crate::models::llama::convert_keys)),
    ..DecoderFamily::new("smollm3", load)
};
