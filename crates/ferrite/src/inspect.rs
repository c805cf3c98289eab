//! What `ferrite inspect` reports about a model file or directory: format,
//! architecture, hyper-parameters, tokenizer, chat template, tensors.
//!
//! Built from a GGUF file or a safetensors directory without reading tensor
//! data, so it takes milliseconds even on large files.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{json, Map, Value as Json};

use crate::formats::gguf::{Array, GgufFile, Value};
use crate::formats::safetensors::{read_json, SafetensorsDir};
use crate::formats::FormatError;
use crate::Error;

/// One row of the tensor table.
#[derive(Clone, Debug)]
pub struct TensorRow {
    /// The tensor's name in the file.
    pub name: String,
    /// As the file stores it: ggml order (row length first) for GGUF,
    /// PyTorch order (row length last) for safetensors.
    pub shape: Vec<u64>,
    /// Type as ggml spells it (`Q4_K`), or the safetensors dtype when ggml
    /// has no such type.
    pub ty: String,
    /// Bytes of its data.
    pub bytes: u64,
    /// Number of values.
    pub n_elements: u64,
}

/// Everything `inspect` prints.
#[derive(Clone, Debug)]
pub struct Report {
    /// The file or directory inspected.
    pub path: String,
    /// `"gguf"` or `"safetensors"`.
    pub format: &'static str,
    /// GGUF version, if GGUF.
    pub gguf_version: Option<u32>,
    /// `general.architecture` (GGUF) or the `config.json` architecture.
    pub architecture: Option<String>,
    /// Architecture hyper-parameters: `{arch}.*` keys for GGUF (prefix
    /// stripped), numeric and string fields of `config.json` otherwise.
    pub hyperparameters: BTreeMap<String, Json>,
    /// e.g. `gpt2` / `llama` for GGUF, `WordPiece` / `BPE` for tokenizer.json.
    pub tokenizer_kind: Option<String>,
    /// Tokens in the vocabulary.
    pub tokenizer_size: Option<u64>,
    /// Whether the model has a chat template.
    pub chat_template: bool,
    /// All metadata key/values (GGUF), or `config.json` (safetensors).
    pub metadata: Map<String, Json>,
    /// Every tensor: name, type, shape.
    pub tensors: Vec<TensorRow>,
    /// Bytes on disk (all files of a directory).
    pub file_size: u64,
}

impl Report {
    /// Values in floating-point or quantized tensors. Integer tensors (such
    /// as BERT's `position_ids` buffer) are not parameters.
    pub fn parameter_count(&self) -> u64 {
        const INTEGER_TYPES: [&str; 6] = ["I8", "I16", "I32", "I64", "U8", "BOOL"];
        self.tensors
            .iter()
            .filter(|t| !INTEGER_TYPES.contains(&t.ty.as_str()))
            .map(|t| t.n_elements)
            .sum()
    }

    /// (type, tensor count, bytes) per type, most bytes first.
    pub fn type_histogram(&self) -> Vec<(String, usize, u64)> {
        let mut by_type: BTreeMap<&str, (usize, u64)> = BTreeMap::new();
        for t in &self.tensors {
            let e = by_type.entry(&t.ty).or_default();
            e.0 += 1;
            e.1 += t.bytes;
        }
        let mut rows: Vec<_> = by_type
            .into_iter()
            .map(|(k, (n, b))| (k.to_string(), n, b))
            .collect();
        rows.sort_by(|a, b| b.2.cmp(&a.2).then(a.0.cmp(&b.0)));
        rows
    }

    /// The `--json` object: `architecture`, `metadata`, `tensors` and the rest.
    pub fn to_json(&self) -> Json {
        let tensors: Vec<Json> = self
            .tensors
            .iter()
            .map(|t| json!({"name": t.name, "shape": t.shape, "type": t.ty, "bytes": t.bytes}))
            .collect();
        let histogram: Vec<Json> = self
            .type_histogram()
            .into_iter()
            .map(|(ty, n, bytes)| json!({"type": ty, "tensors": n, "bytes": bytes}))
            .collect();
        json!({
            "path": self.path,
            "format": self.format,
            "gguf_version": self.gguf_version,
            "architecture": self.architecture,
            "hyperparameters": self.hyperparameters,
            "tokenizer": {"kind": self.tokenizer_kind, "size": self.tokenizer_size},
            "chat_template": self.chat_template,
            "parameter_count": self.parameter_count(),
            "file_size": self.file_size,
            "type_histogram": histogram,
            "metadata": self.metadata,
            "tensors": tensors,
        })
    }
}

/// Inspects a GGUF file or a safetensors directory / file.
pub fn inspect(path: &Path) -> Result<Report, FormatError> {
    if path.is_dir() || path.extension().is_some_and(|e| e == "safetensors") {
        inspect_safetensors(path)
    } else {
        inspect_gguf(&GgufFile::open(path)?)
    }
}

/// Most metadata values (each array element counts as one) a GGUF report
/// holds. The report carries every value as JSON, some 32 bytes each, so
/// without a cap a file with a 100 MB byte array took 7 GB to inspect.
/// The largest arrays of real models (vocabularies, merges, scores) hold
/// about a million values in all.
pub const MAX_REPORTED_VALUES: u64 = 1 << 22;

/// How many values `v` holds: an array's elements (and theirs, when they
/// are arrays), else one.
fn value_count(v: &Value) -> u64 {
    fn array_count(a: &Array) -> u64 {
        let nested = match a {
            Array::Array(v) => v.iter().map(array_count).fold(0, u64::saturating_add),
            _ => 0,
        };
        (a.len() as u64).saturating_add(nested)
    }
    match v {
        Value::Array(a) => array_count(a),
        _ => 1,
    }
}

/// Fails when `file`'s metadata holds more than [`MAX_REPORTED_VALUES`]
/// values, naming its largest key.
fn check_reportable(file: &GgufFile) -> Result<(), FormatError> {
    let meta = file.metadata();
    let total = meta
        .iter()
        .map(|(_, v)| value_count(v))
        .fold(0, u64::saturating_add);
    if total <= MAX_REPORTED_VALUES {
        return Ok(());
    }
    let (key, largest) = meta
        .iter()
        .map(|(k, v)| (k, value_count(v)))
        .max_by_key(|&(_, n)| n)
        .unwrap_or(("", 0));
    Err(FormatError::new(
        file.path().display().to_string(),
        format!("metadata '{key}'"),
        format!(
            "an array of {largest} values ({total} values in all metadata), more than the \
             {MAX_REPORTED_VALUES} inspect reports; no real model has arrays this large"
        ),
    ))
}

/// The report for an opened GGUF file. Fails when its metadata holds more
/// than `MAX_REPORTED_VALUES` values.
pub fn inspect_gguf(file: &GgufFile) -> Result<Report, FormatError> {
    check_reportable(file)?;
    let meta = file.metadata();
    let architecture = file.header.architecture().map(str::to_string);
    let mut hyperparameters = BTreeMap::new();
    if let Some(arch) = &architecture {
        let prefix = format!("{arch}.");
        for (key, value) in meta.iter() {
            if let Some(rest) = key.strip_prefix(&prefix) {
                hyperparameters.insert(rest.to_string(), value_to_json(value));
            }
        }
    }
    let tokenizer_size = match meta.get("tokenizer.ggml.tokens") {
        Some(Value::Array(a)) => Some(a.len() as u64),
        _ => None,
    };
    let tensors = file
        .header
        .tensors
        .iter()
        .map(|t| TensorRow {
            name: t.name.clone(),
            shape: t.dims.clone(),
            ty: t.ty.name().to_string(),
            bytes: t.size,
            n_elements: t.n_elements(),
        })
        .collect();
    Ok(Report {
        path: file.path().display().to_string(),
        format: "gguf",
        gguf_version: Some(file.header.version),
        architecture,
        hyperparameters,
        tokenizer_kind: meta.get_str("tokenizer.ggml.model").map(str::to_string),
        tokenizer_size,
        chat_template: meta.get("tokenizer.chat_template").is_some(),
        metadata: meta
            .iter()
            .map(|(k, v)| (k.to_string(), value_to_json(v)))
            .collect(),
        tensors,
        file_size: file.bytes().len() as u64,
    })
}

fn inspect_safetensors(path: &Path) -> Result<Report, FormatError> {
    let st = SafetensorsDir::open(path)?;
    let config = st.config.as_object().cloned().unwrap_or_default();
    let architecture = config
        .get("architectures")
        .and_then(|a| a.get(0))
        .and_then(Json::as_str)
        .or_else(|| config.get("model_type").and_then(Json::as_str))
        .map(str::to_string);
    // Scalars, and short lists of them (`layer_types`, `no_rope_layers`,
    // LongRoPE's `long_factor`, ...).
    let scalar = |v: &Json| {
        let one = |v: &Json| v.is_number() || v.is_string() || v.is_boolean();
        one(v)
            || v.as_array()
                .is_some_and(|a| a.len() <= 1024 && a.iter().all(one))
    };
    let mut hyperparameters: BTreeMap<String, Json> = config
        .iter()
        .filter(|(k, v)| scalar(v) && *k != "architectures")
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    // RoPE scaling (`rope_parameters` / `rope_scaling`: type, factor, ...),
    // one level down, and per layer type (Gemma: `full_attention`, ...).
    for (key, value) in config.iter().filter(|(k, _)| k.starts_with("rope_")) {
        let Some(obj) = value.as_object() else {
            continue;
        };
        for (k, v) in obj {
            if scalar(v) {
                hyperparameters.insert(format!("{key}.{k}"), v.clone());
            } else if let Some(inner) = v.as_object() {
                for (k2, v2) in inner.iter().filter(|(_, v)| scalar(v)) {
                    hyperparameters.insert(format!("{key}.{k}.{k2}"), v2.clone());
                }
            }
        }
    }

    let dir = st.dir();
    let tokenizer_path = dir.join("tokenizer.json");
    let (tokenizer_kind, tokenizer_size) = if tokenizer_path.is_file() {
        let tok = read_json(&tokenizer_path)?;
        let model = tok.get("model");
        let kind = model
            .and_then(|m| m.get("type"))
            .and_then(Json::as_str)
            .map(str::to_string);
        let vocab = model.and_then(|m| m.get("vocab"));
        let base = vocab
            .and_then(|v| {
                v.as_object()
                    .map(|o| o.len())
                    .or_else(|| v.as_array().map(|a| a.len()))
            })
            .unwrap_or(0);
        // Added tokens not already in the vocabulary also count.
        let added = tok
            .get("added_tokens")
            .and_then(Json::as_array)
            .map_or(0, |a| {
                a.iter()
                    .filter(|t| {
                        let content = t.get("content").and_then(Json::as_str).unwrap_or("");
                        !vocab
                            .and_then(Json::as_object)
                            .is_some_and(|o| o.contains_key(content))
                    })
                    .count()
            });
        (kind, Some((base + added) as u64))
    } else {
        (None, None)
    };
    // Where the HF decoder reader takes it from (formats::hf_decoder).
    let chat_template = dir.join("chat_template.jinja").is_file()
        || (dir.join("tokenizer_config.json").is_file()
            && read_json(&dir.join("tokenizer_config.json"))?
                .get("chat_template")
                .is_some());

    let tensors = st
        .tensors
        .iter()
        .map(|t| TensorRow {
            name: t.name.clone(),
            shape: t.shape.iter().map(|&d| d as u64).collect(),
            ty: t
                .ty
                .map_or_else(|| t.dtype.clone(), |ty| ty.name().to_string()),
            bytes: t.size(),
            n_elements: t.n_elements(),
        })
        .collect();
    let file_size = st
        .shard_paths()
        .map(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0))
        .sum();
    Ok(Report {
        path: path.display().to_string(),
        format: "safetensors",
        gguf_version: None,
        architecture,
        hyperparameters,
        tokenizer_kind,
        tokenizer_size,
        chat_template,
        metadata: config,
        tensors,
        file_size,
    })
}

/// A float as JSON in its shortest round-tripping form (`0.1`, not
/// `0.10000000149011612`); non-finite values become strings (`"NaN"`).
fn f32_to_json(v: f32) -> Json {
    if v.is_finite() {
        serde_json::from_str(&format!("{v:?}")).unwrap_or(Json::Null)
    } else {
        Json::String(v.to_string())
    }
}

fn f64_to_json(v: f64) -> Json {
    serde_json::Number::from_f64(v).map_or_else(|| Json::String(v.to_string()), Json::Number)
}

/// A metadata value as JSON (arrays in full).
pub fn value_to_json(v: &Value) -> Json {
    match v {
        Value::U8(x) => json!(x),
        Value::I8(x) => json!(x),
        Value::U16(x) => json!(x),
        Value::I16(x) => json!(x),
        Value::U32(x) => json!(x),
        Value::I32(x) => json!(x),
        Value::U64(x) => json!(x),
        Value::I64(x) => json!(x),
        Value::F32(x) => f32_to_json(*x),
        Value::F64(x) => f64_to_json(*x),
        Value::Bool(x) => json!(x),
        Value::String(s) => json!(s),
        Value::Array(a) => array_to_json(a),
    }
}

fn array_to_json(a: &Array) -> Json {
    match a {
        Array::U8(v) => json!(v),
        Array::I8(v) => json!(v),
        Array::U16(v) => json!(v),
        Array::I16(v) => json!(v),
        Array::U32(v) => json!(v),
        Array::I32(v) => json!(v),
        Array::U64(v) => json!(v),
        Array::I64(v) => json!(v),
        Array::F32(v) => Json::Array(v.iter().map(|&x| f32_to_json(x)).collect()),
        Array::F64(v) => Json::Array(v.iter().map(|&x| f64_to_json(x)).collect()),
        Array::Bool(v) => json!(v),
        Array::String(v) => json!(v),
        Array::Array(v) => Json::Array(v.iter().map(array_to_json).collect()),
    }
}

/// The first `n` values of tensor `name`, dequantized to f32 (fewer if the
/// tensor is smaller). Only the blocks that hold them are decoded.
pub fn tensor_values(path: &Path, name: &str, n: usize) -> Result<Vec<f32>, Error> {
    use ferrite_kernels::quant::dequantize;
    use ferrite_kernels::GgmlType;

    let shown = path.display().to_string();
    let bad = |problem: String| Error::model(&shown, problem);
    let decode = |ty: GgmlType, data: &[u8], n_elements: u64| -> Result<Vec<f32>, Error> {
        let n = (n as u64).min(n_elements) as usize;
        let bs = ty.block_size();
        let blocks = n.div_ceil(bs);
        let bytes = blocks * ty.type_size();
        let src = data.get(..bytes).ok_or_else(|| {
            bad(format!(
                "tensor '{name}' has fewer bytes than its shape says"
            ))
        })?;
        let mut out = vec![0f32; blocks * bs];
        dequantize(ty, src, &mut out).map_err(|e| bad(format!("tensor '{name}': {e}")))?;
        out.truncate(n);
        Ok(out)
    };

    if path.is_dir() || path.extension().is_some_and(|e| e == "safetensors") {
        let st = SafetensorsDir::open(path)?;
        let info = st
            .tensor_info(name)
            .ok_or_else(|| Error::Input(format!("{shown}: no tensor named '{name}'")))?;
        let ty = info.ty.ok_or_else(|| {
            bad(format!(
                "tensor '{name}': dtype {} cannot be shown as f32",
                info.dtype
            ))
        })?;
        decode(ty, st.tensor_data(info), info.n_elements())
    } else {
        let file = GgufFile::open(path)?;
        let t = file
            .tensor(name)
            .ok_or_else(|| Error::Input(format!("{shown}: no tensor named '{name}'")))?;
        decode(t.info.ty, t.data, t.info.n_elements())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::gguf::{write_gguf, Metadata};

    /// A GGUF file (no tensors) with `general.architecture` and `key`
    /// holding a u8 array of `n` zeros.
    fn file_with_array(key: &str, n: usize) -> GgufFile {
        let mut md = Metadata::default();
        md.set("general.architecture".into(), Value::String("llama".into()));
        md.set(key.into(), Value::Array(Array::U8(vec![0; n])));
        let mut bytes = Vec::new();
        write_gguf(&mut bytes, 3, &md, &[]).unwrap();
        GgufFile::from_vec("big-array.gguf", bytes).unwrap()
    }

    /// Issue 44: a 100 MB byte array took 7 GB to inspect (every element a
    /// JSON value, twice). Past the cap, inspect refuses and names the key.
    #[test]
    fn huge_metadata_arrays_are_refused_by_name() {
        let n = MAX_REPORTED_VALUES as usize + 1;
        let err = inspect_gguf(&file_with_array("llama.huge", n))
            .map(|_| ()).expect_err("a report past the cap");
        let msg = err.to_string();
        assert!(msg.contains("metadata 'llama.huge'"), "{msg}");
        assert!(msg.contains(&format!("an array of {n} values")), "{msg}");
    }

    #[test]
    fn vocabulary_sized_arrays_are_reported_in_full() {
        let r = inspect_gguf(&file_with_array("tokenizer.ggml.token_type", 300_000)).unwrap();
        assert_eq!(
            r.metadata["tokenizer.ggml.token_type"].as_array().map(Vec::len),
            Some(300_000)
        );
    }
}
