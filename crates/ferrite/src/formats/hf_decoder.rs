//! Decoder LLMs from Hugging Face directories (`config.json`,
//! `model.safetensors` or shards listed in `model.safetensors.index.json`,
//! `tokenizer.json`, `tokenizer_config.json`), turned into an in-memory
//! GGUF file laid out as llama.cpp's `convert_hf_to_gguf.py` lays it out,
//! which the GGUF loaders (`models::llama`, `qwen2`, `gpt2`) then run
//! unchanged: the storage seam is "anything expressible as GGUF metadata and
//! tensors", as for llama2.c checkpoints (`super::llama2c`).
//!
//! - `config.json` becomes the `{arch}.*` hyper-parameter keys, checked
//!   here first (errors name the config field): `LlamaForCausalLM` ->
//!   `llama`, `Qwen2ForCausalLM` -> `qwen2`, `GPT2LMHeadModel` -> `gpt2`.
//! - Tensors are renamed (`model.layers.N.self_attn.q_proj.weight` ->
//!   `blk.N.attn_q.weight`, ...; `lm_head.weight` is dropped when
//!   `tie_word_embeddings`) and keep their type (F32, F16 and BF16 all have
//!   matmul kernels; other dtypes are refused).
//! - RoPE: HF Llama rotates the two halves of each head (`rotate_half`),
//!   while llama.cpp's `llama` files rotate adjacent pairs; as the
//!   converter does (`LlamaModel.permute`), the rows of `q_proj` and
//!   `k_proj` (weights and biases) are permuted per head from
//!   `[h][j][i]` to `[h][i][j]` (`j` the half, `i < head_dim / 2`), so that
//!   the Llama loader's adjacent-pair RoPE computes HF's. Qwen2 files keep
//!   halves (ggml "neox"): no permutation.
//! - GPT-2's `Conv1D` weights are stored `(in, out)`; they are transposed to
//!   ggml's `(out, in)` rows.
//! - The tokenizer travels as metadata: `tokenizer.json` whole under
//!   `tokenizer.huggingface.json` (run by the `tokenizers` crate, see
//!   `crate::tokenize`), BOS/EOS/PAD ids from `tokenizer_config.json`'s
//!   token texts (else `config.json`'s ids), its explicit
//!   `add_bos_token` / `add_eos_token`, and the chat template
//!   (`chat_template.jinja`, else `tokenizer_config.json`'s
//!   `chat_template`) under `tokenizer.chat_template`.
//!
//! Memory: the GGUF file is built in memory, so loading costs the model's
//! size once in RAM (the safetensors files are only mapped while it is
//! built; unchanged tensors are copied straight from the map).
//!
//! Reference: llama.cpp `convert_hf_to_gguf.py` (`LlamaModel`,
//! `Qwen2Model`, `GPT2Model`), `gguf-py/gguf/vocab.py` (`SpecialVocab`);
//! HF `modeling_llama.py`, `modeling_qwen2.py`, `modeling_gpt2.py`.

use std::borrow::Cow;
use std::path::Path;

use ferrite_kernels::GgmlType;
use serde_json::Value as Json;

use crate::formats::gguf::{write_gguf, Array, GgufFile, Metadata, TensorToWrite, Value};
use crate::formats::names;
use crate::formats::safetensors::{SafetensorsDir, StTensorInfo};
use crate::layers::rope::Scaling;
use crate::models::hparams::MAX_LAYERS;
use crate::models::registry;
use crate::tokenize::KEY_HF_JSON;
use crate::Error;

mod moe;
pub(crate) use moe::{expert_of, map_module};

/// Largest size hyper-parameter accepted (as `models::hparams`).
const MAX_SIZE: u64 = 1 << 24;
/// Largest `tokenizer.json` read.
const MAX_TOKENIZER_BYTES: u64 = 256 << 20;
/// Largest chat template read.
const MAX_TEMPLATE_BYTES: u64 = 1 << 20;

/// How a family of HF checkpoints maps onto a GGUF architecture: the
/// mapping of an HF class in a family's registry entry
/// (`models::registry::DecoderFamily::hf`). The first variants are the
/// mapping written here (GPT-2); every other family describes its own as
/// an [`HfFamily`] in its file.
#[derive(Clone, Copy)]
pub(crate) enum Family {
    Gpt2,
    /// A family described as data, in its file in `models/`
    /// (`models/gemma2.rs`, `models/phi3.rs`, ...).
    Table(&'static HfFamily),
}

/// An HF decoder family whose tensors are renamed one to one (and
/// possibly permuted or shifted): its file in `models/` says how.
pub(crate) struct HfFamily {
    /// `general.architecture` of the GGUF file.
    pub arch: &'static str,
    /// Writes the `{arch}.*` keys from `config.json`.
    pub config: fn(&Config, &mut Keys) -> Result<Hp, Error>,
    /// Per-layer modules: HF module (`self_attn.q_proj`), GGUF name.
    pub layer: &'static [(&'static str, LayerName)],
    /// Norm weights get 1 added (Gemma's `(1 + w)` RMSNorm, as the
    /// converter stores them).
    pub norm_plus_one: bool,
    /// Q/K rows permuted for adjacent-pair RoPE (Llama-style files).
    pub permute_qk: bool,
    /// Its experts may be MXFP4 blocks (`quantization_config`
    /// `quant_method` `mxfp4`: gpt-oss as OpenAI publishes it); any other
    /// `quantization_config` is refused.
    pub mxfp4: bool,
    /// Per-layer modules the family maps itself before the [`layer`]
    /// table (`None`: the table only): the GGUF architecture, the layer,
    /// the module, whether a bias, the tensor's file and name. Qwen's
    /// experts: `moe::map_module`.
    ///
    /// [`layer`]: HfFamily::layer
    pub modules: Option<ModuleMap>,
    /// Tensors that are not renamed one to one (split, transposed, or
    /// without a `.weight` suffix), made by the family itself: `None`
    /// leaves a tensor to the table.
    pub special: Option<SpecialTensors>,
}

/// A family's own mapping of one layer module (see [`HfFamily::modules`]).
pub(crate) type ModuleMap =
    fn(&str, usize, &str, bool, &str, &str) -> Result<Option<(String, Reshape)>, Error>;

/// A family's own conversion of one HF tensor into GGUF tensors (`None`:
/// not one of its special tensors).
pub(crate) type SpecialTensors =
    for<'a> fn(&'a SafetensorsDir, &StTensorInfo, &Hp, &str) -> Result<Option<Vec<Out<'a>>>, Error>;

impl Family {
    /// `general.architecture` of the GGUF file.
    pub(crate) fn gguf_name(self) -> &'static str {
        match self {
            Family::Gpt2 => "gpt2",
            Family::Table(t) => t.arch,
        }
    }

    /// The family's own conversion of the tensors it does not rename one
    /// to one (gpt-oss's fused experts and sinks), if it has one.
    pub(crate) fn special(self) -> Option<SpecialTensors> {
        match self {
            Family::Table(t) => t.special,
            _ => None,
        }
    }
}

/// Names of the HF decoder classes [`open`] reads.
pub fn supported_classes() -> Vec<&'static str> {
    registry::hf_classes()
}

/// The first of `config.json`'s `architectures` ferrite reads: its class
/// name and how it maps onto its GGUF architecture.
fn hf_class(archs: &[&str]) -> Option<(&'static str, Family)> {
    archs
        .iter()
        .find_map(|a| registry::by_hf_class(a))
        .map(|(class, _, mapping)| (class, mapping))
}

fn architectures(config: &Json) -> Vec<&str> {
    config
        .get("architectures")
        .and_then(Json::as_array)
        .map(|a| a.iter().filter_map(Json::as_str).collect())
        .unwrap_or_default()
}

mod config;
mod tensors;
pub use config::*;
pub use tensors::*;

/// A token's id in a parsed `tokenizer.json`: an added token's, else the
/// model vocabulary's (an object of ids, or a Unigram list of pieces).
fn token_id(tokenizer: &Json, text: &str) -> Option<u32> {
    let added = tokenizer.get("added_tokens").and_then(Json::as_array);
    if let Some(t) = added
        .into_iter()
        .flatten()
        .find(|t| t.get("content").and_then(Json::as_str) == Some(text))
    {
        return t
            .get("id")
            .and_then(Json::as_u64)
            .and_then(|i| u32::try_from(i).ok());
    }
    match tokenizer.get("model").and_then(|m| m.get("vocab"))? {
        Json::Object(vocab) => vocab
            .get(text)
            .and_then(Json::as_u64)
            .and_then(|i| u32::try_from(i).ok()),
        Json::Array(pieces) => pieces
            .iter()
            .position(|p| p.get(0).and_then(Json::as_str) == Some(text))
            .and_then(|i| u32::try_from(i).ok()),
        _ => None,
    }
}

/// A token text in `tokenizer_config.json`: a string or `{"content": ...}`.
fn token_text(v: &Json) -> Option<&str> {
    v.as_str()
        .or_else(|| v.get("content").and_then(Json::as_str))
}

/// A file of at most `max` bytes, or None if it does not exist.
fn read_small(path: &Path, max: u64) -> Result<Option<String>, Error> {
    let shown = || path.display().to_string();
    let Ok(meta) = std::fs::metadata(path) else {
        return Ok(None);
    };
    if meta.len() > max {
        return Err(Error::model(
            shown(),
            format!("{} bytes is more than the {max} accepted", meta.len()),
        ));
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::model(shown(), format!("cannot read: {e}")))?;
    Ok(Some(text))
}

/// The tokenizer files of `dir` as GGUF metadata.
pub(crate) fn tokenizer_metadata(
    dir: &Path,
    config: &Json,
    md: &mut Metadata,
) -> Result<(), Error> {
    let path = dir.join("tokenizer.json");
    let json = read_small(&path, MAX_TOKENIZER_BYTES)?.ok_or_else(|| {
        Error::model(
            dir.display().to_string(),
            "no tokenizer.json (a decoder directory needs its Hugging Face tokenizer)",
        )
    })?;
    let parsed: Json = serde_json::from_str(&json)
        .map_err(|e| Error::model(path.display().to_string(), format!("invalid JSON: {e}")))?;
    let cfg_path = dir.join("tokenizer_config.json");
    let tok_config = match read_small(&cfg_path, MAX_TOKENIZER_BYTES)? {
        Some(text) => serde_json::from_str(&text).map_err(|e| {
            Error::model(cfg_path.display().to_string(), format!("invalid JSON: {e}"))
        })?,
        None => Json::Null,
    };
    let mut set = |k: &str, v: Value| {
        md.insert(k.to_string(), v);
    };
    // As gguf-py's SpecialVocab: the token texts of tokenizer_config.json,
    // else the ids of config.json.
    for (role, key) in [
        ("bos", "tokenizer.ggml.bos_token_id"),
        ("eos", "tokenizer.ggml.eos_token_id"),
        ("pad", "tokenizer.ggml.padding_token_id"),
    ] {
        let by_text = tok_config
            .get(format!("{role}_token"))
            .and_then(token_text)
            .and_then(|t| token_id(&parsed, t));
        let by_id = || {
            let v = config.get(format!("{role}_token_id"))?;
            let first = v.as_array().and_then(|a| a.first()).unwrap_or(v);
            first.as_u64().and_then(|i| u32::try_from(i).ok())
        };
        if let Some(id) = by_text.or_else(by_id) {
            set(key, Value::U32(id));
        }
    }
    for (flag, key) in [
        ("add_bos_token", "tokenizer.ggml.add_bos_token"),
        ("add_eos_token", "tokenizer.ggml.add_eos_token"),
    ] {
        if let Some(b) = tok_config.get(flag).and_then(Json::as_bool) {
            set(key, Value::Bool(b));
        }
    }
    let template = match read_small(&dir.join("chat_template.jinja"), MAX_TEMPLATE_BYTES)? {
        Some(t) => Some(t),
        None => match tok_config.get("chat_template") {
            Some(Json::String(t)) => Some(t.clone()),
            // A list of named templates: the default one.
            Some(Json::Array(list)) => list
                .iter()
                .find(|t| t.get("name").and_then(Json::as_str) == Some("default"))
                .or_else(|| list.first())
                .and_then(|t| t.get("template"))
                .and_then(Json::as_str)
                .map(str::to_string),
            _ => None,
        },
    };
    if let Some(t) = template {
        set(crate::generate::chat::TEMPLATE_KEY, Value::String(t));
    }
    set(KEY_HF_JSON, Value::String(json));
    Ok(())
}

/// The checked family and hyper-parameters of a decoder directory's
/// `config.json` (`None`: not one of the decoder classes), for
/// `crate::convert`: the same checks [`open`] makes.
pub(crate) fn decoder_plan(
    config: &Json,
    source: &str,
) -> Result<Option<(&'static str, Family, Hp)>, Error> {
    let c = Config {
        json: config,
        source: source.to_string(),
    };
    let archs = architectures(config);
    let Some((class, family)) = hf_class(&archs) else {
        return Ok(None);
    };
    quantization(&c, family)?;
    let hp = family_config(&c, family, &mut Metadata::default())?;
    Ok(Some((class, family, hp)))
}

/// Refuses a `quantization_config` ferrite does not read: the one read is
/// `mxfp4`, for a family that says so (`HfFamily::mxfp4`: gpt-oss).
fn quantization(c: &Config, family: Family) -> Result<(), Error> {
    let Some(q) = c.get("quantization_config") else {
        return Ok(());
    };
    let key = "quantization_config.quant_method";
    let mxfp4 = matches!(family, Family::Table(t) if t.mxfp4);
    match q.get("quant_method").and_then(Json::as_str) {
        Some("mxfp4") if mxfp4 => Ok(()),
        Some(m) => Err(c.bad(
            key,
            format!(
                "'{m}' checkpoints are not supported ({})",
                if mxfp4 {
                    format!("{}: mxfp4, or F32, F16 or BF16 weights", family.gguf_name())
                } else {
                    "use F32, F16 or BF16 weights".to_string()
                }
            ),
        )),
        None => Err(c.bad(key, "missing or not a string")),
    }
}

/// A family's `{arch}.*` keys from `config.json` into `md`, and its
/// checked hyper-parameters.
fn family_config(c: &Config, family: Family, md: &mut Metadata) -> Result<Hp, Error> {
    match family {
        Family::Gpt2 => gpt2_config(c, md),
        Family::Table(t) => (t.config)(c, &mut Keys { md, arch: t.arch }),
    }
}

/// Reads the HF decoder directory `dir` into an in-memory GGUF file of its
/// GGUF architecture (see the module notes).
pub fn open(dir: &Path) -> Result<GgufFile, Error> {
    let st = SafetensorsDir::open(dir)?;
    let source = dir.join("config.json").display().to_string();
    let c = Config {
        json: &st.config,
        source: source.clone(),
    };
    let archs = architectures(&st.config);
    let Some((class, family)) = hf_class(&archs) else {
        return Err(c.bad(
            "architectures",
            format!(
                "{archs:?} is not a supported decoder ({})",
                supported_classes().join(", ")
            ),
        ));
    };
    quantization(&c, family)?;

    let mut md = Metadata::default();
    md.insert(
        "general.architecture".into(),
        Value::String(family.gguf_name().into()),
    );
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| class.to_string());
    md.insert("general.name".into(), Value::String(name));
    let hp = family_config(&c, family, &mut md)?;
    tokenizer_metadata(dir, &st.config, &mut md)?;

    let mut tensors = Vec::with_capacity(st.tensors.len());
    for t in &st.tensors {
        let source = st.shard_path(t).display().to_string();
        if let Some(special) = family.special() {
            if let Some(outs) = special(&st, t, &hp, &source)? {
                tensors.extend(outs);
                continue;
            }
        }
        if let Some((name, reshape)) = map_name(family, &hp, &t.name, &source)? {
            tensors.push(convert(&st, t, name, reshape, &hp, &source)?);
        }
    }
    moe::stack_experts(&mut tensors, &md, family, &source)?;
    for (name, values) in &hp.extra {
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        tensors.push(Out {
            name: name.to_string(),
            dims: vec![values.len() as u64],
            ty: GgmlType::F32,
            data: Cow::Owned(bytes),
        });
    }
    if !hp.tied && !tensors.iter().any(|t| t.name == names::OUTPUT) {
        return Err(c.bad(
            "tie_word_embeddings",
            "false, but there is no lm_head.weight",
        ));
    }
    if let (Some(v), Some(embd)) = (
        hp.vocab_size,
        tensors.iter().find(|t| t.name == names::TOKEN_EMBD),
    ) {
        let rows = embd.dims.get(1).copied().unwrap_or(0);
        if rows != v as u64 {
            return Err(c.bad(
                "vocab_size",
                format!("{v} differs from the token embedding's {rows} rows"),
            ));
        }
    }
    let to_write: Vec<TensorToWrite> = tensors
        .iter()
        .map(|t| TensorToWrite {
            name: &t.name,
            dims: &t.dims,
            ty: t.ty,
            data: &t.data,
        })
        .collect();
    // One allocation of about the final size: no doubling while writing.
    let data: usize = tensors.iter().map(|t| t.data.len() + 64).sum();
    let meta: usize = md
        .get(KEY_HF_JSON)
        .and_then(Value::as_str)
        .map_or(0, str::len);
    let mut out = Vec::with_capacity(data + meta + (1 << 16));
    write_gguf(&mut out, 3, &md, &to_write).map_err(|e| Error::model(&source, e.to_string()))?;
    drop(to_write);
    drop(tensors);
    drop(st);
    Ok(GgufFile::from_vec(dir, out)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rope_pairs_interleaves_each_heads_halves() {
        // Two heads of 4 rows, one byte per row: [a0 a1 b0 b1] -> [a0 b0 a1 b1].
        let data = [0u8, 1, 2, 3, 10, 11, 12, 13];
        assert_eq!(rope_pairs(&data, 8, 1, 2), vec![0, 2, 1, 3, 10, 12, 11, 13]);
    }

    #[test]
    fn transpose_swaps_rows_and_columns() {
        // 2 x 3 of 2-byte values.
        let data = [1u8, 0, 2, 0, 3, 0, 4, 0, 5, 0, 6, 0];
        assert_eq!(
            transpose(&data, 2, 3, 2),
            vec![1, 0, 4, 0, 2, 0, 5, 0, 3, 0, 6, 0]
        );
    }
}
