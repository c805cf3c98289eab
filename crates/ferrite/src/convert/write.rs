//! The tensors of a converted file: their types (as the converter's
//! `prepare_tensors` chooses them) and their bytes, streamed from the
//! mapped input one tensor (or one expert's matrix) at a time.

use std::collections::BTreeMap;
use std::io::Write;

use ferrite_kernels::quant::{dequantize, quantize};
use ferrite_kernels::GgmlType;

use super::{Decoder, OutType};
use crate::formats::gguf::{write_gguf_header, Metadata, TensorHeader};
use crate::formats::hf_decoder::{self, Reshape};
use crate::formats::safetensors::{SafetensorsDir, StTensorInfo};
use crate::Error;

/// One tensor of the output: where it comes from and what it becomes.
pub(super) struct Planned<'a> {
    pub(super) name: String,
    /// ggml order.
    pub(super) dims: Vec<u64>,
    pub(super) to: GgmlType,
    pub(super) from: Source<'a>,
}

pub(super) enum Source<'a> {
    /// A tensor of the input, reshaped; with `Some(n)`, its first `n` rows.
    St(&'a StTensorInfo, Reshape, Option<usize>),
    /// The experts' matrices of one layer and projection, stacked.
    Experts(Vec<&'a StTensorInfo>),
    /// Output `n` of the family's own conversion of an input tensor
    /// (`hf_decoder::SpecialTensors`: gpt-oss's split experts).
    Special(&'a StTensorInfo, usize),
    /// Values the converter makes up.
    Values(Vec<f32>),
}

/// Tensors the converter keeps in F32 whatever the out type (besides
/// vectors and norms): the routers, positions and token types.
const ALWAYS_F32: [&str; 4] = [
    ".ffn_gate_inp.weight",
    ".ffn_gate_inp_shexp.weight",
    "position_embd.weight",
    "token_types.weight",
];

/// The converter's type for a tensor (`prepare_tensors`).
pub(super) fn tensor_type(name: &str, dims: &[u64], out: OutType) -> GgmlType {
    if dims.len() <= 1
        || name.ends_with("_norm.weight")
        || !name.ends_with(".weight")
        || ALWAYS_F32
            .iter()
            .any(|s| name.ends_with(s) && (s.starts_with('.') || name == *s))
    {
        return GgmlType::F32;
    }
    let t = out.ggml();
    if t == GgmlType::Q8_0 && !dims[0].is_multiple_of(32) {
        return GgmlType::F16;
    }
    t
}

/// Per-expert matrices collected until a layer has them all; then stacked
/// as the converter stacks them (`down`, `gate`, `up`, each `[cols, rows,
/// experts]`), where the last of them comes.
pub(super) struct Experts<'a> {
    n: u64,
    /// Stacked name -> each expert's tensor.
    groups: BTreeMap<String, Vec<Option<&'a StTensorInfo>>>,
    /// Layer prefix (`blk.N.`) -> expert tensors seen.
    seen: BTreeMap<String, u64>,
}

/// A stacked tensor: name, ggml dims, the experts' tensors in order.
type Stacked<'a> = (String, Vec<u64>, Vec<&'a StTensorInfo>);

impl<'a> Experts<'a> {
    pub(super) fn new(n: Option<u64>) -> Experts<'a> {
        Experts {
            n: n.unwrap_or(0),
            groups: BTreeMap::new(),
            seen: BTreeMap::new(),
        }
    }

    /// Takes `info` if `name` is an expert's matrix; returns the layer's
    /// stacked tensors once it has them all.
    pub(super) fn add(
        &mut self,
        name: &str,
        info: &'a StTensorInfo,
        source: &str,
    ) -> Result<Option<Vec<Stacked<'a>>>, Error> {
        let Some((stacked, e)) = hf_decoder::expert_of(name) else {
            return Ok(None);
        };
        let n = self.n as usize;
        let bad = |problem: String| Error::model(source, format!("{stacked}: {problem}"));
        let slots = self
            .groups
            .entry(stacked.to_string())
            .or_insert_with(|| vec![None; n]);
        match slots.get_mut(e) {
            Some(slot @ None) => *slot = Some(info),
            Some(Some(_)) => return Err(bad(format!("expert {e} appears twice"))),
            None => {
                return Err(bad(format!(
                    "expert {e} is not one of the {n} experts in config.json"
                )))
            }
        }
        let layer = stacked.split_inclusive('.').take(2).collect::<String>();
        let seen = self.seen.entry(layer.clone()).or_insert(0);
        *seen += 1;
        if *seen < 3 * self.n {
            return Ok(Some(Vec::new()));
        }
        let mut out = Vec::with_capacity(3);
        for proj in ["ffn_down_exps", "ffn_gate_exps", "ffn_up_exps"] {
            let key = format!("{layer}{proj}.weight");
            let parts: Vec<&StTensorInfo> = match self.groups.remove(&key) {
                Some(slots) if slots.iter().all(Option::is_some) => {
                    slots.into_iter().flatten().collect()
                }
                _ => {
                    return Err(Error::model(
                        source,
                        format!("{key}: not every one of the {n} experts has this matrix"),
                    ))
                }
            };
            let first = parts[0];
            if let Some(p) = parts
                .iter()
                .find(|p| p.shape != first.shape || p.ty != first.ty)
            {
                return Err(Error::model(
                    source,
                    format!(
                        "{key}: {} has shape {:?} {}, {} {:?} {}",
                        p.name, p.shape, p.dtype, first.name, first.shape, first.dtype
                    ),
                ));
            }
            let mut dims: Vec<u64> = first.shape.iter().rev().map(|&d| d as u64).collect();
            dims.push(self.n);
            out.push((key, dims, parts));
        }
        Ok(Some(out))
    }

    /// Fails if a layer's experts are incomplete.
    pub(super) fn finish(&self, source: &str) -> Result<(), Error> {
        match self.groups.keys().next() {
            Some(k) => Err(Error::model(
                source,
                format!(
                    "{k}: not every one of the {} experts has this matrix",
                    self.n
                ),
            )),
            None => Ok(()),
        }
    }
}

/// The header, then each tensor streamed from the input.
pub(super) fn write_tensors<W: Write>(
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
    // One input tensor's bytes, streamed as `p`.
    let stream =
        |info: &StTensorInfo, reshape: Reshape, rows: Option<usize>, p: &Planned, w: &mut W| {
            let src = st.shard_path(info).display().to_string();
            let (data, ty) = match decoder {
                Some((_, _, hp)) => {
                    let o = hf_decoder::convert(st, info, p.name.clone(), reshape, hp, &src)?;
                    (o.data, o.ty)
                }
                None => {
                    let (data, ty) = hf_decoder::checked_data(st, info, &src)?;
                    (std::borrow::Cow::Borrowed(data), ty)
                }
            };
            let data = match rows {
                Some(n) => {
                    let row = ty.bytes_for(p.dims[0]).unwrap_or(0) as usize;
                    &data[..(n * row).min(data.len())]
                }
                None => &data[..],
            };
            stream_rows(data, ty, p, w).map_err(|e| e.at(shown))
        };
    for p in planned {
        let written = match &p.from {
            Source::Values(v) => {
                let bytes = encode(v, p)?;
                w.write_all(&bytes).map_err(io)?;
                bytes.len()
            }
            Source::St(info, reshape, rows) => stream(info, *reshape, *rows, p, w)?,
            Source::Special(info, n) => {
                let src = st.shard_path(info).display().to_string();
                let out = match decoder {
                    Some((_, family, hp)) => match family.special() {
                        Some(special) => special(st, info, hp, &src)?
                            .and_then(|mut outs| (*n < outs.len()).then(|| outs.swap_remove(*n))),
                        None => None,
                    },
                    None => None,
                };
                let out = out.ok_or_else(|| {
                    Error::Internal(format!("tensor {}: no longer converted", p.name))
                })?;
                stream_rows(&out.data, out.ty, p, w).map_err(|e| e.at(shown))?
            }
            Source::Experts(parts) => {
                let mut n = 0;
                for info in parts {
                    n += stream(info, Reshape::None, None, p, w)?;
                }
                n
            }
        };
        let pad = (written as u64).next_multiple_of(alignment) - written as u64;
        w.write_all(&vec![0u8; pad as usize]).map_err(io)?;
    }
    w.flush().map_err(io)?;
    Ok(())
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
