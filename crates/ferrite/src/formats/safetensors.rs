//! A Hugging Face model directory: `config.json` plus `model.safetensors`, or
//! shards listed in `model.safetensors.index.json`. Files are memory-mapped;
//! each header is parsed and validated by the `safetensors` crate (offsets
//! contiguous, sizes matching shapes, buffer length exact).
//!
//! Format: huggingface/safetensors README ("Format").

use std::collections::{BTreeSet, HashMap};
use std::fs::File;
use std::path::{Path, PathBuf};

use ferrite_kernels::GgmlType;
use memmap2::Mmap;
use safetensors::{Dtype, SafeTensorError, SafeTensors};

use super::FormatError;

/// Most shards an index may name (a guard against hostile index files).
const MAX_SHARDS: usize = 4096;

/// One tensor of a safetensors directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StTensorInfo {
    pub name: String,
    /// Shape in safetensors (row-major, PyTorch) order: the last dimension is
    /// contiguous. Note this is the reverse of ggml's order.
    pub shape: Vec<usize>,
    /// The dtype as safetensors spells it (`F32`, `BF16`, ...).
    pub dtype: String,
    /// The same type in ggml terms, where one exists.
    pub ty: Option<GgmlType>,
    shard: usize,
    /// Absolute byte range of the data within its shard file.
    start: usize,
    end: usize,
}

impl StTensorInfo {
    pub fn n_elements(&self) -> u64 {
        self.shape.iter().map(|&d| d as u64).product()
    }

    pub fn size(&self) -> u64 {
        (self.end - self.start) as u64
    }
}

/// A memory-mapped safetensors model directory.
pub struct SafetensorsDir {
    dir: PathBuf,
    /// `config.json`, parsed (an empty object if the file is absent).
    pub config: serde_json::Value,
    shards: Vec<(PathBuf, Mmap)>,
    /// Tensors sorted by name.
    pub tensors: Vec<StTensorInfo>,
    by_name: HashMap<String, usize>,
}

fn ggml_type_of(dtype: Dtype) -> Option<GgmlType> {
    Some(match dtype {
        Dtype::F32 => GgmlType::F32,
        Dtype::F16 => GgmlType::F16,
        Dtype::BF16 => GgmlType::Bf16,
        Dtype::F64 => GgmlType::F64,
        Dtype::I8 => GgmlType::I8,
        Dtype::I16 => GgmlType::I16,
        Dtype::I32 => GgmlType::I32,
        Dtype::I64 => GgmlType::I64,
        _ => return None,
    })
}

fn io_err(path: &Path, e: impl ToString) -> FormatError {
    FormatError::new(path.display().to_string(), "", e.to_string())
}

/// Reads and parses a JSON file.
pub fn read_json(path: &Path) -> Result<serde_json::Value, FormatError> {
    let text = std::fs::read(path).map_err(|e| io_err(path, e))?;
    serde_json::from_slice(&text)
        .map_err(|e| FormatError::new(path.display().to_string(), "", format!("invalid JSON: {e}")))
}

impl SafetensorsDir {
    /// True if `dir` looks like a safetensors model directory.
    pub fn is_model_dir(dir: &Path) -> bool {
        dir.join("model.safetensors").is_file()
            || dir.join("model.safetensors.index.json").is_file()
    }

    /// Opens a model directory, or a single `.safetensors` file.
    pub fn open(path: impl AsRef<Path>) -> Result<SafetensorsDir, FormatError> {
        let path = path.as_ref();
        let (dir, shard_names) = if path.is_file() {
            let dir = path.parent().unwrap_or(Path::new(".")).to_path_buf();
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            (dir, vec![name])
        } else if path.join("model.safetensors.index.json").is_file() {
            (
                path.to_path_buf(),
                shards_from_index(&path.join("model.safetensors.index.json"))?,
            )
        } else if path.join("model.safetensors").is_file() {
            (path.to_path_buf(), vec!["model.safetensors".to_string()])
        } else {
            return Err(io_err(
                path,
                "no model.safetensors or model.safetensors.index.json here",
            ));
        };

        let config_path = dir.join("config.json");
        let config = if config_path.is_file() {
            read_json(&config_path)?
        } else {
            serde_json::Value::Object(Default::default())
        };

        let mut shards = Vec::new();
        let mut tensors = Vec::new();
        let mut by_name = HashMap::new();
        for name in shard_names {
            let shard_path = dir.join(&name);
            let file = File::open(&shard_path).map_err(|e| io_err(&shard_path, e))?;
            // SAFETY: read-only private map; as with every mmap loader we rely
            // on the file not being truncated while mapped.
            let map = unsafe { Mmap::map(&file) }.map_err(|e| io_err(&shard_path, e))?;
            let (header_len, meta) = SafeTensors::read_metadata(&map).map_err(|e| {
                let (field, problem) = header_problem(&e, &map);
                FormatError::new(shard_path.display().to_string(), field, problem)
            })?;
            // read_metadata checked 8 + header_len + data == file length.
            let data_start = 8 + header_len;
            for (tname, info) in meta.tensors() {
                let (s, e) = info.data_offsets;
                let (start, end) = match (data_start.checked_add(s), data_start.checked_add(e)) {
                    (Some(a), Some(b)) if a <= b && b <= map.len() => (a, b),
                    _ => {
                        return Err(FormatError::new(
                            shard_path.display().to_string(),
                            format!("tensor '{tname}'"),
                            "data offsets outside the file",
                        ))
                    }
                };
                if by_name.insert(tname.clone(), tensors.len()).is_some() {
                    return Err(FormatError::new(
                        shard_path.display().to_string(),
                        format!("tensor '{tname}'"),
                        "appears in more than one shard",
                    ));
                }
                tensors.push(StTensorInfo {
                    name: tname,
                    shape: info.shape.clone(),
                    dtype: format!("{:?}", info.dtype),
                    ty: ggml_type_of(info.dtype),
                    shard: shards.len(),
                    start,
                    end,
                });
            }
            shards.push((shard_path, map));
        }
        tensors.sort_by(|a, b| a.name.cmp(&b.name));
        let by_name = tensors
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.clone(), i))
            .collect();
        Ok(SafetensorsDir {
            dir,
            config,
            shards,
            tensors,
            by_name,
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Paths of the shard files.
    pub fn shard_paths(&self) -> impl Iterator<Item = &Path> {
        self.shards.iter().map(|(p, _)| p.as_path())
    }

    pub fn tensor_info(&self, name: &str) -> Option<&StTensorInfo> {
        self.by_name.get(name).map(|&i| &self.tensors[i])
    }

    /// The shard file holding a tensor.
    pub fn shard_path(&self, info: &StTensorInfo) -> &Path {
        &self.shards[info.shard].0
    }

    /// The bytes of a tensor (little-endian, row-major).
    pub fn tensor_data(&self, info: &StTensorInfo) -> &[u8] {
        // start..end was checked against this shard's length at open.
        &self.shards[info.shard].1[info.start..info.end]
    }
}

/// The shard file names listed in an index's `weight_map`, each once.
fn shards_from_index(index: &Path) -> Result<Vec<String>, FormatError> {
    let json = read_json(index)?;
    let shown = index.display().to_string();
    let map = json
        .get("weight_map")
        .and_then(|m| m.as_object())
        .ok_or_else(|| FormatError::new(&shown, "weight_map", "missing or not an object"))?;
    let mut names = BTreeSet::new();
    for (tensor, file) in map {
        let file = file.as_str().ok_or_else(|| {
            FormatError::new(&shown, format!("weight_map['{tensor}']"), "not a string")
        })?;
        // A shard must be a plain file name in the same directory.
        if file.is_empty()
            || file.contains('/')
            || file.contains('\\')
            || file == ".."
            || file == "."
        {
            return Err(FormatError::new(
                &shown,
                format!("weight_map['{tensor}']"),
                format!("'{file}' is not a file name in this directory"),
            ));
        }
        names.insert(file.to_string());
        if names.len() > MAX_SHARDS {
            return Err(FormatError::new(
                &shown,
                "weight_map",
                "too many shard files",
            ));
        }
    }
    Ok(names.into_iter().collect())
}

/// What is wrong with a safetensors file whose header the crate refused
/// with `e`, in words: the field (`header`, or the tensor at fault) and
/// the problem. The crate's errors are bare names (`TensorInvalidInfo`,
/// `InvalidOffset("x")`), so the header is read again here to say which
/// tensor is wrong and how.
fn header_problem(e: &SafeTensorError, file: &[u8]) -> (String, String) {
    let header = || "header".to_string();
    match e {
        SafeTensorError::MetadataIncompleteBuffer => (
            header(),
            "the file's size does not match the tensors its header lists (truncated, or not \
             fully downloaded?)"
                .into(),
        ),
        SafeTensorError::HeaderTooSmall => (
            header(),
            "not a safetensors file: shorter than the 8-byte header length".into(),
        ),
        SafeTensorError::HeaderTooLarge => (
            header(),
            "not a safetensors file: the header length is over 100 MB".into(),
        ),
        SafeTensorError::InvalidHeaderLength => (
            header(),
            "not a safetensors file: the header length runs past the end of the file".into(),
        ),
        SafeTensorError::InvalidHeader => (
            header(),
            "not a safetensors file: the header is not UTF-8 text".into(),
        ),
        SafeTensorError::InvalidHeaderStart => (
            header(),
            "not a safetensors file: the header does not start with '{'".into(),
        ),
        _ => tensor_problem(file).unwrap_or_else(|| (header(), format!("invalid ({e:?})"))),
    }
}

/// The first problem in the header of `file` (whose length prefix and
/// UTF-8 the crate already checked), checked as the crate checks it:
/// JSON, each tensor's entry, then tensors in data order, each starting
/// where the previous one ends and as long as its shape and dtype need.
fn tensor_problem(file: &[u8]) -> Option<(String, String)> {
    let len = usize::try_from(u64::from_le_bytes(file.get(..8)?.try_into().ok()?)).ok()?;
    let text = file.get(8..len.checked_add(8)?)?;
    let json: serde_json::Map<String, serde_json::Value> = match serde_json::from_slice(text) {
        Ok(j) => j,
        Err(e) => {
            return Some((
                "header".into(),
                format!("not a JSON object of tensors: {e}"),
            ))
        }
    };
    let mut tensors = Vec::new();
    for (name, entry) in json {
        if name == "__metadata__" {
            continue;
        }
        let field = format!("tensor '{name}'");
        match serde_json::from_value::<safetensors::tensor::TensorInfo>(entry) {
            Ok(info) => tensors.push((field, info)),
            Err(e) => return Some((field, format!("not a tensor entry: {e}"))),
        }
    }
    tensors.sort_by_key(|(_, info)| info.data_offsets);
    let mut start = 0;
    for (field, info) in tensors {
        let (s, e) = info.data_offsets;
        if s != start || e < s {
            return Some((
                field,
                format!(
                    "data offsets [{s}, {e}] do not start where the previous tensor's data \
                     ends (byte {start} of the data): tensors must be stored back to back"
                ),
            ));
        }
        start = e;
        let bytes = info
            .shape
            .iter()
            .try_fold(1usize, |n, &d| n.checked_mul(d))
            .and_then(|n| n.checked_mul(info.dtype.size()));
        match bytes {
            None => {
                return Some((
                    field,
                    format!(
                        "shape {:?} of {:?} is too large to address",
                        info.shape, info.dtype
                    ),
                ))
            }
            Some(n) if n != e - s => {
                return Some((
                    field,
                    format!(
                        "data offsets [{s}, {e}] hold {} bytes, but shape {:?} of {:?} needs {n}",
                        e - s,
                        info.shape,
                        info.dtype
                    ),
                ))
            }
            Some(_) => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes `model.safetensors` with `header` (JSON) and `data` into a
    /// fresh directory named after `name`, and opens it; the error's text.
    fn open_err(name: &str, header: &str, data: &[u8]) -> String {
        let dir = std::env::temp_dir().join(format!("ferrite-st-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(header.as_bytes());
        bytes.extend_from_slice(data);
        std::fs::write(dir.join("model.safetensors"), bytes).unwrap();
        let err = SafetensorsDir::open(&dir).err().expect("a bad file").to_string();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(err.contains("model.safetensors"), "names the file: {err}");
        err
    }

    /// Issue 44: these were reported as the crate's bare enum names
    /// (`TensorInvalidInfo`, `InvalidOffset("b")`, `ValidationOverflow`).
    #[test]
    fn header_errors_name_the_tensor_and_the_problem() {
        let err = open_err(
            "size",
            r#"{"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,12]}}"#,
            &[0; 12],
        );
        assert!(
            err.contains("tensor 'w': data offsets [0, 12] hold 12 bytes, but shape [2, 2] of F32 needs 16"),
            "{err}"
        );
        let err = open_err(
            "gap",
            r#"{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},
                "b":{"dtype":"U8","shape":[4],"data_offsets":[8,12]}}"#,
            &[0; 12],
        );
        assert!(err.contains("tensor 'b': data offsets [8, 12] do not start"), "{err}");
        let err = open_err(
            "overflow",
            r#"{"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}}"#,
            &[0; 4],
        );
        assert!(err.contains("tensor 'w': shape [4294967296, 4294967296] of F32 is too large"), "{err}");
        let err = open_err(
            "dtype",
            r#"{"w":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}}"#,
            &[0; 4],
        );
        assert!(err.contains("tensor 'w': not a tensor entry"), "{err}");
        let err = open_err("short", r#"{"w":{"dtype":"F32""#, &[]);
        assert!(err.contains("header: not a JSON object of tensors"), "{err}");
        assert!(!err.contains("Invalid") && !err.contains("Overflow"), "{err}");
    }
}
