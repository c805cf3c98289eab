//! The GGUF writer (versions 2 and 3, little-endian).
//!
//! Layout, as llama.cpp's `gguf_write_to_buf` and the `gguf` Python package
//! produce it: header, metadata in the order given, tensor infos in the order
//! given with offsets assigned sequentially, zero padding to the alignment,
//! then each tensor's data followed by zero padding to the alignment.

use std::io::{self, Write};

use ferrite_kernels::GgmlType;

use super::value::{Array, Value};
use super::{Metadata, DEFAULT_ALIGNMENT, KEY_ALIGNMENT, MAGIC};

/// A tensor to write: its description and its bytes (already in `ty`'s
/// block format).
pub struct TensorToWrite<'a> {
    pub name: &'a str,
    /// ggml order: `dims[0]` is the row length.
    pub dims: &'a [u64],
    pub ty: GgmlType,
    pub data: &'a [u8],
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

/// A tensor's entry in the header: its name, dims and type (the data size
/// follows from them).
#[derive(Clone, Copy, Debug)]
pub struct TensorHeader<'a> {
    pub name: &'a str,
    /// ggml order: `dims[0]` is the row length.
    pub dims: &'a [u64],
    pub ty: GgmlType,
}

/// Writes a complete GGUF file of `version` 2 or 3 (their little-endian
/// layouts are the same). The alignment comes from
/// `general.alignment` in `metadata` if present (it must be a u32 power of
/// two), else 32. Each tensor's data length must match its dims and type.
pub fn write_gguf<W: Write>(
    out: &mut W,
    version: u32,
    metadata: &Metadata,
    tensors: &[TensorToWrite],
) -> io::Result<()> {
    for t in tensors {
        let n: u64 = t.dims.iter().product();
        if t.ty.bytes_for(n) != Some(t.data.len() as u64) {
            return Err(invalid(format!(
                "tensor '{}': {} bytes of data for {} values of {}",
                t.name,
                t.data.len(),
                n,
                t.ty
            )));
        }
    }
    let headers: Vec<TensorHeader> = tensors
        .iter()
        .map(|t| TensorHeader {
            name: t.name,
            dims: t.dims,
            ty: t.ty,
        })
        .collect();
    let alignment = write_gguf_header(out, version, metadata, &headers)?;
    for t in tensors {
        write_tensor_data(out, t.data, alignment)?;
    }
    Ok(())
}

/// Writes everything of a GGUF file up to the tensor data (header,
/// metadata, tensor infos with sequential offsets, padding), for a writer
/// that then streams each tensor's data, in the same order, with
/// [`write_tensor_data`]. Returns the alignment (see [`write_gguf`]).
pub fn write_gguf_header<W: Write>(
    out: &mut W,
    version: u32,
    metadata: &Metadata,
    tensors: &[TensorHeader],
) -> io::Result<u64> {
    if version != 2 && version != 3 {
        return Err(invalid(format!("cannot write GGUF version {version}")));
    }
    let alignment = match metadata.get(KEY_ALIGNMENT) {
        None => DEFAULT_ALIGNMENT,
        Some(Value::U32(a)) if a.is_power_of_two() => u64::from(*a),
        Some(v) => return Err(invalid(format!("bad {KEY_ALIGNMENT}: {v}"))),
    };
    let mut sizes = Vec::with_capacity(tensors.len());
    for t in tensors {
        let n = t.dims.iter().try_fold(1u64, |a, &d| a.checked_mul(d));
        match n.and_then(|n| t.ty.bytes_for(n)) {
            Some(size) => sizes.push(size),
            None => {
                return Err(invalid(format!(
                    "tensor '{}': dims {:?} are not whole {} blocks",
                    t.name, t.dims, t.ty
                )))
            }
        }
    }

    let mut w = Counting {
        inner: out,
        written: 0,
    };
    w.write_all(&MAGIC)?;
    w.write_all(&version.to_le_bytes())?;
    w.write_all(&(tensors.len() as u64).to_le_bytes())?;
    w.write_all(&(metadata.len() as u64).to_le_bytes())?;
    for (key, value) in metadata.iter() {
        write_string(&mut w, key)?;
        w.write_all(&(value.value_type() as u32).to_le_bytes())?;
        write_value(&mut w, value)?;
    }
    let mut offset = 0u64;
    for (t, size) in tensors.iter().zip(sizes) {
        write_string(&mut w, t.name)?;
        w.write_all(&(t.dims.len() as u32).to_le_bytes())?;
        for d in t.dims {
            w.write_all(&d.to_le_bytes())?;
        }
        w.write_all(&t.ty.id().to_le_bytes())?;
        w.write_all(&offset.to_le_bytes())?;
        offset = (offset + size).next_multiple_of(alignment);
    }
    pad(&mut w, alignment)?;
    Ok(alignment)
}

/// Writes one tensor's data and the zero padding after it (the data
/// section starts aligned, so each tensor's padding depends only on its
/// own length).
pub fn write_tensor_data<W: Write>(out: &mut W, data: &[u8], alignment: u64) -> io::Result<()> {
    let mut w = Counting {
        inner: out,
        written: 0,
    };
    w.write_all(data)?;
    pad(&mut w, alignment)
}

/// A writer that counts bytes, for padding.
struct Counting<'a, W: Write> {
    inner: &'a mut W,
    written: u64,
}

impl<W: Write> Write for Counting<'_, W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.written += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

fn pad<W: Write>(w: &mut Counting<W>, alignment: u64) -> io::Result<()> {
    let n = w.written.next_multiple_of(alignment) - w.written;
    w.write_all(&vec![0u8; n as usize])
}

fn write_string<W: Write>(w: &mut W, s: &str) -> io::Result<()> {
    w.write_all(&(s.len() as u64).to_le_bytes())?;
    w.write_all(s.as_bytes())
}

fn write_value<W: Write>(w: &mut W, v: &Value) -> io::Result<()> {
    match v {
        Value::U8(x) => w.write_all(&x.to_le_bytes()),
        Value::I8(x) => w.write_all(&x.to_le_bytes()),
        Value::U16(x) => w.write_all(&x.to_le_bytes()),
        Value::I16(x) => w.write_all(&x.to_le_bytes()),
        Value::U32(x) => w.write_all(&x.to_le_bytes()),
        Value::I32(x) => w.write_all(&x.to_le_bytes()),
        Value::F32(x) => w.write_all(&x.to_le_bytes()),
        Value::Bool(x) => w.write_all(&[u8::from(*x)]),
        Value::String(s) => write_string(w, s),
        Value::Array(a) => write_array(w, a),
        Value::U64(x) => w.write_all(&x.to_le_bytes()),
        Value::I64(x) => w.write_all(&x.to_le_bytes()),
        Value::F64(x) => w.write_all(&x.to_le_bytes()),
    }
}

fn write_array<W: Write>(w: &mut W, a: &Array) -> io::Result<()> {
    w.write_all(&(a.element_type() as u32).to_le_bytes())?;
    w.write_all(&(a.len() as u64).to_le_bytes())?;
    macro_rules! each {
        ($v:expr) => {{
            for x in $v {
                w.write_all(&x.to_le_bytes())?;
            }
            Ok(())
        }};
    }
    match a {
        Array::U8(v) => w.write_all(v),
        Array::I8(v) => each!(v),
        Array::U16(v) => each!(v),
        Array::I16(v) => each!(v),
        Array::U32(v) => each!(v),
        Array::I32(v) => each!(v),
        Array::F32(v) => each!(v),
        Array::U64(v) => each!(v),
        Array::I64(v) => each!(v),
        Array::F64(v) => each!(v),
        Array::Bool(v) => {
            let bytes: Vec<u8> = v.iter().map(|&b| u8::from(b)).collect();
            w.write_all(&bytes)
        }
        Array::String(v) => v.iter().try_for_each(|s| write_string(w, s)),
        Array::Array(v) => v.iter().try_for_each(|x| write_array(w, x)),
    }
}
