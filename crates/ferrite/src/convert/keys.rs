//! The hyper-parameter keys `ferrite convert` writes, in the converter's
//! order: what a family's keys are written from ([`Ctx`]) and the generic
//! ones (`TextModel.set_gguf_parameters`, here [`generic_keys`]); each
//! decoder family's own are in its file in `models/` (its registry entry's
//! `convert`), the encoders' in `families.rs`. As
//! gguf-py's writer, a key written twice keeps its first place and takes
//! the last value ([`Metadata::set`]).

use std::path::Path;

use serde_json::{Map, Value as Json};

use crate::formats::gguf::{Metadata, Value};
use crate::Error;

/// What a family's keys are written from.
pub(crate) struct Ctx<'a> {
    pub(crate) dir: &'a Path,
    /// `config.json`.
    pub(crate) c: &'a Json,
    pub(crate) arch: &'static str,
    /// `general.file_type`.
    pub(crate) file_type: u32,
}

impl Ctx<'_> {
    pub(crate) fn bad(&self, key: &str, problem: &str) -> Error {
        Error::model("config.json", format!("'{key}': {problem}"))
    }

    /// `{arch}.{k}` set (gguf-py: an existing key keeps its place).
    pub(crate) fn put(&self, md: &mut Metadata, k: &str, v: Value) {
        md.set(format!("{}.{k}", self.arch), v);
    }

    /// The first of `keys` present (gguf-py `find_hparam`; `None` when
    /// absent or null).
    pub(crate) fn find(&self, keys: &[&str]) -> Option<&Json> {
        find(self.c, keys)
    }

    /// A size (written as UINT32).
    pub(crate) fn uint(&self, v: &Json, key: &str) -> Result<Value, Error> {
        v.as_u64()
            .and_then(|x| u32::try_from(x).ok())
            .map(Value::U32)
            .ok_or_else(|| self.bad(key, "not a size"))
    }

    /// A number (written as FLOAT32).
    pub(crate) fn float(&self, v: &Json, key: &str) -> Result<Value, Error> {
        v.as_f64()
            .map(|x| Value::F32(x as f32))
            .ok_or_else(|| self.bad(key, "not a number"))
    }

    /// The size under the first of `keys`, which must be there.
    pub(crate) fn need_uint(&self, keys: &[&str]) -> Result<Value, Error> {
        let v = self
            .find(keys)
            .ok_or_else(|| self.bad(keys[0], "missing"))?;
        self.uint(v, keys[0])
    }

    /// The number under the first of `keys`, which must be there.
    pub(crate) fn need_float(&self, keys: &[&str]) -> Result<Value, Error> {
        let v = self
            .find(keys)
            .ok_or_else(|| self.bad(keys[0], "missing"))?;
        self.float(v, keys[0])
    }

    pub(crate) fn file_type(&self, md: &mut Metadata) {
        md.set("general.file_type".into(), Value::U32(self.file_type));
    }
}

/// The first of `keys` in `c` (gguf-py `find_hparam`).
pub(super) fn find<'a>(c: &'a Json, keys: &[&str]) -> Option<&'a Json> {
    keys.iter().find_map(|k| c.get(*k)).filter(|v| !v.is_null())
}

/// The RoPE base's spellings, global and local.
const THETA: [&str; 5] = [
    "global_rope_theta",
    "rope_global_theta",
    "rope_theta_global",
    "rope_theta",
    "rotary_emb_base",
];
const LOCAL_THETA: [&str; 5] = [
    "local_rope_theta",
    "rope_local_theta",
    "rope_theta_local",
    "swa_rope_theta",
    "rope_local_base_freq",
];

/// The converter's `rope_parameters`: `rope_parameters` (transformers 5)
/// or `rope_scaling`, with the top-level RoPE keys mirrored in unless it is
/// per attention type (`full_attention` / `sliding_attention`).
pub(crate) fn rope_parameters(c: &Json) -> Map<String, Json> {
    let mut rp = c
        .get("rope_parameters")
        .or_else(|| c.get("rope_scaling"))
        .and_then(Json::as_object)
        .cloned()
        .unwrap_or_default();
    if rp.contains_key("full_attention") || rp.contains_key("sliding_attention") {
        return rp;
    }
    if let Some(t) = find(c, &LOCAL_THETA) {
        rp.insert(
            "sliding_attention".into(),
            serde_json::json!({ "rope_theta": t }),
        );
    }
    let mirrored = [
        ("rope_theta", &THETA[..]),
        (
            "partial_rotary_factor",
            &["partial_rotary_factor", "rope_pct", "rope_percent"],
        ),
        (
            "original_max_position_embeddings",
            &["original_max_position_embeddings"],
        ),
    ];
    for (key, keys) in mirrored {
        if !rp.contains_key(key) {
            if let Some(v) = find(c, keys) {
                rp.insert(key.into(), v.clone());
            }
        }
    }
    if !rp.contains_key("rope_type") {
        if let Some(t) = rp.get("type").cloned() {
            rp.insert("rope_type".into(), t);
        }
    }
    rp
}

/// The parameters of the global layers: `full_attention`, else the whole.
pub(crate) fn global_rope(rp: &Map<String, Json>) -> &Map<String, Json> {
    rp.get("full_attention")
        .and_then(Json::as_object)
        .unwrap_or(rp)
}

/// `TextModel.set_gguf_parameters`: the generic hyper-parameters, then
/// `general.file_type`.
pub(crate) fn generic_keys(x: &Ctx, md: &mut Metadata) -> Result<(), Error> {
    let c = x.c;
    let block = x
        .find(&["n_layers", "num_hidden_layers", "n_layer", "num_layers"])
        .ok_or_else(|| x.bad("num_hidden_layers", "missing"))?;
    x.put(md, "block_count", x.uint(block, "num_hidden_layers")?);
    for (key, keys) in [
        (
            "context_length",
            &[
                "max_position_embeddings",
                "n_ctx",
                "n_positions",
                "max_length",
                "max_sequence_length",
                "model_max_length",
            ][..],
        ),
        ("embedding_length", &["hidden_size", "n_embd", "dim"]),
        (
            "feed_forward_length",
            &[
                "prefix_dense_intermediate_size",
                "dense_intermediate_size",
                "intermediate_size",
                "n_inner",
                "hidden_dim",
            ],
        ),
        (
            "attention.head_count",
            &["num_attention_heads", "n_head", "n_heads"],
        ),
        (
            "attention.head_count_kv",
            &["num_key_value_heads", "n_kv_heads"],
        ),
    ] {
        if let Some(v) = x.find(keys) {
            x.put(md, key, x.uint(v, keys[0])?);
        }
    }
    if c.get("is_causal") == Some(&Json::Bool(false)) {
        x.put(md, "attention.causal", Value::Bool(false));
    }
    let rp = rope_parameters(c);
    let g = global_rope(&rp);
    let p = |k: &str| g.get(k).filter(|v| !v.is_null());
    if let Some(t) = p("rope_type").and_then(Json::as_str) {
        let factor = p("factor");
        match (t, factor) {
            ("linear", Some(f)) => {
                x.put(md, "rope.scaling.type", Value::String("linear".into()));
                x.put(md, "rope.scaling.factor", x.float(f, "factor")?);
            }
            ("yarn", Some(f)) => {
                x.put(md, "rope.scaling.type", Value::String("yarn".into()));
                x.put(md, "rope.scaling.factor", x.float(f, "factor")?);
                let orig = p("original_max_position_embeddings")
                    .ok_or_else(|| x.bad("original_max_position_embeddings", "missing"))?;
                x.put(
                    md,
                    "rope.scaling.original_context_length",
                    x.uint(orig, "original_max_position_embeddings")?,
                );
                for (key, names) in [
                    (
                        "rope.scaling.yarn_ext_factor",
                        &["extrapolation_factor"][..],
                    ),
                    (
                        "rope.scaling.yarn_attn_factor",
                        &["attention_factor", "attn_factor"],
                    ),
                    ("rope.scaling.yarn_beta_fast", &["beta_fast"]),
                    ("rope.scaling.yarn_beta_slow", &["beta_slow"]),
                ] {
                    if let Some(v) = names.iter().find_map(|n| p(n)) {
                        x.put(md, key, x.float(v, names[0])?);
                    }
                }
            }
            ("su" | "longrope", _) => {
                x.put(md, "rope.scaling.type", Value::String("longrope".into()));
            }
            _ => {}
        }
    }
    if rp.contains_key("mrope_section") {
        return Err(x.bad(
            "rope_parameters.mrope_section",
            "multimodal RoPE sections are not converted",
        ));
    }
    if let Some(t) = p("rope_theta") {
        x.put(md, "rope.freq_base", x.float(t, "rope_theta")?);
    }
    let local = rp
        .get("sliding_attention")
        .and_then(|s| s.get("rope_theta"))
        .filter(|v| !v.is_null());
    if let Some(t) = local {
        x.put(md, "rope.freq_base_swa", x.float(t, "rope_theta")?);
    }
    if let Some(v) = x.find(&["rms_norm_eps", "norm_eps"]) {
        x.put(
            md,
            "attention.layer_norm_rms_epsilon",
            x.float(v, "rms_norm_eps")?,
        );
    }
    if let Some(v) = x.find(&["layer_norm_eps", "layer_norm_epsilon", "norm_epsilon"]) {
        x.put(
            md,
            "attention.layer_norm_epsilon",
            x.float(v, "layer_norm_eps")?,
        );
    }
    if let Some(v) = x.find(&["num_local_experts", "num_experts", "n_routed_experts"]) {
        x.put(md, "expert_count", x.uint(v, "num_experts")?);
    }
    let used = [
        "num_experts_per_tok",
        "num_experts_per_token",
        "top_k_experts",
    ];
    if let Some(v) = x.find(&used) {
        x.put(md, "expert_used_count", x.uint(v, used[0])?);
    }
    // Expert groups and router functions (DeepSeek-style routing): no
    // architecture ferrite converts has them.
    for key in ["n_group", "topk_group", "scoring_func", "score_function"] {
        if c.get(key).is_some_and(|v| !v.is_null()) {
            return Err(x.bad(key, "expert groups and router functions are not converted"));
        }
    }
    if let Some(h) = c.get("head_dim").filter(|v| !v.is_null()) {
        x.put(md, "attention.key_length", x.uint(h, "head_dim")?);
        x.put(md, "attention.value_length", x.uint(h, "head_dim")?);
    }
    x.file_type(md);
    Ok(())
}

/// An error about key `key` of the file `source`.
pub(crate) fn bad_key(source: &str, key: &str, problem: &str) -> Error {
    Error::model(source, format!("'{key}': {problem}"))
}
