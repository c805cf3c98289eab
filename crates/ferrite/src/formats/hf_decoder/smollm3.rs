//! SmolLM3 (`SmolLM3ForCausalLM`) directories: `config.json` into the keys
//! `convert_hf_to_gguf.py` writes, and each layer's HF modules into GGUF
//! tensor names. The model itself is `models/smollm3.rs`.

use super::{llama_keys, Config, HfFamily, Hp, Keys, LLAMA_LAYER};
use crate::formats::gguf::{Array, Value};
use crate::models::smollm3::{NO_ROPE_LAYERS, NO_ROPE_STEP};
use crate::Error;

/// `SmolLM3ForCausalLM` directories.
pub(crate) const HF: HfFamily = HfFamily {
    arch: "smollm3",
    config: hf_config,
    // Llama's modules (without Qwen3's Q/K norms).
    layer: LLAMA_LAYER.split_at(9).0,
    norm_plus_one: false,
    permute_qk: true,
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
