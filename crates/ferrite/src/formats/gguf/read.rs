//! The GGUF header parser. The input is untrusted: every count, length,
//! offset and size is checked against the bytes actually present, with
//! checked arithmetic, before anything is allocated or indexed. Nothing here
//! can panic, allocate more than a small multiple of the input's size, or
//! loop more often than the input has bytes.

use std::collections::HashSet;

use ferrite_kernels::GgmlType;

use super::value::{Array, Value, ValueType};
use super::{GgufHeader, Metadata, TensorInfo, DEFAULT_ALIGNMENT, KEY_ALIGNMENT, MAGIC};
use crate::formats::FormatError;

/// Most dimensions a tensor may have (`GGML_MAX_DIMS`).
pub const MAX_DIMS: u32 = 4;
/// Deepest nesting of arrays inside arrays that we accept.
pub const MAX_ARRAY_NESTING: usize = 8;

/// Parses and validates everything up to the data section, and checks that
/// every tensor lies inside the data section without overlapping another.
pub fn parse_header(bytes: &[u8], source: &str) -> Result<GgufHeader, FormatError> {
    let mut r = Reader {
        buf: bytes,
        pos: 0,
        source,
    };

    let magic = r.take(4, || "magic".into())?;
    if magic != MAGIC {
        return Err(r.err(
            "magic",
            format!("not a GGUF file (starts with {magic:02x?}, expected \"GGUF\")"),
        ));
    }
    let version = r.u32(|| "version".into())?;
    match version {
        2 | 3 => {}
        1 => return Err(r.err("version", "GGUF version 1 is not supported (only 2 and 3)")),
        v if v.swap_bytes() == 2 || v.swap_bytes() == 3 => {
            return Err(r.err("version", "big-endian GGUF files are not supported"))
        }
        v => {
            return Err(r.err(
                "version",
                format!("unsupported GGUF version {v} (only 2 and 3)"),
            ))
        }
    }
    let n_tensors = r.u64(|| "tensor count".into())?;
    let n_kv = r.u64(|| "metadata count".into())?;

    // Each key/value takes at least 8 (key length) + 4 (type) + 1 bytes; each
    // tensor info at least 8 (name length) + 4 (n_dims) + 8 (one dim) + 4
    // (type) + 8 (offset). Bound the counts before allocating for them.
    r.check_count(n_kv, 13, || "metadata count".into())?;
    r.check_count(n_tensors, 32, || "tensor count".into())?;

    let mut metadata = Metadata::default();
    for i in 0..n_kv {
        let key = r.string(|| format!("metadata entry {i}: key"))?;
        let ctx = |what: &str| format!("metadata key '{key}': {what}");
        let ty_id = r.u32(|| ctx("value type"))?;
        let ty = ValueType::from_id(ty_id)
            .ok_or_else(|| r.err(ctx("value type"), format!("unknown value type id {ty_id}")))?;
        let value = r.value(ty, 0, &|| ctx("value"))?;
        if !metadata.insert(key.clone(), value) {
            return Err(r.err(format!("metadata key '{key}'"), "duplicate key"));
        }
    }

    let alignment = match metadata.get(KEY_ALIGNMENT) {
        None => DEFAULT_ALIGNMENT,
        Some(Value::U32(a)) if *a != 0 && a.is_power_of_two() => u64::from(*a),
        Some(Value::U32(a)) => {
            return Err(r.err(
                format!("metadata key '{KEY_ALIGNMENT}'"),
                format!("alignment {a} is not a non-zero power of two"),
            ))
        }
        Some(v) => {
            return Err(r.err(
                format!("metadata key '{KEY_ALIGNMENT}'"),
                format!("must be a u32, found {}", v.value_type().name()),
            ))
        }
    };

    // Not preallocated from the claimed count: a TensorInfo is larger in
    // memory than its minimum encoding, so let the vector grow as infos are
    // actually read.
    let mut tensors = Vec::new();
    let mut names = HashSet::new();
    for i in 0..n_tensors {
        let name = r.string(|| format!("tensor {i}: name"))?;
        let ctx = |what: &str| format!("tensor '{name}': {what}");
        let n_dims = r.u32(|| ctx("dimension count"))?;
        if n_dims == 0 || n_dims > MAX_DIMS {
            return Err(r.err(
                ctx("dimension count"),
                format!("{n_dims} is not in 1..={MAX_DIMS}"),
            ));
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
        let mut n_elements: u64 = 1;
        for d in 0..n_dims {
            let dim = r.u64(|| ctx(&format!("dimension {d}")))?;
            if dim == 0 {
                return Err(r.err(ctx(&format!("dimension {d}")), "is zero"));
            }
            n_elements = n_elements
                .checked_mul(dim)
                .filter(|&n| n <= i64::MAX as u64)
                .ok_or_else(|| r.err(ctx("shape"), "element count overflows"))?;
            dims.push(dim);
        }
        let ty_id = r.u32(|| ctx("type"))?;
        let ty = GgmlType::from_id(ty_id)
            .ok_or_else(|| r.err(ctx("type"), format!("unknown ggml type id {ty_id}")))?;
        if dims[0] % ty.block_size() as u64 != 0 {
            return Err(r.err(
                ctx("shape"),
                format!(
                    "row length {} is not a multiple of the {} block size {}",
                    dims[0],
                    ty.name(),
                    ty.block_size()
                ),
            ));
        }
        let size = ty
            .bytes_for(n_elements)
            .ok_or_else(|| r.err(ctx("shape"), "byte size overflows"))?;
        let offset = r.u64(|| ctx("offset"))?;
        if offset % alignment != 0 {
            return Err(r.err(
                ctx("offset"),
                format!("{offset} is not a multiple of the alignment {alignment}"),
            ));
        }
        if !names.insert(name.clone()) {
            return Err(r.err(format!("tensor '{name}'"), "duplicate tensor name"));
        }
        tensors.push(TensorInfo {
            name,
            dims,
            ty,
            offset,
            size,
        });
    }

    let header_end = r.pos as u64;
    let file_len = bytes.len() as u64;
    let data_offset = header_end
        .checked_next_multiple_of(alignment)
        .ok_or_else(|| r.err("data section", "offset overflows"))?;
    if !tensors.is_empty() && data_offset > file_len {
        return Err(r.err(
            "data section",
            format!("file ends at byte {file_len}, before its data section at {data_offset}"),
        ));
    }
    let data_len = file_len.saturating_sub(data_offset);
    check_tensor_ranges(&tensors, data_len, &r)?;

    Ok(GgufHeader {
        version,
        metadata,
        tensors,
        alignment,
        data_offset,
    })
}

/// Every tensor must lie inside the data section, and no two may overlap.
fn check_tensor_ranges(
    tensors: &[TensorInfo],
    data_len: u64,
    r: &Reader,
) -> Result<(), FormatError> {
    for t in tensors {
        let end = t.offset.checked_add(t.size).filter(|&e| e <= data_len);
        if end.is_none() || usize::try_from(t.offset.saturating_add(t.size)).is_err() {
            return Err(r.err(
                format!("tensor '{}': offset", t.name),
                format!(
                    "data [{}, +{}) lies outside the data section of {} bytes",
                    t.offset, t.size, data_len
                ),
            ));
        }
    }
    let mut by_offset: Vec<&TensorInfo> = tensors.iter().collect();
    by_offset.sort_by_key(|t| (t.offset, t.size));
    for pair in by_offset.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        // Checked above: offset + size does not overflow.
        if a.offset + a.size > b.offset {
            return Err(r.err(
                format!("tensor '{}': offset", b.name),
                format!("data overlaps tensor '{}'", a.name),
            ));
        }
    }
    Ok(())
}

/// A cursor over untrusted bytes. Every read checks the remaining length.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    source: &'a str,
}

impl<'a> Reader<'a> {
    fn err(&self, field: impl Into<String>, problem: impl Into<String>) -> FormatError {
        FormatError::new(self.source, field, problem)
    }

    fn remaining(&self) -> u64 {
        (self.buf.len() - self.pos) as u64
    }

    /// Fails unless `count` items of at least `min_size` bytes each could fit
    /// in what is left of the input.
    fn check_count(
        &self,
        count: u64,
        min_size: u64,
        field: impl Fn() -> String,
    ) -> Result<(), FormatError> {
        match count.checked_mul(min_size) {
            Some(n) if n <= self.remaining() => Ok(()),
            _ => Err(self.err(
                field(),
                format!(
                    "{count} items cannot fit in the {} bytes left at byte {}",
                    self.remaining(),
                    self.pos
                ),
            )),
        }
    }

    fn take(&mut self, n: u64, field: impl Fn() -> String) -> Result<&'a [u8], FormatError> {
        if n > self.remaining() {
            return Err(self.err(
                field(),
                format!(
                    "needs {n} bytes at byte {}, but the file ends after {}",
                    self.pos,
                    self.remaining()
                ),
            ));
        }
        // n <= remaining, so the cast and the addition cannot overflow.
        let buf: &'a [u8] = self.buf;
        let start = self.pos;
        self.pos += n as usize;
        Ok(&buf[start..self.pos])
    }

    fn array<const N: usize>(
        &mut self,
        field: impl Fn() -> String,
    ) -> Result<[u8; N], FormatError> {
        let bytes = self.take(N as u64, field)?;
        let mut out = [0u8; N];
        out.copy_from_slice(bytes);
        Ok(out)
    }

    fn u32(&mut self, field: impl Fn() -> String) -> Result<u32, FormatError> {
        self.array(field).map(u32::from_le_bytes)
    }

    fn u64(&mut self, field: impl Fn() -> String) -> Result<u64, FormatError> {
        self.array(field).map(u64::from_le_bytes)
    }

    fn string(&mut self, field: impl Fn() -> String) -> Result<String, FormatError> {
        let len = self.u64(|| format!("{}: string length", field()))?;
        let pos = self.pos;
        let bytes = self.take(len, || format!("{}: string of {len} bytes", field()))?;
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(s.to_owned()),
            Err(e) => Err(self.err(
                field(),
                format!("string at byte {pos} is not valid UTF-8 ({e})"),
            )),
        }
    }

    fn bool(&mut self, field: impl Fn() -> String) -> Result<bool, FormatError> {
        match self.array::<1>(&field)?[0] {
            0 => Ok(false),
            1 => Ok(true),
            b => Err(self.err(field(), format!("bool byte is {b}, not 0 or 1"))),
        }
    }

    fn value(
        &mut self,
        ty: ValueType,
        depth: usize,
        field: &dyn Fn() -> String,
    ) -> Result<Value, FormatError> {
        Ok(match ty {
            ValueType::U8 => Value::U8(u8::from_le_bytes(self.array(field)?)),
            ValueType::I8 => Value::I8(i8::from_le_bytes(self.array(field)?)),
            ValueType::U16 => Value::U16(u16::from_le_bytes(self.array(field)?)),
            ValueType::I16 => Value::I16(i16::from_le_bytes(self.array(field)?)),
            ValueType::U32 => Value::U32(u32::from_le_bytes(self.array(field)?)),
            ValueType::I32 => Value::I32(i32::from_le_bytes(self.array(field)?)),
            ValueType::F32 => Value::F32(f32::from_le_bytes(self.array(field)?)),
            ValueType::Bool => Value::Bool(self.bool(field)?),
            ValueType::String => Value::String(self.string(field)?),
            ValueType::Array => Value::Array(self.array_value(depth, field)?),
            ValueType::U64 => Value::U64(u64::from_le_bytes(self.array(field)?)),
            ValueType::I64 => Value::I64(i64::from_le_bytes(self.array(field)?)),
            ValueType::F64 => Value::F64(f64::from_le_bytes(self.array(field)?)),
        })
    }

    /// An array: element type, count, then the elements.
    fn array_value(
        &mut self,
        depth: usize,
        field: &dyn Fn() -> String,
    ) -> Result<Array, FormatError> {
        if depth >= MAX_ARRAY_NESTING {
            return Err(self.err(
                field(),
                format!("arrays nested deeper than {MAX_ARRAY_NESTING}"),
            ));
        }
        let ty_id = self.u32(|| format!("{}: array element type", field()))?;
        let ty = ValueType::from_id(ty_id)
            .ok_or_else(|| self.err(field(), format!("unknown array element type id {ty_id}")))?;
        let n = self.u64(|| format!("{}: array length", field()))?;
        self.check_count(n, ty.min_encoded_size(), || {
            format!("{}: array length", field())
        })?;
        // n * min_size <= remaining, so n fits in usize. Numbers take as many
        // bytes in memory as in the file, so their vectors are preallocated;
        // strings and nested arrays are larger in memory than their minimum
        // encoding, so those vectors grow as elements are actually read.
        let n = n as usize;
        let elem = |i: usize| move || format!("{}: element {i}", field());
        macro_rules! fixed {
            ($variant:ident, $t:ty) => {{
                let mut v = Vec::with_capacity(n);
                for i in 0..n {
                    v.push(<$t>::from_le_bytes(self.array(elem(i))?));
                }
                Array::$variant(v)
            }};
        }
        Ok(match ty {
            ValueType::U8 => fixed!(U8, u8),
            ValueType::I8 => fixed!(I8, i8),
            ValueType::U16 => fixed!(U16, u16),
            ValueType::I16 => fixed!(I16, i16),
            ValueType::U32 => fixed!(U32, u32),
            ValueType::I32 => fixed!(I32, i32),
            ValueType::F32 => fixed!(F32, f32),
            ValueType::U64 => fixed!(U64, u64),
            ValueType::I64 => fixed!(I64, i64),
            ValueType::F64 => fixed!(F64, f64),
            ValueType::Bool => {
                let mut v = Vec::with_capacity(n);
                for i in 0..n {
                    v.push(self.bool(elem(i))?);
                }
                Array::Bool(v)
            }
            ValueType::String => {
                let mut v = Vec::new();
                for i in 0..n {
                    v.push(self.string(elem(i))?);
                }
                Array::String(v)
            }
            ValueType::Array => {
                let mut v = Vec::new();
                for i in 0..n {
                    v.push(self.array_value(depth + 1, &elem(i))?);
                }
                Array::Array(v)
            }
        })
    }
}
