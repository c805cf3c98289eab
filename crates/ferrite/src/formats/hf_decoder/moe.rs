//! The mixture-of-experts part of reading HF decoder directories
//! (`Qwen3MoeForCausalLM`, `Qwen2MoeForCausalLM`), as llama.cpp's
//! converter (`Qwen2MoeModel`) writes them: `num_experts` (or
//! `num_local_experts`) -> `expert_count`, `num_experts_per_tok` ->
//! `expert_used_count`, `moe_intermediate_size` ->
//! `expert_feed_forward_length`, `shared_expert_intermediate_size` ->
//! `expert_shared_feed_forward_length`; the router `mlp.gate` ->
//! `ffn_gate_inp`, each expert's `mlp.experts.E.{gate,up,down}_proj` stacked
//! into one 3-D `ffn_{gate,up,down}_exps` tensor, the shared expert
//! `mlp.shared_expert.*` -> `ffn_*_shexp` and its gate
//! `mlp.shared_expert_gate` -> `ffn_gate_inp_shexp`.
//!
//! `norm_topk_prob`, which the converter drops (llama.cpp fixes it per
//! architecture: on for qwen3moe, off for qwen2moe), is written as
//! `{arch}.expert_weights_norm`, so a directory runs as transformers runs
//! it either way.
//!
//! Refused with an error naming the field: no experts, more experts per
//! token than experts, `decoder_sparse_step` other than 1 and a non-empty
//! `mlp_only_layers` (dense layers among the sparse ones, which neither the
//! converter nor ferrite lays out).

use std::borrow::Cow;
use std::collections::BTreeMap;

use super::{Config, Family, Keys, Out, Reshape};
use crate::formats::gguf::{Metadata, Value};
use crate::Error;

/// The expert keys of `c` into `k`.
pub(crate) fn moe_config(c: &Config, n_layers: usize, k: &mut Keys) -> Result<(), Error> {
    let (key, n_experts) = match c.opt_size("num_experts")? {
        Some(n) => ("num_experts", n),
        None => ("num_local_experts", c.size("num_local_experts")?),
    };
    if n_experts == 0 {
        return Err(c.bad(key, "0 experts"));
    }
    let top_k = c.size("num_experts_per_tok")?;
    if top_k == 0 || top_k > n_experts {
        return Err(c.bad(
            "num_experts_per_tok",
            format!("{top_k} experts per token, but there are {n_experts} experts ({key})"),
        ));
    }
    if let Some(step) = c.opt_size("decoder_sparse_step")? {
        if step != 1 {
            return Err(c.bad(
                "decoder_sparse_step",
                format!("{step}: only every layer sparse (1) is supported"),
            ));
        }
    }
    if let Some(layers) = c.get("mlp_only_layers") {
        if layers.as_array().is_none_or(|a| !a.is_empty()) {
            return Err(c.bad(
                "mlp_only_layers",
                format!(
                    "{layers}: dense layers among the {n_layers} sparse ones are not supported"
                ),
            ));
        }
    }
    k.size("expert_count", n_experts);
    k.size("expert_used_count", top_k);
    k.size(
        "expert_feed_forward_length",
        c.size("moe_intermediate_size")?,
    );
    if let Some(n) = c.opt_size("shared_expert_intermediate_size")? {
        k.size("expert_shared_feed_forward_length", n);
    }
    if let Some(norm) = c.opt_bool("norm_topk_prob")? {
        k.set("expert_weights_norm", Value::Bool(norm));
    }
    Ok(())
}

/// Marks a per-expert tensor's name for [`stack_experts`]: `{stacked}#{e}`.
const EXPERT_MARK: char = '#';

/// The GGUF name of MoE module `module` of layer `l` of a model of GGUF
/// architecture `arch` (`None`: not an MoE module); per-expert matrices
/// get a marked name, stacked later (`HfFamily::modules` of the Qwen MoE
/// families).
pub(crate) fn map_module(
    arch: &str,
    l: usize,
    module: &str,
    bias: bool,
    source: &str,
    name: &str,
) -> Result<Option<(String, Reshape)>, Error> {
    if !module.starts_with("mlp.") {
        return Ok(None);
    }
    let unknown = || {
        Error::model(
            source,
            format!("tensor '{name}' is not part of a {arch} model"),
        )
    };
    if bias {
        return Err(unknown());
    }
    let blk = |what: &str| format!("blk.{l}.{what}.weight");
    let fixed = match module {
        "mlp.gate" => Some("ffn_gate_inp"),
        "mlp.shared_expert.gate_proj" => Some("ffn_gate_shexp"),
        "mlp.shared_expert.up_proj" => Some("ffn_up_shexp"),
        "mlp.shared_expert.down_proj" => Some("ffn_down_shexp"),
        "mlp.shared_expert_gate" => Some("ffn_gate_inp_shexp"),
        _ => None,
    };
    if let Some(what) = fixed {
        return Ok(Some((blk(what), Reshape::None)));
    }
    let rest = module.strip_prefix("mlp.experts.").ok_or_else(unknown)?;
    let (e, proj) = rest.split_once('.').ok_or_else(|| {
        Error::model(
            source,
            format!(
                "tensor '{name}': fused expert tensors are not supported (expected mlp.experts.N.gate_proj, as save_pretrained writes them)"
            ),
        )
    })?;
    let e: usize = e.parse().map_err(|_| unknown())?;
    let what = match proj {
        "gate_proj" => "ffn_gate_exps",
        "up_proj" => "ffn_up_exps",
        "down_proj" => "ffn_down_exps",
        _ => return Err(unknown()),
    };
    Ok(Some((
        format!("{}{EXPERT_MARK}{e}", blk(what)),
        Reshape::None,
    )))
}

/// A per-expert tensor's marked name (from [`map_module`]) split into the
/// stacked tensor's name and the expert.
pub(crate) fn expert_of(name: &str) -> Option<(&str, usize)> {
    let (stacked, e) = name.split_once(EXPERT_MARK)?;
    Some((stacked, e.parse().ok()?))
}

/// Stacks the marked per-expert matrices of `tensors` into one 3-D tensor
/// per layer and projection (ggml dims `[cols, rows, n_experts]`), checking
/// that every expert is there once with the same shape and type.
pub(super) fn stack_experts(
    tensors: &mut Vec<Out>,
    md: &Metadata,
    f: Family,
    source: &str,
) -> Result<(), Error> {
    let Some(n) = md
        .get_u64(&format!("{}.expert_count", f.gguf_name()))
        .map(|n| n as usize)
    else {
        return Ok(());
    };
    let mut groups: BTreeMap<String, Vec<Option<Out>>> = BTreeMap::new();
    let mut kept = Vec::with_capacity(tensors.len());
    for t in tensors.drain(..) {
        let Some((stacked, e)) = t.name.split_once(EXPERT_MARK) else {
            kept.push(t);
            continue;
        };
        let stacked = stacked.to_string();
        let e: usize = e.parse().unwrap_or(usize::MAX);
        let slots = groups
            .entry(stacked.clone())
            .or_insert_with(|| (0..n).map(|_| None).collect());
        let bad = |problem: String| Error::model(source, format!("{stacked}: {problem}"));
        match slots.get_mut(e) {
            Some(slot @ None) => *slot = Some(t),
            Some(Some(_)) => return Err(bad(format!("expert {e} appears twice"))),
            None => {
                return Err(bad(format!(
                    "expert {e} is not one of the {n} experts in config.json"
                )))
            }
        }
    }
    for (stacked, slots) in groups {
        let bad = |problem: String| Error::model(source, format!("{stacked}: {problem}"));
        let mut parts = Vec::with_capacity(n);
        for (e, slot) in slots.into_iter().enumerate() {
            parts.push(slot.ok_or_else(|| bad(format!("expert {e} of {n} is missing")))?);
        }
        let first = &parts[0];
        if let Some((e, p)) = parts
            .iter()
            .enumerate()
            .find(|(_, p)| p.dims != first.dims || p.ty != first.ty)
        {
            return Err(bad(format!(
                "expert {e} has shape {:?} {}, expert 0 {:?} {}",
                p.dims, p.ty, first.dims, first.ty
            )));
        }
        let (mut dims, ty) = (first.dims.clone(), first.ty);
        dims.push(n as u64);
        let mut data = Vec::with_capacity(parts.iter().map(|p| p.data.len()).sum());
        for p in &parts {
            data.extend_from_slice(&p.data);
        }
        kept.push(Out {
            name: stacked,
            dims,
            ty,
            data: Cow::Owned(data),
        });
    }
    *tensors = kept;
    Ok(())
}
