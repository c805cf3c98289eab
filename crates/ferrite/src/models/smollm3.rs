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

use std::sync::Arc;

use crate::formats::gguf::GgufFile;
use crate::models::hparams::HParams;
use crate::models::llama::{load_family, LLAMA};
use crate::models::transformer::Decoder;
use crate::Error;
use crate::formats::hf_decoder::{smollm3 as hf_smollm3, Family as HfMapping};
use crate::models::registry::DecoderFamily;
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

/// The SmolLM3 family: GGUF `smollm3`, read from `SmolLM3ForCausalLM`.
pub(crate) const FAMILY: DecoderFamily = DecoderFamily {
    hf: &[("SmolLM3ForCausalLM", HfMapping::Table(&hf_smollm3::HF))],
    // The converter's `SmolLM3Model` writes Llama's keys.
    convert: Some(ConvertSpec::new(crate::models::llama::convert_keys)),
    ..DecoderFamily::new("smollm3", load)
};
