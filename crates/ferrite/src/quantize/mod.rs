//! `ferrite quantize`: a GGUF file to another block format, the way
//! `llama-quantize` does it (without an importance matrix), byte for byte.
//!
//! [`mix::choose_types`] picks each tensor's type as llama.cpp would for the
//! file type; the tensors are written in llama.cpp's order, each converted
//! row by row with the reference quantizers of `ferrite_kernels::quant`
//! (`pieces`: every thread takes runs of rows of any tensor and writes
//! them in place; a row's bytes do not depend on which thread makes them).
//! The metadata is copied with
//! `general.quantization_version` and `general.file_type` set last, as
//! llama.cpp sets them. The output is written to a temporary file next to
//! it and renamed into place at the end, so a failed run never leaves a
//! partial output behind.

pub mod file_type;
pub mod mix;
mod pieces;

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use ferrite_kernels::GgmlType;

use crate::formats::gguf::{write_gguf_header, GgufFile, Metadata, TensorHeader, Value};
use crate::temp_output::TempOutput;
use crate::Error;
use pieces::Sink;

pub use file_type::{FileType, FILE_TYPES};

/// `GGML_QNT_VERSION`, written as `general.quantization_version`.
pub const QUANTIZATION_VERSION: u32 = 2;

/// How to quantize.
#[derive(Clone, Debug)]
pub struct QuantizeOptions {
    /// The file type to write.
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
    let io_err = |e: std::io::Error| Error::io(&shown, e);
    let planned = plan(&file, opts)?;
    let (head, alignment) = header(&file, &planned, opts, &shown)?;
    let tmp = TempOutput::beside(output, "quantize")?;
    let mut out_file = File::create(&tmp.path).map_err(io_err)?;
    out_file.write_all(&head).map_err(io_err)?;
    pieces::write_data(
        &file,
        &planned,
        alignment,
        Sink::File {
            file: &out_file,
            data_start: head.len() as u64,
        },
        opts.threads,
        &shown,
        progress,
    )?;
    out_file.sync_all().map_err(io_err)?;
    drop(out_file);
    tmp.commit(output)?;
    Ok(summary(&planned))
}

/// Quantizes the GGUF `file` into a new in-memory file (see the module
/// doc); `shown` names the output in errors.
pub fn quantize_to_vec(
    file: &GgufFile,
    opts: &QuantizeOptions,
    shown: &str,
    progress: Progress,
) -> Result<Vec<u8>, Error> {
    let planned = plan(file, opts)?;
    let (mut out, alignment) = header(file, &planned, opts, shown)?;
    let start = out.len();
    let data: u64 = planned
        .iter()
        .map(|p| {
            let n: u64 = p.dims.iter().product();
            p.to.bytes_for(n).unwrap_or(0).next_multiple_of(alignment)
        })
        .sum();
    out.resize(start + data as usize, 0);
    pieces::write_data(
        file,
        &planned,
        alignment,
        Sink::Memory(&mut out[start..]),
        opts.threads,
        shown,
        progress,
    )?;
    Ok(out)
}

/// The output's header (metadata, tensor infos, padding) and alignment.
fn header(
    file: &GgufFile,
    planned: &[PlannedTensor],
    opts: &QuantizeOptions,
    shown: &str,
) -> Result<(Vec<u8>, u64), Error> {
    let md = output_metadata(file.metadata(), opts.ftype);
    let headers: Vec<TensorHeader> = planned
        .iter()
        .map(|p| TensorHeader {
            name: &p.name,
            dims: &p.dims,
            ty: p.to,
        })
        .collect();
    let mut head = Vec::new();
    let alignment =
        write_gguf_header(&mut head, 3, &md, &headers).map_err(|e| Error::io(shown, e))?;
    Ok((head, alignment))
}

/// What quantizing `file` as `planned` does.
fn summary(planned: &[PlannedTensor]) -> Summary {
    let mut s = Summary {
        tensors: planned.len(),
        ..Summary::default()
    };
    for p in planned {
        let n: u64 = p.dims.iter().product();
        s.bytes_in += p.from.bytes_for(n).unwrap_or(0);
        s.bytes_out += p.to.bytes_for(n).unwrap_or(0);
        if p.to != p.from {
            s.converted += 1;
            if mix::is_quantized(p.from) {
                s.requantized += 1;
            }
        }
    }
    s
}
