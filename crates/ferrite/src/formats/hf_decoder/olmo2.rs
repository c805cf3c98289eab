//! OLMo 2 (`Olmo2ForCausalLM`) directories: `config.json` into the keys
//! `convert_hf_to_gguf.py` writes, and each layer's HF modules into GGUF
//! tensor names. The model itself is `models/olmo2.rs`.

use super::{llama_keys, Config, HfFamily, Hp, Keys, LayerName};
use crate::formats::names;
use crate::Error;

/// Per-layer modules of `Olmo2ForCausalLM` directories.
const HF_LAYER: [(&str, LayerName); 11] = [
    ("self_attn.q_proj", names::attn_q),
    ("self_attn.k_proj", names::attn_k),
    ("self_attn.v_proj", names::attn_v),
    ("self_attn.o_proj", names::attn_output),
    ("self_attn.q_norm", names::attn_q_norm),
    ("self_attn.k_norm", names::attn_k_norm),
    ("post_attention_layernorm", names::post_attention_norm),
    ("post_feedforward_layernorm", names::post_ffw_norm),
    ("mlp.gate_proj", names::ffn_gate),
    ("mlp.up_proj", names::ffn_up),
    ("mlp.down_proj", names::ffn_down),
];

/// `Olmo2ForCausalLM` directories.
pub(crate) const HF: HfFamily = HfFamily {
    arch: "olmo2",
    config: hf_config,
    layer: &HF_LAYER,
    norm_plus_one: false,
    permute_qk: false,
    special: None,
};

/// OLMo 2's `config.json`: Llama's keys (untied unless it says so).
fn hf_config(c: &Config, k: &mut Keys) -> Result<Hp, Error> {
    if c.get("sliding_window").is_some() {
        return Err(c.bad(
            "sliding_window",
            "sliding windows (OLMo 3) are not supported",
        ));
    }
    let mut hp = llama_keys(c, k, "hidden_act", &["silu"])?;
    hp.tied = c.opt_bool("tie_word_embeddings")?.unwrap_or(false);
    Ok(hp)
}
