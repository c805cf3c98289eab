//! The architectures `ferrite convert` writes ([`FAMILIES`]) and each
//! family's `set_gguf_parameters` in the converter (`conversion/*.py` of
//! llama.cpp): the keys, their order, and the defaults it assumes.

use serde_json::Value as Json;

use super::keys::{generic_keys, global_rope, rope_parameters, Ctx};
use super::vocab::VocabKind;
use crate::formats::gguf::{Array, Metadata, Value};
use crate::Error;

/// Writes keys into the metadata.
pub(super) type Keys = fn(&Ctx, &mut Metadata) -> Result<(), Error>;

/// One GGUF architecture the converter writes.
pub(super) struct Spec {
    pub(super) arch: &'static str,
    /// Keys the converter writes before `general.type` (while it makes up
    /// tensors: Phi-3's LongRoPE attention factor).
    pub(super) early: Option<Keys>,
    /// The hyper-parameters, `general.file_type` among them.
    pub(super) keys: Keys,
    pub(super) vocab: VocabKind,
    /// `add_prefix_space` of `tokenizer_config.json` as
    /// `tokenizer.ggml.add_space_prefix` (Llama's `set_vocab`).
    pub(super) space_prefix: bool,
    /// The converter reads a SentencePiece `tokenizer.model` when there is
    /// one (Gemma, Phi-3): ferrite does not convert those vocabularies and
    /// refuses such a directory rather than write another vocabulary.
    pub(super) sentencepiece: bool,
}

const fn spec(arch: &'static str, keys: Keys) -> Spec {
    Spec {
        arch,
        early: None,
        keys,
        vocab: VocabKind::Gpt2,
        space_prefix: false,
        sentencepiece: false,
    }
}

/// The architectures `ferrite convert` writes (decoders: the HF classes
/// of `formats::hf_decoder`): adding one is one entry here.
pub(super) const FAMILIES: [Spec; 14] = [
    Spec {
        vocab: VocabKind::Bert,
        ..spec("bert", bert)
    },
    Spec {
        vocab: VocabKind::Bert,
        ..spec("nomic-bert", nomic_bert)
    },
    Spec {
        space_prefix: true,
        ..spec("llama", llama)
    },
    spec("qwen2", generic_keys),
    spec("qwen3", generic_keys),
    spec("gpt2", gpt2),
    Spec {
        sentencepiece: true,
        ..spec("gemma2", gemma2)
    },
    Spec {
        sentencepiece: true,
        ..spec("gemma3", gemma3)
    },
    Spec {
        early: Some(phi3_attn_factor),
        sentencepiece: true,
        ..spec("phi3", phi3)
    },
    spec("olmo2", olmo2),
    spec("smollm3", llama),
    spec("qwen2moe", qwen_moe),
    spec("qwen3moe", qwen_moe),
    spec("gpt-oss", gpt_oss),
];

/// `BertModel`: the generic keys, then not causal and the pooling.
pub(super) fn bert(x: &Ctx, md: &mut Metadata) -> Result<(), Error> {
    generic_keys(x, md)?;
    super::bert::bert_keys(x, md)
}

/// `NomicBertModel`: see [`super::bert::nomic_keys`].
pub(super) fn nomic_bert(x: &Ctx, md: &mut Metadata) -> Result<(), Error> {
    super::bert::nomic_keys(x, md)
}

/// `LlamaModel` (and `SmolLM3Model`): the generic keys, then the vocabulary
/// size and the rotated dimensions.
pub(super) fn llama(x: &Ctx, md: &mut Metadata) -> Result<(), Error> {
    generic_keys(x, md)?;
    x.put(md, "vocab_size", x.need_uint(&["vocab_size"])?);
    let dim = match x.find(&["head_dim"]) {
        Some(d) => x.uint(d, "head_dim")?,
        None => {
            let width = x.c.get("hidden_size").and_then(Json::as_u64);
            let heads = x.c.get("num_attention_heads").and_then(Json::as_u64);
            match (width, heads) {
                (Some(w), Some(h)) if h > 0 => Value::U32((w / h) as u32),
                _ => return Err(x.bad("num_attention_heads", "missing")),
            }
        }
    };
    x.put(md, "rope.dimension_count", dim);
    Ok(())
}

/// `GPT2Model` (instead of the generic keys).
pub(super) fn gpt2(x: &Ctx, md: &mut Metadata) -> Result<(), Error> {
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

/// The layer count's spellings (`TextModel.block_count`).
const BLOCKS: [&str; 4] = ["n_layers", "num_hidden_layers", "n_layer", "num_layers"];

/// Required keys in order: GGUF key, `config.json` spellings, whether it
/// is a number (else a size).
fn required(x: &Ctx, md: &mut Metadata, keys: &[(&str, &[&str], bool)]) -> Result<(), Error> {
    for (key, names, float) in keys {
        let v = if *float {
            x.need_float(names)?
        } else {
            x.need_uint(names)?
        };
        x.put(md, key, v);
    }
    Ok(())
}

/// `Gemma2Model` (instead of the generic keys).
pub(super) fn gemma2(x: &Ctx, md: &mut Metadata) -> Result<(), Error> {
    required(
        x,
        md,
        &[
            ("context_length", &["max_position_embeddings"], false),
            ("embedding_length", &["hidden_size"], false),
            ("block_count", &BLOCKS, false),
            ("feed_forward_length", &["intermediate_size"], false),
            ("attention.head_count", &["num_attention_heads"], false),
            (
                "attention.head_count_kv",
                &["num_key_value_heads", "num_attention_heads"],
                false,
            ),
            ("attention.layer_norm_rms_epsilon", &["rms_norm_eps"], true),
            ("attention.key_length", &["head_dim"], false),
            ("attention.value_length", &["head_dim"], false),
        ],
    )?;
    x.file_type(md);
    required(
        x,
        md,
        &[
            ("attn_logit_softcapping", &["attn_logit_softcapping"], true),
            (
                "final_logit_softcapping",
                &["final_logit_softcapping"],
                true,
            ),
            ("attention.sliding_window", &["sliding_window"], false),
        ],
    )
}

/// `Gemma3Model`: the generic keys, then some again with Gemma 3's
/// defaults (a key written again keeps its place).
pub(super) fn gemma3(x: &Ctx, md: &mut Metadata) -> Result<(), Error> {
    generic_keys(x, md)?;
    let uint_or = |key: &str, default: u32| -> Result<Value, Error> {
        x.find(&[key])
            .map_or(Ok(Value::U32(default)), |v| x.uint(v, key))
    };
    let float_or = |key: &str, default: f64| -> Result<Value, Error> {
        x.find(&[key])
            .map_or(Ok(Value::F32(default as f32)), |v| x.float(v, key))
    };
    x.put(
        md,
        "context_length",
        uint_or("max_position_embeddings", 131072)?,
    );
    x.put(
        md,
        "attention.head_count",
        uint_or("num_attention_heads", 8)?,
    );
    x.put(
        md,
        "attention.layer_norm_rms_epsilon",
        float_or("rms_norm_eps", 1e-6)?,
    );
    x.put(md, "attention.key_length", uint_or("head_dim", 256)?);
    x.put(md, "attention.value_length", uint_or("head_dim", 256)?);
    let rp = rope_parameters(x.c);
    let theta = match global_rope(&rp).get("rope_theta") {
        Some(t) => x.float(t, "rope_theta")?,
        None => Value::F32(1_000_000.0),
    };
    x.put(md, "rope.freq_base", theta);
    if x.c
        .get("attn_logit_softcapping")
        .is_some_and(|v| !v.is_null())
    {
        return Err(x.bad(
            "attn_logit_softcapping",
            "Gemma 3 has none (the converter refuses it)",
        ));
    }
    // Written when truthy (not null, not 0).
    if let Some(v) = x
        .find(&["final_logit_softcapping"])
        .filter(|v| v.as_f64() != Some(0.0))
    {
        x.put(
            md,
            "final_logit_softcapping",
            x.float(v, "final_logit_softcapping")?,
        );
    }
    if x.c.get("sliding_window_pattern").and_then(Json::as_u64) != Some(1) {
        x.put(
            md,
            "attention.sliding_window",
            x.need_uint(&["sliding_window"])?,
        );
    }
    x.put(
        md,
        "attention.head_count_kv",
        uint_or("num_key_value_heads", 4)?,
    );
    Ok(())
}

/// Phi-3's RoPE numbers: (context, original context, rotated dimensions,
/// the parameters).
fn phi3_rope(x: &Ctx) -> Result<(f64, f64, u64, serde_json::Map<String, Json>), Error> {
    let rp = rope_parameters(x.c);
    let num = |v: Option<&Json>, key: &str| {
        v.and_then(Json::as_f64)
            .ok_or_else(|| x.bad(key, "missing or not a number"))
    };
    let max_pos = num(
        x.find(&["n_positions", "max_position_embeddings"]),
        "max_position_embeddings",
    )?;
    let orig = num(
        rp.get("original_max_position_embeddings"),
        "original_max_position_embeddings",
    )?;
    let n_embd = num(x.find(&["hidden_size", "n_embd"]), "hidden_size")?;
    let n_head = num(
        x.find(&["num_attention_heads", "n_head"]),
        "num_attention_heads",
    )?;
    let pct = match rp.get("partial_rotary_factor") {
        Some(v) => num(Some(v), "partial_rotary_factor")?,
        None => 1.0,
    };
    if n_head < 1.0 {
        return Err(x.bad("num_attention_heads", "not a head count"));
    }
    // Python's int(pct * n_embd) // n_head.
    let rope_dims = (pct * n_embd) as u64 / n_head as u64;
    Ok((max_pos, orig, rope_dims, rp))
}

/// `Phi3MiniModel.generate_extra_tensors`' key, written before the
/// general ones: the LongRoPE attention factor (when there are long
/// factors), from the context sizes whatever `config.json` says.
pub(super) fn phi3_attn_factor(x: &Ctx, md: &mut Metadata) -> Result<(), Error> {
    let (max_pos, orig, _, rp) = phi3_rope(x)?;
    let long = rp.get("long_factor");
    if long.is_none_or(|v| v.is_null() || v.as_array().is_some_and(Vec::is_empty)) {
        return Ok(());
    }
    let scale = max_pos / orig;
    let kind = rp
        .get("rope_type")
        .and_then(Json::as_str)
        .unwrap_or("")
        .to_lowercase();
    let factor = match kind.as_str() {
        "su" | "longrope" if scale > 1.0 => (1.0 + scale.ln() / orig.ln()).sqrt(),
        "yarn" if scale > 1.0 => 0.1 * scale.ln() + 1.0,
        "su" | "longrope" | "yarn" => 1.0,
        "" => return Err(x.bad("rope_parameters.rope_type", "missing")),
        other => {
            return Err(x.bad(
                "rope_parameters.rope_type",
                &format!("'{other}' is not supported for Phi-3"),
            ))
        }
    };
    x.put(md, "rope.scaling.attn_factor", Value::F32(factor as f32));
    Ok(())
}

/// `Phi3MiniModel` (instead of the generic keys).
pub(super) fn phi3(x: &Ctx, md: &mut Metadata) -> Result<(), Error> {
    let (_, _, rope_dims, rp) = phi3_rope(x)?;
    x.put(
        md,
        "context_length",
        x.need_uint(&["n_positions", "max_position_embeddings"])?,
    );
    let orig = rp
        .get("original_max_position_embeddings")
        .ok_or_else(|| x.bad("original_max_position_embeddings", "missing"))?;
    x.put(
        md,
        "rope.scaling.original_context_length",
        x.uint(orig, "original_max_position_embeddings")?,
    );
    required(
        x,
        md,
        &[
            ("embedding_length", &["hidden_size", "n_embd"], false),
            ("feed_forward_length", &["intermediate_size"], false),
            ("block_count", &BLOCKS, false),
            (
                "attention.head_count",
                &["num_attention_heads", "n_head"],
                false,
            ),
            (
                "attention.head_count_kv",
                &["num_key_value_heads", "n_head_kv"],
                false,
            ),
            ("attention.layer_norm_rms_epsilon", &["rms_norm_eps"], true),
        ],
    )?;
    x.put(md, "rope.dimension_count", Value::U32(rope_dims as u32));
    let theta = global_rope(&rp)
        .get("rope_theta")
        .ok_or_else(|| x.bad("rope_theta", "missing"))?;
    x.put(md, "rope.freq_base", x.float(theta, "rope_theta")?);
    x.file_type(md);
    let window = match x.find(&["sliding_window"]) {
        Some(v) => x.uint(v, "sliding_window")?,
        None => Value::U32(0),
    };
    x.put(md, "attention.sliding_window", window);
    Ok(())
}

/// `Olmo2Model`: the generic keys, then the window (when `config.json`
/// has one: OLMo 3).
pub(super) fn olmo2(x: &Ctx, md: &mut Metadata) -> Result<(), Error> {
    generic_keys(x, md)?;
    let Some(w) = x.find(&["sliding_window"]) else {
        return Ok(());
    };
    x.put(md, "attention.sliding_window", x.uint(w, "sliding_window")?);
    let pattern: Vec<bool> = match x.c.get("layer_types").and_then(Json::as_array) {
        Some(types) => types
            .iter()
            .map(|t| t.as_str() == Some("sliding_attention"))
            .collect(),
        None => {
            let n =
                x.c.get("num_hidden_layers")
                    .and_then(Json::as_u64)
                    .ok_or_else(|| x.bad("num_hidden_layers", "missing"))?;
            (0..n).map(|i| (i + 1) % 4 != 0).collect()
        }
    };
    x.put(
        md,
        "attention.sliding_window_pattern",
        Value::Array(Array::Bool(pattern)),
    );
    Ok(())
}

/// `Qwen2MoeModel` (and `Qwen3MoeModel`): the generic keys, then the
/// expert sizes.
pub(super) fn qwen_moe(x: &Ctx, md: &mut Metadata) -> Result<(), Error> {
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

/// `GptOssModel`: the generic keys, then the window and the experts'
/// width (`intermediate_size`).
pub(super) fn gpt_oss(x: &Ctx, md: &mut Metadata) -> Result<(), Error> {
    generic_keys(x, md)?;
    required(
        x,
        md,
        &[
            ("attention.sliding_window", &["sliding_window"], false),
            ("expert_feed_forward_length", &["intermediate_size"], false),
        ],
    )
}
