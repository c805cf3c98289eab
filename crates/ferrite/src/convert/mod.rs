//! `ferrite convert`: a Hugging Face directory to the GGUF file llama.cpp's
//! `convert_hf_to_gguf.py` writes for it, byte for byte (see
//! `tests/convert.rs` for what is checked against it).
//!
//! - Tensors in the converter's order (shards by name, each shard's
//!   tensors by name, made-up tensors such as Llama 3's `rope_freqs`
//!   first), renamed and reshaped by `formats::hf_decoder` (one table of
//!   HF classes there; the converter's extra keys per GGUF architecture are
//!   `FAMILIES` here), typed as the converter types them: vectors, norms
//!   and biases F32, the matrices the out type (Q8_0 falling back to F16
//!   for rows that are not whole blocks); values pass through f32 as in the
//!   converter (BF16 sources widened first).
//! - Metadata in the converter's order: `general.*` (see `meta`), the
//!   hyper-parameters (the converter's generic `set_gguf_parameters`, then
//!   the family's own keys), `general.quantization_version`, the tokenizer
//!   (`vocab`).
//! - Streaming: the header is computed from the safetensors headers; then
//!   each tensor is converted from the mapped input and written, holding at
//!   most one reshaped copy of one tensor (Llama's Q/K permutation, GPT-2's
//!   transposes) and a row buffer. The output is written to a temporary
//!   file beside it and renamed at the end; on any error nothing is left.
//! - Other out types (`Q4_K_M`, ...): the f32 conversion into a temporary
//!   file, then `crate::quantize` as `llama-quantize` would quantize it.

mod meta;
mod vocab;

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use ferrite_kernels::quant::{dequantize, quantize};
use ferrite_kernels::GgmlType;
use serde_json::Value as Json;

use crate::formats::gguf::{write_gguf_header, Metadata, TensorHeader, Value};
use crate::formats::hf_decoder::{self, Reshape};
use crate::formats::safetensors::{SafetensorsDir, StTensorInfo};
use crate::quantize::{
    canonical_target, quantize_file, FileType, QuantizeOptions, QUANTIZATION_VERSION,
};
use crate::Error;

use vocab::VocabKind;

/// The types the converter itself writes (`--outtype`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutType {
    F32,
    F16,
    Bf16,
    Q8_0,
}

impl OutType {
    /// The converter's spelling (lower case): `f32`, `f16`, `bf16`, `q8_0`.
    pub fn from_name(s: &str) -> Option<OutType> {
        Some(match s {
            "f32" => OutType::F32,
            "f16" => OutType::F16,
            "bf16" => OutType::Bf16,
            "q8_0" => OutType::Q8_0,
            _ => return None,
        })
    }

    fn ggml(self) -> GgmlType {
        match self {
            OutType::F32 => GgmlType::F32,
            OutType::F16 => GgmlType::F16,
            OutType::Bf16 => GgmlType::Bf16,
            OutType::Q8_0 => GgmlType::Q8_0,
        }
    }

    /// `general.file_type` (`LlamaFileType`).
    fn file_type(self) -> u32 {
        match self {
            OutType::F32 => 0,
            OutType::F16 => 1,
            OutType::Q8_0 => 7,
            OutType::Bf16 => 32,
        }
    }
}

/// What to write.
#[derive(Clone, Copy, Debug)]
pub enum Target {
    /// A type the converter writes.
    Converter(OutType),
    /// A llama-quantize file type, from the f32 conversion.
    Quantized(FileType),
}

impl Target {
    /// `f32|f16|bf16|q8_0` (lower case, as `convert_hf_to_gguf.py --outtype`
    /// spells them: the converter's own file), or a `ferrite quantize` /
    /// `llama-quantize` type name such as `Q4_K_M` or `Q8_0` (upper case:
    /// the f32 conversion quantized, whose metadata order and tensor order
    /// are llama-quantize's).
    pub fn from_name(s: &str) -> Option<Target> {
        OutType::from_name(s)
            .map(Target::Converter)
            .or_else(|| FileType::from_name(s).map(Target::Quantized))
    }
}

#[derive(Clone, Debug)]
pub struct ConvertOptions {
    pub target: Target,
    /// The pre-tokenizer name to write when the tokenizer's check-text hash
    /// is not one the converter knows (the converter refuses such a file).
    pub pre_tokenizer: Option<String>,
    /// Replace an existing output file.
    pub force: bool,
    /// Threads for a quantized target.
    pub threads: usize,
}

/// What was written.
#[derive(Clone, Debug, Default)]
pub struct ConvertSummary {
    pub architecture: String,
    pub tensors: usize,
    pub parameters: u64,
    pub bytes_out: u64,
}

/// A family's keys after the generic hyper-parameters, in the
/// converter's order.
type ExtraKeys = fn(&Path, &Json, &str, &mut Metadata) -> Result<(), Error>;

/// One GGUF architecture the converter writes: its keys beyond the
/// generic ones, whether the generic ones are written, the vocabulary kind.
struct Spec {
    arch: &'static str,
    generic: bool,
    extra: ExtraKeys,
    vocab: VocabKind,
    /// `add_prefix_space` of `tokenizer_config.json` as
    /// `tokenizer.ggml.add_space_prefix` (Llama's `set_vocab`).
    space_prefix: bool,
}

/// The architectures `ferrite convert` writes (decoders: the HF classes
/// of `formats::hf_decoder`): adding one is one entry here.
const FAMILIES: [Spec; 5] = [
    Spec {
        arch: "bert",
        generic: true,
        extra: bert_keys,
        vocab: VocabKind::Bert,
        space_prefix: false,
    },
    Spec {
        arch: "llama",
        generic: true,
        extra: llama_keys,
        vocab: VocabKind::Gpt2,
        space_prefix: true,
    },
    Spec {
        arch: "qwen2",
        generic: true,
        extra: no_keys,
        vocab: VocabKind::Gpt2,
        space_prefix: false,
    },
    Spec {
        arch: "qwen3",
        generic: true,
        extra: no_keys,
        vocab: VocabKind::Gpt2,
        space_prefix: false,
    },
    Spec {
        arch: "gpt2",
        generic: false,
        extra: gpt2_keys,
        vocab: VocabKind::Gpt2,
        space_prefix: false,
    },
];

fn no_keys(_: &Path, _: &Json, _: &str, _: &mut Metadata) -> Result<(), Error> {
    Ok(())
}

fn bad(source: &str, key: &str, problem: &str) -> Error {
    Error::model(source, format!("'{key}': {problem}"))
}

fn u32_of(c: &Json, key: &str, source: &str) -> Result<u32, Error> {
    c.get(key)
        .and_then(Json::as_u64)
        .and_then(|v| u32::try_from(v).ok())
        .ok_or_else(|| bad(source, key, "missing or not a size"))
}

/// `LlamaModel.set_gguf_parameters`'s own keys.
fn llama_keys(_: &Path, c: &Json, arch: &str, md: &mut Metadata) -> Result<(), Error> {
    let source = "config.json";
    md.insert(
        format!("{arch}.vocab_size"),
        Value::U32(u32_of(c, "vocab_size", source)?),
    );
    let dim = match c.get("head_dim").and_then(Json::as_u64) {
        Some(d) => d as u32,
        None => {
            u32_of(c, "hidden_size", source)? / u32_of(c, "num_attention_heads", source)?.max(1)
        }
    };
    md.insert(format!("{arch}.rope.dimension_count"), Value::U32(dim));
    Ok(())
}

/// `GPT2Model.set_gguf_parameters` (instead of the generic keys).
fn gpt2_keys(_: &Path, c: &Json, arch: &str, md: &mut Metadata) -> Result<(), Error> {
    let source = "config.json";
    let mut put = |k: &str, v: Value| {
        md.insert(format!("{arch}.{k}"), v);
    };
    put("block_count", Value::U32(u32_of(c, "n_layer", source)?));
    put("context_length", Value::U32(u32_of(c, "n_ctx", source)?));
    let n_embd = u32_of(c, "n_embd", source)?;
    put("embedding_length", Value::U32(n_embd));
    put("feed_forward_length", Value::U32(4 * n_embd));
    put(
        "attention.head_count",
        Value::U32(u32_of(c, "n_head", source)?),
    );
    let eps = c
        .get("layer_norm_epsilon")
        .and_then(Json::as_f64)
        .ok_or_else(|| bad(source, "layer_norm_epsilon", "missing"))?;
    put("attention.layer_norm_epsilon", Value::F32(eps as f32));
    Ok(())
}

/// The first of `keys` in `c` (gguf-py `find_hparam`).
fn find<'a>(c: &'a Json, keys: &[&str]) -> Option<&'a Json> {
    keys.iter().find_map(|k| c.get(*k)).filter(|v| !v.is_null())
}

/// `TextModel.set_gguf_parameters`: the generic hyper-parameters.
fn generic_keys(c: &Json, arch: &str, md: &mut Metadata) -> Result<(), Error> {
    let mut put = |k: &str, v: Value| {
        md.insert(format!("{arch}.{k}"), v);
    };
    let uint = |v: &Json, key: &str| -> Result<Value, Error> {
        v.as_u64()
            .and_then(|x| u32::try_from(x).ok())
            .map(Value::U32)
            .ok_or_else(|| bad("config.json", key, "not a size"))
    };
    let float = |v: &Json, key: &str| -> Result<Value, Error> {
        v.as_f64()
            .map(|x| Value::F32(x as f32))
            .ok_or_else(|| bad("config.json", key, "not a number"))
    };
    let block = find(
        c,
        &["n_layers", "num_hidden_layers", "n_layer", "num_layers"],
    )
    .ok_or_else(|| bad("config.json", "num_hidden_layers", "missing"))?;
    put("block_count", uint(block, "num_hidden_layers")?);
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
        if let Some(v) = find(c, keys) {
            put(key, uint(v, keys[0])?);
        }
    }
    if c.get("is_causal") == Some(&Json::Bool(false)) {
        put("attention.causal", Value::Bool(false));
    }
    // RoPE: rope_parameters (transformers 5) or rope_scaling, with the
    // theta mirrored in.
    let params = c
        .get("rope_parameters")
        .or_else(|| c.get("rope_scaling"))
        .filter(|v| v.is_object());
    if params.is_some_and(|p| p.get("full_attention").is_some()) {
        return Err(bad(
            "config.json",
            "rope_parameters",
            "per-attention-type RoPE parameters are not converted yet",
        ));
    }
    let p = |k: &str| params.and_then(|p| p.get(k)).filter(|v| !v.is_null());
    let rope_type = p("rope_type").or_else(|| p("type")).and_then(Json::as_str);
    if let Some(t) = rope_type {
        let factor = p("factor");
        match (t, factor) {
            ("linear", Some(f)) => {
                put("rope.scaling.type", Value::String("linear".into()));
                put("rope.scaling.factor", float(f, "factor")?);
            }
            ("yarn", Some(f)) => {
                put("rope.scaling.type", Value::String("yarn".into()));
                put("rope.scaling.factor", float(f, "factor")?);
                let orig = p("original_max_position_embeddings")
                    .or_else(|| c.get("original_max_position_embeddings"))
                    .ok_or_else(|| {
                        bad("config.json", "original_max_position_embeddings", "missing")
                    })?;
                put(
                    "rope.scaling.original_context_length",
                    uint(orig, "original_max_position_embeddings")?,
                );
                if let Some(v) = p("extrapolation_factor") {
                    put(
                        "rope.scaling.yarn_ext_factor",
                        float(v, "extrapolation_factor")?,
                    );
                }
                if let Some(v) = p("attention_factor").or_else(|| p("attn_factor")) {
                    put(
                        "rope.scaling.yarn_attn_factor",
                        float(v, "attention_factor")?,
                    );
                }
                if let Some(v) = p("beta_fast") {
                    put("rope.scaling.yarn_beta_fast", float(v, "beta_fast")?);
                }
                if let Some(v) = p("beta_slow") {
                    put("rope.scaling.yarn_beta_slow", float(v, "beta_slow")?);
                }
            }
            ("su" | "longrope", _) => {
                put("rope.scaling.type", Value::String("longrope".into()));
            }
            _ => {}
        }
    }
    let theta = p("rope_theta").or_else(|| {
        find(
            c,
            &[
                "global_rope_theta",
                "rope_global_theta",
                "rope_theta_global",
                "rope_theta",
                "rotary_emb_base",
            ],
        )
    });
    if let Some(t) = theta {
        put("rope.freq_base", float(t, "rope_theta")?);
    }
    if let Some(v) = find(c, &["rms_norm_eps", "norm_eps"]) {
        put(
            "attention.layer_norm_rms_epsilon",
            float(v, "rms_norm_eps")?,
        );
    }
    if let Some(v) = find(c, &["layer_norm_eps", "layer_norm_epsilon", "norm_epsilon"]) {
        put("attention.layer_norm_epsilon", float(v, "layer_norm_eps")?);
    }
    if find(c, &["num_local_experts", "num_experts", "n_routed_experts"]).is_some() {
        return Err(bad(
            "config.json",
            "num_experts",
            "mixture-of-experts models are not converted yet",
        ));
    }
    if let Some(h) = c.get("head_dim").filter(|v| !v.is_null()) {
        put("attention.key_length", uint(h, "head_dim")?);
        put("attention.value_length", uint(h, "head_dim")?);
    }
    Ok(())
}

/// The encoder classes converted (`BertModel` in the converter), and
/// each's GGUF architecture.
const ENCODERS: [(&str, &str); 3] = [
    ("BertModel", "bert"),
    ("BertForMaskedLM", "bert"),
    ("CamembertModel", "bert"),
];

/// BERT tensor names: HF module suffix, GGUF name (`{}`: the layer).
const BERT_LAYER: [(&str, &str); 10] = [
    ("attention.self.query", "attn_q"),
    ("attention.self.key", "attn_k"),
    ("attention.self.value", "attn_v"),
    ("attention.output.dense", "attn_output"),
    ("attention.output.LayerNorm", "attn_output_norm"),
    ("intermediate.dense", "ffn_up"),
    ("output.dense", "ffn_down"),
    ("output.LayerNorm", "layer_output_norm"),
    // Older checkpoints' LayerNorm parameter names (gamma/beta are renamed
    // before matching).
    ("attention.output.layer_norm", "attn_output_norm"),
    ("output.layer_norm", "layer_output_norm"),
];

/// A BERT tensor's GGUF name (`None`: left out, as the converter leaves
/// out the pooler, the masked-LM head and `position_ids`).
fn bert_name(name: &str, n_layers: usize, source: &str) -> Result<Option<String>, Error> {
    let mut n = name.strip_prefix("bert.").unwrap_or(name).to_string();
    if let Some(b) = n.strip_suffix(".gamma") {
        n = format!("{b}.weight");
    } else if let Some(b) = n.strip_suffix(".beta") {
        n = format!("{b}.bias");
    }
    if matches!(
        n.as_str(),
        "embeddings.position_ids" | "pooler.dense.weight" | "pooler.dense.bias"
    ) || n.starts_with("cls.predictions")
        || n.starts_with("cls.seq_relationship")
    {
        return Ok(None);
    }
    let unknown = || {
        Error::model(
            source,
            format!("tensor '{name}' is not part of a BERT model"),
        )
    };
    let (module, suffix) = match n.rsplit_once('.') {
        Some((m, s @ ("weight" | "bias"))) => (m, s),
        _ => return Err(unknown()),
    };
    let fixed = match module {
        "embeddings.word_embeddings" => Some("token_embd"),
        "embeddings.position_embeddings" => Some("position_embd"),
        "embeddings.token_type_embeddings" => Some("token_types"),
        "embeddings.LayerNorm" => Some("token_embd_norm"),
        _ => None,
    };
    if let Some(f) = fixed {
        return Ok(Some(format!("{f}.{suffix}")));
    }
    let rest = module.strip_prefix("encoder.layer.").ok_or_else(unknown)?;
    let (l, m) = rest.split_once('.').ok_or_else(unknown)?;
    let l: usize = l.parse().map_err(|_| unknown())?;
    if l >= n_layers {
        return Err(Error::model(
            source,
            format!("tensor '{name}': layer {l} is not one of the {n_layers} in config.json"),
        ));
    }
    let (_, g) = BERT_LAYER
        .iter()
        .find(|(h, _)| *h == m)
        .ok_or_else(unknown)?;
    Ok(Some(format!("blk.{l}.{g}.{suffix}")))
}

/// `BertModel.set_gguf_parameters`'s own keys: not causal, the pooling of
/// the sentence-transformers `modules.json`.
fn bert_keys(dir: &Path, _: &Json, arch: &str, md: &mut Metadata) -> Result<(), Error> {
    md.insert(format!("{arch}.attention.causal"), Value::Bool(false));
    let modules = dir.join("modules.json");
    let Ok(text) = std::fs::read_to_string(&modules) else {
        return Ok(());
    };
    let shown = |p: &Path| p.display().to_string();
    let j: Json = serde_json::from_str(&text)
        .map_err(|e| Error::model(shown(&modules), format!("invalid JSON: {e}")))?;
    let Some(path) = j.as_array().into_iter().flatten().find_map(|m| {
        let ty = m.get("type").and_then(Json::as_str)?;
        ty.ends_with("Pooling")
            .then(|| m.get("path").and_then(Json::as_str).map(str::to_string))
            .flatten()
    }) else {
        return Ok(());
    };
    let cfg = dir.join(&path).join("config.json");
    let text = std::fs::read_to_string(&cfg).map_err(|e| Error::io(shown(&cfg), e))?;
    let p: Json = serde_json::from_str(&text)
        .map_err(|e| Error::model(shown(&cfg), format!("invalid JSON: {e}")))?;
    let on = |k: &str| p.get(k).and_then(Json::as_bool) == Some(true);
    let ty = if on("pooling_mode_mean_tokens") {
        1
    } else if on("pooling_mode_cls_token") {
        2
    } else if on("pooling_mode_lasttoken") {
        3
    } else {
        match p.get("pooling_mode").and_then(Json::as_str) {
            Some("mean") => 1,
            Some("cls") => 2,
            Some("lasttoken") => 3,
            _ => {
                return Err(Error::model(
                    shown(&cfg),
                    "only mean, CLS and last-token pooling are converted",
                ))
            }
        }
    };
    md.insert(format!("{arch}.pooling_type"), Value::U32(ty));
    Ok(())
}

/// One tensor of the output: where it comes from and what it becomes.
struct Planned<'a> {
    name: String,
    /// ggml order.
    dims: Vec<u64>,
    to: GgmlType,
    from: Source<'a>,
}

enum Source<'a> {
    St(&'a StTensorInfo, Reshape),
    Values(Vec<f32>),
}

/// The converter's type for a tensor (`prepare_tensors`).
fn tensor_type(name: &str, dims: &[u64], out: OutType) -> GgmlType {
    if dims.len() <= 1
        || name.ends_with("_norm.weight")
        || !name.ends_with(".weight")
        || name == "position_embd.weight"
        || name == "token_types.weight"
    {
        return GgmlType::F32;
    }
    let t = out.ggml();
    if t == GgmlType::Q8_0 && !dims[0].is_multiple_of(32) {
        return GgmlType::F16;
    }
    t
}

/// Whether `out` is the directory `dir` or lies inside it.
fn same_or_inside(dir: &Path, out: &Path) -> bool {
    match (canonical_target(dir), canonical_target(out)) {
        (Some(d), Some(o)) => o == d || o.starts_with(&d),
        _ => false,
    }
}

/// A temporary file beside `target`, removed unless renamed into place.
struct Temp {
    path: PathBuf,
    keep: bool,
}

impl Temp {
    fn beside(target: &Path, tag: &str) -> Result<Temp, Error> {
        let name = target
            .file_name()
            .ok_or_else(|| Error::Input(format!("{}: not a file name", target.display())))?;
        let tmp = format!(
            ".{}.{tag}.{}.tmp",
            name.to_string_lossy(),
            std::process::id()
        );
        let dir = target.parent().filter(|p| !p.as_os_str().is_empty());
        let path = dir.map_or_else(|| PathBuf::from(&tmp), |d| d.join(&tmp));
        Ok(Temp { path, keep: false })
    }

    fn commit(mut self, target: &Path) -> Result<(), Error> {
        std::fs::rename(&self.path, target)
            .map_err(|e| Error::io(target.display().to_string(), e))?;
        self.keep = true;
        Ok(())
    }
}

impl Drop for Temp {
    fn drop(&mut self) {
        if !self.keep {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Converts the HF directory `dir` into the GGUF file `out`.
pub fn convert_dir(dir: &Path, out: &Path, opts: &ConvertOptions) -> Result<ConvertSummary, Error> {
    if same_or_inside(dir, out) {
        return Err(Error::Input(format!(
            "the output {} is inside the input directory {}; write it elsewhere",
            out.display(),
            dir.display()
        )));
    }
    if out.exists() && !opts.force {
        return Err(Error::Input(format!(
            "{} exists; pass --force to replace it",
            out.display()
        )));
    }
    match opts.target {
        Target::Converter(t) => {
            let tmp = Temp::beside(out, "convert")?;
            let summary = write_converted(dir, &tmp.path, out, t, opts)?;
            tmp.commit(out)?;
            Ok(summary)
        }
        Target::Quantized(ftype) => {
            let f32_tmp = Temp::beside(out, "f32")?;
            let mut summary = write_converted(dir, &f32_tmp.path, out, OutType::F32, opts)?;
            let q = QuantizeOptions {
                ftype,
                pure: false,
                allow_requantize: false,
                threads: opts.threads.max(1),
            };
            let s = quantize_file(&f32_tmp.path, out, &q, &mut |_, _, _| {})?;
            summary.bytes_out = s.bytes_out;
            Ok(summary)
        }
    }
}

/// Writes the converted file at `out` (a temporary file; errors name
/// `shown`, the final output).
fn write_converted(
    dir: &Path,
    out: &Path,
    shown: &Path,
    t: OutType,
    opts: &ConvertOptions,
) -> Result<ConvertSummary, Error> {
    let shown = shown.display().to_string();
    let file = std::fs::File::create(out).map_err(|e| Error::io(&shown, e))?;
    let mut w = BufWriter::with_capacity(1 << 22, file);
    let mut summary = convert_to(dir, t, opts, false, &mut w, &shown)?;
    let io = |e: std::io::Error| Error::io(&shown, e);
    let file = w.into_inner().map_err(|e| io(e.into_error()))?;
    file.sync_all().map_err(io)?;
    summary.bytes_out = file.metadata().map(|m| m.len()).unwrap_or(0);
    Ok(summary)
}

/// The HF decoder directory `dir` with its matrices quantized at load as
/// `ferrite convert --outtype TYPE` quantizes them (the f32 conversion,
/// then `llama-quantize`'s choices and bytes), as an in-memory GGUF file:
/// the same tensors, so the same outputs, as that file. The tokenizer is
/// the directory's `tokenizer.json` (as when the directory runs
/// unquantized), not the converter's vocabulary.
pub fn quantize_on_load(
    dir: &Path,
    ftype: FileType,
    threads: usize,
) -> Result<crate::formats::gguf::GgufFile, Error> {
    use crate::formats::gguf::GgufFile;
    let opts = ConvertOptions {
        target: Target::Converter(OutType::F32),
        pre_tokenizer: None,
        force: false,
        threads,
    };
    let shown = dir.display().to_string();
    let mut f32_bytes = Vec::new();
    convert_to(dir, OutType::F32, &opts, true, &mut f32_bytes, &shown)?;
    let f32_file = GgufFile::from_vec(dir, f32_bytes)?;
    let q = QuantizeOptions {
        ftype,
        pure: false,
        allow_requantize: false,
        threads: threads.max(1),
    };
    let mut out = Vec::with_capacity(f32_file.bytes().len() / 3);
    crate::quantize::quantize_to(&f32_file, &mut out, &q, &shown, &mut |_, _, _| {})?;
    drop(f32_file);
    Ok(GgufFile::from_vec(dir, out)?)
}

/// Writes the converted file to `w`; with `hf_tokenizer`, the tokenizer
/// keys are those ferrite runs a directory with (`tokenizer.json` whole)
/// instead of the converter's vocabulary.
fn convert_to<W: Write>(
    dir: &Path,
    t: OutType,
    opts: &ConvertOptions,
    hf_tokenizer: bool,
    w: &mut W,
    shown: &str,
) -> Result<ConvertSummary, Error> {
    let config_path = dir.join("config.json");
    if !config_path.is_file() {
        return Err(Error::model(
            dir.display().to_string(),
            "no config.json (not a Hugging Face model directory)",
        ));
    }
    let st = SafetensorsDir::open(dir)?;
    let source = config_path.display().to_string();
    let decoder = hf_decoder::decoder_plan(&st.config, &source)?;
    let archs: Vec<&str> = st
        .config
        .get("architectures")
        .and_then(Json::as_array)
        .map(|a| a.iter().filter_map(Json::as_str).collect())
        .unwrap_or_default();
    let arch = match &decoder {
        Some((_, family, _)) => family.gguf_name(),
        None => match archs
            .iter()
            .find_map(|a| ENCODERS.iter().find(|(c, _)| c == a))
        {
            Some((_, arch)) => arch,
            None => {
                let mut known = hf_decoder::supported_classes();
                known.extend(ENCODERS.iter().map(|(c, _)| *c));
                let why = if archs.iter().any(|a| a.starts_with("MPNet")) {
                    " (llama.cpp's converter has no MPNet architecture, so there is no file to match)"
                } else {
                    ""
                };
                return Err(Error::model(
                    &source,
                    format!(
                        "'architectures': {archs:?} is not a class ferrite convert knows ({}){why}",
                        known.join(", ")
                    ),
                ));
            }
        },
    };
    let spec = FAMILIES
        .iter()
        .find(|s| s.arch == arch)
        .ok_or_else(|| Error::Internal(format!("no converter entry for {arch}")))?;

    // The tensors in the converter's order.
    let mut order: Vec<&StTensorInfo> = st.tensors.iter().collect();
    order.sort_by(|a, b| {
        st.shard_path(a)
            .cmp(st.shard_path(b))
            .then_with(|| a.name.cmp(&b.name))
    });
    let extra = decoder.as_ref().map_or(&[][..], |(_, _, hp)| &hp.extra[..]);
    let n_layers = st
        .config
        .get("num_hidden_layers")
        .and_then(Json::as_u64)
        .unwrap_or(0) as usize;
    let mut planned: Vec<Planned> = Vec::with_capacity(order.len() + extra.len());
    for (name, values) in extra {
        let dims = vec![values.len() as u64];
        planned.push(Planned {
            name: name.to_string(),
            to: tensor_type(name, &dims, t),
            dims,
            from: Source::Values(values.clone()),
        });
    }
    for info in order {
        let src = st.shard_path(info).display().to_string();
        let mapped = match &decoder {
            Some((_, family, hp)) => hf_decoder::map_name(*family, hp, &info.name, &src)?,
            None => bert_name(&info.name, n_layers, &src)?.map(|n| (n, Reshape::None)),
        };
        let Some((name, reshape)) = mapped else {
            continue;
        };
        let mut dims: Vec<u64> = info.shape.iter().rev().map(|&d| d as u64).collect();
        if reshape == Reshape::Transpose && dims.len() == 2 {
            dims.swap(0, 1);
        }
        planned.push(Planned {
            to: tensor_type(&name, &dims, t),
            name,
            dims,
            from: Source::St(info, reshape),
        });
    }
    if arch == "gpt2" && st.config.get("n_ctx").is_none() {
        return Err(bad(
            &source,
            "n_ctx",
            "missing (convert_hf_to_gguf.py's GPT-2 needs it)",
        ));
    }
    let parameters: u64 = planned.iter().map(|p| p.dims.iter().product::<u64>()).sum();

    // Metadata.
    let mut md = Metadata::default();
    md.insert("general.architecture".into(), Value::String(arch.into()));
    md.insert("general.type".into(), Value::String("model".into()));
    meta::General::load(dir, &st.config, parameters)?.write(&mut md);
    if spec.generic {
        generic_keys(&st.config, arch, &mut md)?;
        md.insert("general.file_type".into(), Value::U32(t.file_type()));
        (spec.extra)(dir, &st.config, arch, &mut md)?;
    } else {
        (spec.extra)(dir, &st.config, arch, &mut md)?;
        md.insert("general.file_type".into(), Value::U32(t.file_type()));
    }
    md.insert(
        "general.quantization_version".into(),
        Value::U32(QUANTIZATION_VERSION),
    );
    if hf_tokenizer {
        hf_decoder::tokenizer_metadata(dir, &st.config, &mut md)?;
    } else {
        write_vocab_keys(dir, &st.config, spec, opts, &mut md)?;
    }
    write_tensors(&st, &decoder, &planned, &md, w, shown)?;
    Ok(ConvertSummary {
        architecture: arch.to_string(),
        tensors: planned.len(),
        parameters,
        bytes_out: 0,
    })
}

/// The converter's tokenizer keys.
fn write_vocab_keys(
    dir: &Path,
    config: &Json,
    spec: &Spec,
    opts: &ConvertOptions,
    md: &mut Metadata,
) -> Result<(), Error> {
    if spec.space_prefix {
        let tc = dir.join("tokenizer_config.json");
        if let Ok(text) = std::fs::read_to_string(&tc) {
            let j: Json = serde_json::from_str(&text).map_err(|e| {
                Error::model(tc.display().to_string(), format!("invalid JSON: {e}"))
            })?;
            if let Some(b) = j.get("add_prefix_space").and_then(Json::as_bool) {
                md.insert("tokenizer.ggml.add_space_prefix".into(), Value::Bool(b));
            }
        }
    }
    vocab::write_vocab(dir, config, spec.vocab, opts.pre_tokenizer.as_deref(), md)
}

type Decoder = Option<(&'static str, hf_decoder::Family, hf_decoder::Hp)>;

/// The header, then each tensor streamed from the input.
fn write_tensors<W: Write>(
    st: &SafetensorsDir,
    decoder: &Decoder,
    planned: &[Planned],
    md: &Metadata,
    w: &mut W,
    shown: &str,
) -> Result<(), Error> {
    let io = |e: std::io::Error| Error::io(shown, e);
    let headers: Vec<TensorHeader> = planned
        .iter()
        .map(|p| TensorHeader {
            name: &p.name,
            dims: &p.dims,
            ty: p.to,
        })
        .collect();
    let alignment = write_gguf_header(w, 3, md, &headers).map_err(io)?;
    for p in planned {
        let written = match &p.from {
            Source::Values(v) => {
                let bytes = encode(v, p)?;
                w.write_all(&bytes).map_err(io)?;
                bytes.len()
            }
            Source::St(info, reshape) => {
                let src = st.shard_path(info).display().to_string();
                match &decoder {
                    Some((_, _, hp)) => {
                        let o = hf_decoder::convert(st, info, p.name.clone(), *reshape, hp, &src)?;
                        stream_rows(&o.data, o.ty, p, w).map_err(|e| e.at(shown))?
                    }
                    None => {
                        let data = encoder_data(st, info, &src)?;
                        let ty = info.ty.unwrap_or(GgmlType::F32);
                        stream_rows(data, ty, p, w).map_err(|e| e.at(shown))?
                    }
                }
            }
        };
        let pad = (written as u64).next_multiple_of(alignment) - written as u64;
        w.write_all(&vec![0u8; pad as usize]).map_err(io)?;
    }
    w.flush().map_err(io)?;
    Ok(())
}

/// An encoder tensor's bytes, checked as the decoders' are.
fn encoder_data<'a>(
    st: &'a SafetensorsDir,
    t: &StTensorInfo,
    source: &str,
) -> Result<&'a [u8], Error> {
    let bad = |problem: String| Error::model(source, format!("tensor '{}': {problem}", t.name));
    if !matches!(t.ty, Some(GgmlType::F32 | GgmlType::F16 | GgmlType::Bf16)) {
        return Err(bad(format!(
            "dtype {} is not supported (F32, F16, BF16)",
            t.dtype
        )));
    }
    if t.shape.is_empty() || t.shape.len() > 2 || t.shape.contains(&0) {
        return Err(bad(format!(
            "shape {:?} is not a vector or a matrix",
            t.shape
        )));
    }
    Ok(st.tensor_data(t))
}

fn encode(values: &[f32], p: &Planned) -> Result<Vec<u8>, Error> {
    let n = p.to.bytes_for(values.len() as u64).unwrap_or(0) as usize;
    let mut out = vec![0u8; n];
    quantize(p.to, values, &mut out)
        .map_err(|e| Error::Internal(format!("tensor {}: {e}", p.name)))?;
    Ok(out)
}

/// Why streaming a tensor failed: the writer, or the conversion.
enum StreamError {
    Io(std::io::Error),
    Convert(Error),
}

impl StreamError {
    fn at(self, shown: &str) -> Error {
        match self {
            StreamError::Io(e) => Error::io(shown, e),
            StreamError::Convert(e) => e,
        }
    }
}

/// Writes a tensor's bytes of type `from` as `p.to`, row by row through
/// f32 (one row buffer); returns the bytes written.
fn stream_rows<W: Write>(
    data: &[u8],
    from: GgmlType,
    p: &Planned,
    w: &mut W,
) -> Result<usize, StreamError> {
    if from == p.to {
        w.write_all(data).map_err(StreamError::Io)?;
        return Ok(data.len());
    }
    let row = p.dims[0] as usize;
    let (Some(row_in), Some(row_out)) = (from.bytes_for(row as u64), p.to.bytes_for(row as u64))
    else {
        return Err(StreamError::Convert(Error::Internal(format!(
            "tensor {}: bad row",
            p.name
        ))));
    };
    let (row_in, row_out) = (row_in as usize, row_out as usize);
    let mut f = vec![0f32; row];
    let mut out = vec![0u8; row_out];
    let mut written = 0;
    for src in data.chunks(row_in) {
        dequantize(from, src, &mut f)
            .and_then(|()| quantize(p.to, &f, &mut out))
            .map_err(|e| {
                StreamError::Convert(Error::Internal(format!("tensor {}: {e}", p.name)))
            })?;
        w.write_all(&out).map_err(StreamError::Io)?;
        written += row_out;
    }
    Ok(written)
}
