//! `ferrite quantize`: a GGUF file to another block format, the way
//! `llama-quantize` does it (without an importance matrix), byte for byte.
//!
//! [`mix::choose_types`] picks each tensor's type as llama.cpp would for the
//! file type; the tensors are written in llama.cpp's order, each converted
//! row by row with the reference quantizers of `ferrite_kernels::quant`
//! (threads take chunks of rows; a row's bytes do not depend on which
//! thread makes them). The metadata is copied with
//! `general.quantization_version` and `general.file_type` set last, as
//! llama.cpp sets them. The output is written to a temporary file next to
//! it and renamed into place at the end, so a failed run never leaves a
//! partial output behind.

pub mod mix;

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use ferrite_kernels::quant::{dequantize, quantize};
use ferrite_kernels::GgmlType;

use crate::formats::gguf::{
    write_gguf_header, write_tensor_data, GgufFile, Metadata, TensorHeader, Value,
};
use crate::temp_output::TempOutput;
use crate::Error;

pub use mix::{FileType, FILE_TYPES};

/// `GGML_QNT_VERSION`, written as `general.quantization_version`.
pub const QUANTIZATION_VERSION: u32 = 2;

/// How to quantize.
#[derive(Clone, Debug)]
pub struct QuantizeOptions {
    pub ftype: FileType,
    /// Every quantizable tensor to the file type's default type (only the
    /// fallbacks for rows that are not whole blocks still apply), as
    /// `llama-quantize --pure`.
    pub pure: bool,
    /// Quantize tensors that are already quantized (dequantized first;
    /// quality suffers). Without it such an input is refused, as
    /// `llama-quantize` refuses it without `--allow-requantize`.
    pub allow_requantize: bool,
    /// Worker threads (at least 1).
    pub threads: usize,
}

/// One tensor of the plan: where it comes from and what it becomes.
#[derive(Clone, Debug)]
pub struct PlannedTensor {
    pub name: String,
    /// As written: trailing dims of 1 dropped, as ggml writes them.
    pub dims: Vec<u64>,
    pub from: GgmlType,
    pub to: GgmlType,
}

/// What was done, for the command's report.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    pub tensors: usize,
    pub converted: usize,
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// Tensors that were already quantized and were requantized.
    pub requantized: usize,
}

/// Progress reports: `(tensors done, tensor count, name of the last one)`.
pub type Progress<'a> = &'a mut dyn FnMut(usize, usize, &str);

/// The tensors of `file` in output order with their new types.
pub fn plan(file: &GgufFile, opts: &QuantizeOptions) -> Result<Vec<PlannedTensor>, Error> {
    let h = &file.header;
    let shown = file.path().display().to_string();
    let types = mix::choose_types(h, opts.ftype, opts.pure)
        .map_err(|e| Error::model(&shown, e.to_string()))?;
    let mut out = Vec::with_capacity(h.tensors.len());
    for i in mix::llama_order(&h.tensors) {
        let t = &h.tensors[i];
        let to = types[i];
        if to != t.ty {
            if mix::is_quantized(t.ty) && !opts.allow_requantize {
                return Err(Error::Input(format!(
                    "{shown}: tensor {} is already quantized ({}); requantizing loses quality, \
                     pass --allow-requantize to do it anyway (or start from an F32/F16/BF16 file)",
                    t.name, t.ty
                )));
            }
            if !t.ty.can_dequantize() {
                return Err(Error::model(
                    &shown,
                    format!("tensor {}: cannot convert from {}", t.name, t.ty),
                ));
            }
            if !to.can_quantize() {
                return Err(Error::Internal(format!(
                    "tensor {}: no quantizer for {to}",
                    t.name
                )));
            }
        }
        let dims = t.dims[..mix::n_dims(&t.dims)].to_vec();
        out.push(PlannedTensor {
            name: t.name.clone(),
            dims,
            from: t.ty,
            to,
        });
    }
    Ok(out)
}

/// The output metadata: the input's, in its order, without the split keys,
/// then `general.quantization_version` and `general.file_type` (llama.cpp
/// removes and re-appends both).
fn output_metadata(input: &Metadata, ftype: FileType) -> Metadata {
    const DROPPED: [&str; 5] = [
        "general.quantization_version",
        "general.file_type",
        "split.no",
        "split.count",
        "split.tensors.count",
    ];
    let mut md = Metadata::default();
    for (k, v) in input.iter() {
        if !DROPPED.contains(&k) {
            md.insert(k.to_string(), v.clone());
        }
    }
    md.insert(
        "general.quantization_version".into(),
        Value::U32(QUANTIZATION_VERSION),
    );
    md.insert("general.file_type".into(), Value::U32(ftype.id));
    md
}

/// `p` made absolute with its links resolved; for a file that does not
/// exist yet, its directory's canonical path joined with its name.
pub(crate) fn canonical_target(p: &Path) -> Option<PathBuf> {
    if let Ok(c) = p.canonicalize() {
        return Some(c);
    }
    let parent = p.parent().filter(|d| !d.as_os_str().is_empty());
    let dir = parent.map_or_else(|| Path::new(".").canonicalize(), |d| d.canonicalize());
    Some(dir.ok()?.join(p.file_name()?))
}

/// Whether `a` and `b` name the same file (`b` need not exist).
fn same_file(a: &Path, b: &Path) -> bool {
    match (canonical_target(a), canonical_target(b)) {
        (Some(x), Some(y)) => x == y,
        _ => false,
    }
}

/// Quantizes the GGUF file `input` into `output` (see the module doc).
pub fn quantize_file(
    input: &Path,
    output: &Path,
    opts: &QuantizeOptions,
    progress: Progress,
) -> Result<Summary, Error> {
    if same_file(input, output) {
        return Err(Error::Input(format!(
            "the output {} is the input file; write the quantized model to another path",
            output.display()
        )));
    }
    let file = GgufFile::open(input)?;
    let shown = output.display().to_string();
    let tmp = TempOutput::beside(output, "quantize")?;
    let out_file = File::create(&tmp.path).map_err(|e| Error::io(&shown, e))?;
    let mut w = BufWriter::with_capacity(1 << 22, out_file);
    let summary = quantize_to(&file, &mut w, opts, &shown, progress)?;
    let io_err = |e: std::io::Error| Error::io(&shown, e);
    let out_file = w.into_inner().map_err(|e| io_err(e.into_error()))?;
    out_file.sync_all().map_err(io_err)?;
    drop(out_file);
    tmp.commit(output)?;
    Ok(summary)
}

/// Quantizes the GGUF `file` into `w` (see the module doc); `shown` names
/// the output in errors.
pub fn quantize_to<W: Write>(
    file: &GgufFile,
    w: &mut W,
    opts: &QuantizeOptions,
    shown: &str,
    progress: Progress,
) -> Result<Summary, Error> {
    let planned = plan(file, opts)?;
    let md = output_metadata(file.metadata(), opts.ftype);
    let io_err = |e: std::io::Error| Error::io(shown, e);
    let headers: Vec<TensorHeader> = planned
        .iter()
        .map(|p| TensorHeader {
            name: &p.name,
            dims: &p.dims,
            ty: p.to,
        })
        .collect();
    let alignment = write_gguf_header(w, 3, &md, &headers).map_err(io_err)?;

    let mut summary = Summary {
        tensors: planned.len(),
        ..Summary::default()
    };
    let threads = opts.threads.max(1);
    for (done, p) in planned.iter().enumerate() {
        let view = file
            .tensor(&p.name)
            .ok_or_else(|| Error::Internal(format!("tensor {} vanished", p.name)))?;
        summary.bytes_in += view.data.len() as u64;
        if p.to == p.from {
            write_tensor_data(w, view.data, alignment).map_err(io_err)?;
            summary.bytes_out += view.data.len() as u64;
        } else {
            let converted = convert_rows(view.data, p, threads)?;
            write_tensor_data(w, &converted, alignment).map_err(io_err)?;
            summary.bytes_out += converted.len() as u64;
            summary.converted += 1;
            if mix::is_quantized(p.from) {
                summary.requantized += 1;
            }
        }
        let start = view.data.as_ptr() as usize - file.bytes().as_ptr() as usize;
        file.release(start..start + view.data.len());
        progress(done + 1, planned.len(), &p.name);
    }
    w.flush().map_err(io_err)?;
    Ok(summary)
}

/// Values per chunk of rows a thread takes at a time (as llama.cpp's
/// minimum chunk).
const CHUNK_VALUES: usize = 32 * 512;

/// Converts one tensor's rows from `p.from` to `p.to` on `threads` threads.
fn convert_rows(src: &[u8], p: &PlannedTensor, threads: usize) -> Result<Vec<u8>, Error> {
    let n_per_row = p.dims[0] as usize;
    let n: u64 = p.dims.iter().product();
    let rows = (n / p.dims[0]) as usize;
    let (Some(row_in), Some(row_out)) = (
        p.from.bytes_for(n_per_row as u64),
        p.to.bytes_for(n_per_row as u64),
    ) else {
        return Err(Error::Internal(format!(
            "tensor {}: rows of {n_per_row} are not whole blocks",
            p.name
        )));
    };
    let (row_in, row_out) = (row_in as usize, row_out as usize);
    let mut out = vec![0u8; row_out * rows];
    let rows_per_chunk = CHUNK_VALUES.div_ceil(n_per_row).max(1);
    let chunks = Mutex::new(
        src.chunks(row_in * rows_per_chunk)
            .zip(out.chunks_mut(row_out * rows_per_chunk)),
    );
    let failure: Mutex<Option<String>> = Mutex::new(None);
    let work = || {
        let mut f32s = vec![0f32; n_per_row];
        loop {
            let next = chunks.lock().unwrap_or_else(|e| e.into_inner()).next();
            let Some((src, dst)) = next else { break };
            for (r_in, r_out) in src.chunks(row_in).zip(dst.chunks_mut(row_out)) {
                let r =
                    dequantize(p.from, r_in, &mut f32s).and_then(|()| quantize(p.to, &f32s, r_out));
                if let Err(e) = r {
                    *failure.lock().unwrap_or_else(|e| e.into_inner()) = Some(e.to_string());
                    return;
                }
            }
        }
    };
    let n_threads = threads.min(rows.div_ceil(rows_per_chunk)).max(1);
    std::thread::scope(|s| {
        for _ in 1..n_threads {
            s.spawn(work);
        }
        work();
    });
    if let Some(e) = failure.into_inner().unwrap_or_else(|e| e.into_inner()) {
        return Err(Error::Internal(format!("tensor {}: {e}", p.name)));
    }
    Ok(out)
}
