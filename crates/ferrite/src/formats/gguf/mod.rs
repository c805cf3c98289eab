//! GGUF, the single-file model format of llama.cpp / ggml (versions 2 and 3,
//! little-endian): a header of typed key/value metadata and tensor
//! descriptions, then an aligned data section holding the tensors.
//!
//! Spec: ggml-org/ggml `docs/gguf.md`. The reader treats every file as
//! hostile (see `read`); the writer ([`write`]) lays files out the way
//! llama.cpp and the `gguf` Python package do, so that reading a file and
//! writing it back gives the same bytes.

mod read;
mod value;
mod write;

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use ferrite_kernels::GgmlType;
use memmap2::Mmap;

pub use read::parse_header;
#[cfg(feature = "internals")]
pub use read::MAX_ARRAY_NESTING;
pub use value::{Array, Value};
pub use write::{write_gguf, write_gguf_header, TensorHeader, TensorToWrite};

use super::FormatError;

/// The four bytes every GGUF file starts with.
pub const MAGIC: [u8; 4] = *b"GGUF";
/// Alignment of tensor data when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// The metadata key that overrides [`DEFAULT_ALIGNMENT`].
pub const KEY_ALIGNMENT: &str = "general.alignment";

/// Metadata key/value pairs in file order, with lookup by key.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Metadata {
    entries: Vec<(String, Value)>,
    index: HashMap<String, usize>,
}

impl Metadata {
    /// Appends a pair; returns false (and changes nothing) if the key exists.
    pub fn insert(&mut self, key: String, value: Value) -> bool {
        if self.index.contains_key(&key) {
            return false;
        }
        self.index.insert(key.clone(), self.entries.len());
        self.entries.push((key, value));
        true
    }

    /// Sets a key as gguf-py's writer does: a new key is appended, an
    /// existing one keeps its place and takes the new value.
    pub fn set(&mut self, key: String, value: Value) {
        match self.index.get(&key) {
            Some(&i) => self.entries[i].1 = value,
            None => {
                self.insert(key, value);
            }
        }
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.index.get(key).map(|&i| &self.entries[i].1)
    }

    /// Pairs in file order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v))
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn get_str(&self, key: &str) -> Option<&str> {
        self.get(key).and_then(Value::as_str)
    }

    pub fn get_u64(&self, key: &str) -> Option<u64> {
        self.get(key).and_then(Value::as_u64)
    }

    pub fn get_f64(&self, key: &str) -> Option<f64> {
        self.get(key).and_then(Value::as_f64)
    }
}

/// One tensor's description from the header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    pub name: String,
    /// Dimensions in ggml order: `dims[0]` is the row length (contiguous),
    /// `dims[1]` the number of rows, and so on.
    pub dims: Vec<u64>,
    pub ty: GgmlType,
    /// Offset of the data from the start of the data section.
    pub offset: u64,
    /// Bytes of data, computed from `dims` and `ty` (checked at parse time).
    pub size: u64,
}

impl TensorInfo {
    /// Number of values (the product of `dims`; checked not to overflow).
    pub fn n_elements(&self) -> u64 {
        self.dims.iter().product()
    }
}

/// Everything in a GGUF file but the tensor data.
#[derive(Clone, Debug, PartialEq)]
pub struct GgufHeader {
    pub version: u32,
    pub metadata: Metadata,
    pub tensors: Vec<TensorInfo>,
    /// Alignment of tensor offsets and of the data section.
    pub alignment: u64,
    /// Absolute file offset of the data section.
    pub data_offset: u64,
}

impl GgufHeader {
    /// `general.architecture`, if present.
    pub fn architecture(&self) -> Option<&str> {
        self.metadata.get_str("general.architecture")
    }
}

/// A GGUF file opened read-only and memory-mapped: the parsed header plus
/// zero-copy views of the tensor data.
pub struct GgufFile {
    path: PathBuf,
    bytes: Bytes,
    /// The parsed header: version, metadata and tensor table.
    pub(crate) header: GgufHeader,
    by_name: HashMap<String, usize>,
}

/// The bytes of a file: mapped from disk, or owned (tests, fuzzing).
enum Bytes {
    Mapped(Mmap),
    Owned(Vec<u8>),
}

impl Bytes {
    fn as_slice(&self) -> &[u8] {
        match self {
            Bytes::Mapped(m) => m,
            Bytes::Owned(v) => v,
        }
    }
}

/// A tensor's description and its bytes, borrowed from the file.
#[derive(Clone, Copy, Debug)]
pub struct TensorView<'a> {
    pub info: &'a TensorInfo,
    pub data: &'a [u8],
}

impl GgufFile {
    /// Opens and validates `path`. Errors name the file and the field.
    pub fn open(path: impl AsRef<Path>) -> Result<GgufFile, FormatError> {
        let path = path.as_ref();
        let shown = path.display().to_string();
        let file = File::open(path).map_err(|e| FormatError::new(&shown, "", e.to_string()))?;
        // SAFETY: the map is read-only and private to this process. Like every
        // mmap-based loader we rely on the file not being truncated by another
        // process while it is mapped; nothing here writes through the map.
        let map =
            unsafe { Mmap::map(&file) }.map_err(|e| FormatError::new(&shown, "", e.to_string()))?;
        Self::from_bytes_inner(path.to_path_buf(), Bytes::Mapped(map))
    }

    /// Parses an in-memory file; `name` is used in error messages.
    pub fn from_vec(name: impl Into<PathBuf>, bytes: Vec<u8>) -> Result<GgufFile, FormatError> {
        Self::from_bytes_inner(name.into(), Bytes::Owned(bytes))
    }

    fn from_bytes_inner(path: PathBuf, bytes: Bytes) -> Result<GgufFile, FormatError> {
        let header = parse_header(bytes.as_slice(), &path.display().to_string())?;
        let by_name = header
            .tensors
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.clone(), i))
            .collect();
        Ok(GgufFile {
            path,
            bytes,
            header,
            by_name,
        })
    }

    /// The path the file was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The whole file.
    pub fn bytes(&self) -> &[u8] {
        self.bytes.as_slice()
    }

    /// Tells the OS that the bytes in `range` will not be read for a while,
    /// so that the pages wholly inside it leave this process's resident set
    /// (used once a tensor has been repacked into a copy). A later read
    /// still sees the file's bytes: the pages come back from the page
    /// cache or the disk. Does nothing for in-memory files, or if the OS
    /// declines.
    pub fn release(&self, range: std::ops::Range<usize>) {
        #[cfg(unix)]
        if let Bytes::Mapped(map) = &self.bytes {
            // madvise refuses a range that does not start on a page
            // boundary, and only whole pages can leave: x86-64 pages are
            // 4 KiB; elsewhere a multiple of every page size in use (16 KiB
            // on Apple silicon, 4, 16 or 64 KiB on arm64 Linux kernels).
            const PAGE: usize = if cfg!(target_arch = "x86_64") {
                4096
            } else {
                64 * 1024
            };
            let start = range.start.next_multiple_of(PAGE);
            let end = range.end.min(map.len()) / PAGE * PAGE;
            if start < end {
                // SAFETY: the map is a read-only shared mapping of a file
                // (`Mmap::map`), never written through. MADV_DONTNEED on
                // such a mapping only drops this process's page-table
                // entries: any later read (including through slices
                // borrowed before this call) faults the page in again with
                // the same file contents, so no reference observes a change.
                // The range lies inside the map (clamped just above).
                let _ = unsafe {
                    map.unchecked_advise_range(
                        memmap2::UncheckedAdvice::DontNeed,
                        start,
                        end - start,
                    )
                };
            }
        }
        #[cfg(not(unix))]
        let _ = range;
    }

    /// The parsed header, for the library's own tests.
    #[cfg(any(test, feature = "internals"))]
    #[doc(hidden)]
    pub fn header(&self) -> &GgufHeader {
        &self.header
    }

    /// The metadata key/values, in file order.
    pub fn metadata(&self) -> &Metadata {
        &self.header.metadata
    }

    /// The tensor named `name`, with its data.
    pub fn tensor(&self, name: &str) -> Option<TensorView<'_>> {
        let &i = self.by_name.get(name)?;
        Some(self.view(&self.header.tensors[i]))
    }

    /// Every tensor in header order, with its data.
    pub fn tensors(&self) -> impl Iterator<Item = TensorView<'_>> {
        self.header.tensors.iter().map(|t| self.view(t))
    }

    fn view<'a>(&'a self, info: &'a TensorInfo) -> TensorView<'a> {
        // The parser checked data_offset + offset + size <= file length and
        // that these fit in usize, so the range is in bounds.
        let start = (self.header.data_offset + info.offset) as usize;
        let end = start + info.size as usize;
        TensorView {
            info,
            data: &self.bytes.as_slice()[start..end],
        }
    }
}
