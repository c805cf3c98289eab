//! Qwen3-MoE and Qwen2-MoE as llama.cpp's GGUF files lay them out
//! (`general.architecture = "qwen3moe"` / `"qwen2moe"`): the Qwen3 / Qwen2
//! block (per-head Q/K norms / Q, K, V biases) with a mixture-of-experts
//! feed-forward network in every layer (`crate::layers::moe`): a router
//! `ffn_gate_inp` (`expert_count` x dim), softmax over the experts, the
//! `expert_used_count` most probable, their SwiGLU experts stacked in
//! `ffn_{gate,up,down}_exps` (one 3-D tensor each); Qwen2-MoE adds a shared
//! expert (`ffn_{gate,up,down}_shexp`) scaled by `sigmoid(ffn_gate_inp_shexp
//! . x)`.
//!
//! The picked weights are divided by their sum (`norm_topk_prob`) for
//! Qwen3-MoE and not for Qwen2-MoE, as llama.cpp hard-codes it per
//! architecture; ferrite's own key `{arch}.expert_weights_norm` (written by
//! the HF directory reader from `norm_topk_prob`, and by llama.cpp's
//! converter for other MoE families) overrides that.
//!
//! Reference: llama.cpp `src/models/qwen3moe.cpp`, `qwen2moe.cpp`; HF
//! `modeling_qwen3_moe.py`, `modeling_qwen2_moe.py`.
//!
//! The families' registry entries (`QWEN3MOE_FAMILY`, `QWEN2MOE_FAMILY`,
//! see `models::registry`) are here too: the Hugging Face classes read as
//! them (`QWEN3MOE_HF`, `QWEN2MOE_HF`, with `formats::hf_decoder`'s expert
//! keys and stacking in `moe.rs`) and the converter's keys.

use std::sync::Arc;

use crate::formats::gguf::GgufFile;
use crate::layers::moe::{Expert, ExpertAct, Gating, Moe, SharedExpert};
use crate::layers::rope::RopeStyle;
use crate::models::build;
use crate::models::hparams::HParams;
use crate::models::llama::{load_family_with, Family};
use crate::models::transformer::{Decoder, Mlp, Shape};
use crate::tensor::Loader;
use crate::Error;
use crate::formats::hf_decoder::Family as HfMapping;
use crate::models::registry::DecoderFamily;
use crate::formats::hf_decoder::{map_module, qwen_moe_config, HfFamily, LLAMA_LAYER};
use crate::convert::families::ConvertSpec;
use crate::convert::keys::{generic_keys, Ctx};
use crate::formats::gguf::Metadata;

const QWEN3_MOE: Family = Family {
    rope_style: RopeStyle::Halves,
    default_eps: 1e-6,
    default_ctx: 40_960,
    qk_norm: true,
};

const QWEN2_MOE: Family = Family {
    rope_style: RopeStyle::Halves,
    default_eps: 1e-6,
    default_ctx: 32_768,
    qk_norm: false,
};

/// Loads a Qwen3-MoE file.
pub fn load_qwen3moe(file: Arc<GgufFile>) -> Result<Decoder, Error> {
    load(file, &QWEN3_MOE, true)
}

/// Loads a Qwen2-MoE file.
pub fn load_qwen2moe(file: Arc<GgufFile>) -> Result<Decoder, Error> {
    load(file, &QWEN2_MOE, false)
}

/// The experts' sizes and routing, from the metadata.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MoeParams {
    pub n_experts: usize,
    pub top_k: usize,
    pub expert_ffn: usize,
    /// The shared expert's width, if the file states one.
    pub shared_ffn: Option<usize>,
    pub norm: bool,
}

/// `expert_count`, `expert_used_count` (at most `expert_count`),
/// `expert_feed_forward_length`, `expert_shared_feed_forward_length` and
/// `expert_weights_norm` (default `default_norm`); errors name the key.
pub fn moe_params(hp: &HParams, default_norm: bool) -> Result<MoeParams, Error> {
    let n_experts = hp.size("expert_count")?;
    let top_k = hp.size("expert_used_count")?;
    if top_k > n_experts {
        return Err(hp.error(
            "expert_used_count",
            &format!("{top_k} experts per token, but expert_count is {n_experts}"),
        ));
    }
    let norm = match hp.opt_value("expert_weights_norm") {
        None => default_norm,
        Some(v) => match (v.as_bool(), v.as_u64()) {
            (Some(b), _) => b,
            (None, Some(n)) if n <= 1 => n == 1,
            _ => return Err(hp.error("expert_weights_norm", &format!("{v} is not a boolean"))),
        },
    };
    Ok(MoeParams {
        n_experts,
        top_k,
        expert_ffn: hp.size("expert_feed_forward_length")?,
        shared_ffn: hp.opt_size("expert_shared_feed_forward_length")?,
        norm,
    })
}

/// Layer `l`'s experts stacked in `gate`, `up`, `down` (3-D tensors), each
/// `ffn` wide.
pub fn stacked_experts(
    w: &Loader,
    [gate, up, down]: [&str; 3],
    n: usize,
    ffn: usize,
    dim: usize,
) -> Result<Vec<Expert>, Error> {
    // Expert by expert: each one's repacked matrices then lie side by side
    // in memory in the order decoding reads them (gate, up, then down), so
    // the kernels' prefetch past the end of one matrix fetches the start
    // of the next instead of lines nobody reads.
    (0..n)
        .map(|e| {
            Ok(Expert {
                gate: w.stacked_linear(gate, (e, n), ffn, dim)?,
                up: w.stacked_linear(up, (e, n), ffn, dim)?,
                down: w.stacked_linear(down, (e, n), dim, ffn)?,
            })
        })
        .collect()
}

fn blk(l: usize, what: &str) -> String {
    format!("blk.{l}.{what}.weight")
}

/// Layer `l`'s mixture of experts.
fn moe_layer(w: &Loader, l: usize, s: &Shape, p: &MoeParams) -> Result<Mlp, Error> {
    let dim = s.dim;
    let router = build::linear(w, &blk(l, "ffn_gate_inp"), p.n_experts, dim)?;
    let names = ["ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"].map(|n| blk(l, n));
    let experts = stacked_experts(
        w,
        names.each_ref().map(String::as_str),
        p.n_experts,
        p.expert_ffn,
        dim,
    )?;
    let shared = if w.has(&blk(l, "ffn_gate_shexp")) {
        let ffn = p.shared_ffn.unwrap_or(s.ffn_dim);
        let mlp = Expert {
            gate: build::linear(w, &blk(l, "ffn_gate_shexp"), ffn, dim)?,
            up: build::linear(w, &blk(l, "ffn_up_shexp"), ffn, dim)?,
            down: build::linear(w, &blk(l, "ffn_down_shexp"), dim, ffn)?,
        };
        let gate_name = blk(l, "ffn_gate_inp_shexp");
        let gate = if w.has(&gate_name) {
            Some(build::linear(w, &gate_name, 1, dim)?)
        } else {
            None
        };
        Some(SharedExpert { mlp, gate })
    } else {
        None
    };
    Ok(Mlp::Moe(Box::new(Moe {
        router,
        gating: Gating::SoftmaxTopK { norm: p.norm },
        top_k: p.top_k,
        experts,
        act: ExpertAct::Silu,
        shared,
    })))
}

fn load(file: Arc<GgufFile>, f: &Family, default_norm: bool) -> Result<Decoder, Error> {
    let source = file.path().display().to_string();
    let hp = HParams::of(&file, &source);
    let p = moe_params(&hp, default_norm)?;
    let mut d = load_family_with(file.clone(), f, &|w, l, s| moe_layer(w, l, s, &p))?;
    widen_ffn(&mut d);
    Ok(d)
}

/// Makes the decoder's `ffn_dim` (its scratch rows) at least as wide as
/// any mixture's widest expert.
pub fn widen_ffn(d: &mut Decoder) {
    for b in &d.blocks {
        if let Mlp::Moe(m) = &b.mlp {
            d.shape.ffn_dim = d.shape.ffn_dim.max(m.ffn_dim());
        }
    }
}

/// `Qwen3MoeForCausalLM` directories: Qwen3's keys and modules (with the
/// per-head Q/K norms), Qwen's window, and the experts (`map_module`
/// stacks `mlp.experts.E.*` into `ffn_*_exps`).
const QWEN3MOE_HF: HfFamily = HfFamily {
    arch: "qwen3moe",
    config: qwen_moe_config,
    layer: &LLAMA_LAYER,
    norm_plus_one: false,
    permute_qk: false,
    mxfp4: false,
    modules: Some(map_module),
    special: None,
};

/// `Qwen2MoeForCausalLM` directories: Qwen2's keys and modules, the
/// experts and the shared expert.
const QWEN2MOE_HF: HfFamily = HfFamily {
    arch: "qwen2moe",
    layer: LLAMA_LAYER.split_at(9).0,
    ..QWEN3MOE_HF
};

/// Qwen3-MoE: GGUF `qwen3moe`, read from `Qwen3MoeForCausalLM`.
pub(crate) const QWEN3MOE_FAMILY: DecoderFamily = DecoderFamily {
    hf: &[("Qwen3MoeForCausalLM", HfMapping::Table(&QWEN3MOE_HF))],
    convert: Some(ConvertSpec::new(convert_keys)),
    ..DecoderFamily::new("qwen3moe", load_qwen3moe)
};

/// Qwen2-MoE: GGUF `qwen2moe`, read from `Qwen2MoeForCausalLM`.
pub(crate) const QWEN2MOE_FAMILY: DecoderFamily = DecoderFamily {
    hf: &[("Qwen2MoeForCausalLM", HfMapping::Table(&QWEN2MOE_HF))],
    convert: Some(ConvertSpec::new(convert_keys)),
    ..DecoderFamily::new("qwen2moe", load_qwen2moe)
};

/// `Qwen2MoeModel` (and `Qwen3MoeModel`): the generic keys, then the
/// expert sizes.
fn convert_keys(x: &Ctx, md: &mut Metadata) -> Result<(), Error> {
    generic_keys(x, md)?;
    if let Some(v) = x.find(&["moe_intermediate_size"]) {
        x.put(
            md,
            "expert_feed_forward_length",
            x.uint(v, "moe_intermediate_size")?,
        );
    }
    if let Some(v) = x.find(&["shared_expert_intermediate_size"]) {
        x.put(
            md,
            "expert_shared_feed_forward_length",
            x.uint(v, "shared_expert_intermediate_size")?,
        );
    }
    Ok(())
}
