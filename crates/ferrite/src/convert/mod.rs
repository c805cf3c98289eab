//! `ferrite convert`: a Hugging Face directory to the GGUF file llama.cpp's
//! `convert_hf_to_gguf.py` writes for it, byte for byte (see
//! `tests/convert.rs` for what is checked against it).
//!
//! - Tensors in the converter's order (shards by name, each shard's
//!   tensors by name, made-up tensors such as Llama 3's `rope_freqs`
//!   first), renamed and reshaped by `formats::hf_decoder` (the HF classes
//!   and the converter's keys per GGUF architecture are the family's
//!   `models::registry` entry, an encoder's its `models::ENCODERS` entry),
//!   typed as the converter types them: vectors, norms
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
//!   transposes) and a row buffer. A family's own split tensors
//!   (gpt-oss's fused `gate_up_proj`, made into gate and up) are made
//!   once to plan the header and again, per output, when written. The output is written to a temporary
//!   file beside it and renamed at the end; on any error nothing is left.
//! - Other out types (`Q4_K_M`, ...): the f32 conversion into a temporary
//!   file, then `crate::quantize` as `llama-quantize` would quantize it.

pub(crate) mod bert;
pub(crate) mod families;
mod json;
pub(crate) mod keys;
mod meta;
mod model_id;
mod special;
pub(crate) mod vocab;
mod write;

use std::io::{BufWriter, Write};
use std::path::Path;

use ferrite_kernels::GgmlType;
use serde_json::Value as Json;

use crate::formats::gguf::{Metadata, Value};
use crate::formats::hf_decoder::{self, Reshape};
use crate::formats::safetensors::{SafetensorsDir, StTensorInfo};
use crate::models::{registry, EncoderConvert};
use crate::quantize::{
    canonical_target, quantize_file, FileType, QuantizeOptions, QUANTIZATION_VERSION,
};
use crate::temp_output::TempOutput;
use crate::Error;

use families::ConvertSpec;
use keys::Ctx;
use write::{tensor_type, write_tensors, Planned, Source};

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

/// What `ferrite convert` writes and how.
#[derive(Clone, Debug)]
pub struct ConvertOptions {
    /// The output type: the converter's own (`f32`, `q8_0`, ...) or a quantized file type.
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
/// Whether `out` is the directory `dir` or lies inside it.
fn same_or_inside(dir: &Path, out: &Path) -> bool {
    match (canonical_target(dir), canonical_target(out)) {
        (Some(d), Some(o)) => o == d || o.starts_with(&d),
        _ => false,
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
            let tmp = TempOutput::beside(out, "convert")?;
            let summary = write_converted(dir, &tmp.path, out, t, opts)?;
            tmp.commit(out)?;
            Ok(summary)
        }
        Target::Quantized(ftype) => {
            let f32_tmp = TempOutput::beside(out, "f32")?;
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
    let out = crate::quantize::quantize_to_vec(&f32_file, &q, &shown, &mut |_, _, _| {})?;
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
    let mut encoder = None;
    let (arch, spec) = match &decoder {
        Some((_, family, _)) => {
            let arch = family.gguf_name();
            (arch, registry::by_arch(arch).and_then(|f| f.convert.as_ref()))
        }
        None => {
            let (arch, how) = bert::encoder_arch(&st.config, &source)?;
            encoder = Some(how);
            (arch, Some(&how.spec))
        }
    };
    let spec = spec.ok_or_else(|| Error::Internal(format!("no converter entry for {arch}")))?;
    if !hf_tokenizer {
        vocab_supported(dir, arch, spec)?;
    }
    let planned = plan(dir, &st, (&decoder, encoder), (arch, spec), t, &source)?;
    if let Some(check) = spec.check {
        check(&st.config, &source)?;
    }
    let parameters: u64 = planned.iter().map(|p| p.dims.iter().product::<u64>()).sum();

    // Metadata.
    let mxfp4 = decoder.as_ref().is_some_and(|(_, _, hp)| hp.mxfp4);
    let x = Ctx {
        dir,
        c: &st.config,
        arch,
        // The converter's MOSTLY_MXFP4_MOE for an MXFP4 checkpoint written
        // unquantized (its `prepare_metadata`).
        file_type: match t {
            OutType::F32 | OutType::F16 | OutType::Bf16 if mxfp4 => 38,
            _ => t.file_type(),
        },
    };
    let mut md = Metadata::default();
    md.insert("general.architecture".into(), Value::String(arch.into()));
    if let Some(early) = spec.early {
        early(&x, &mut md)?;
    }
    md.insert("general.type".into(), Value::String("model".into()));
    meta::General::load(dir, &st.config, parameters, size_label(&planned))?.write(&mut md);
    (spec.keys)(&x, &mut md)?;
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

/// gguf-py's size label of the tensors: `{experts}x{per expert}` for a
/// mixture of experts (`_exps.` tensors counted once, the rest shared),
/// else the parameter count (`GGUFWriter.get_total_parameter_count`).
fn size_label(planned: &[Planned]) -> String {
    let (mut total, mut shared, mut expert) = (0u64, 0u64, 0u64);
    let (mut expert_sum, mut n_expert) = (0u64, 0u64);
    for p in planned {
        let size: u64 = p.dims.iter().product();
        total += size;
        if p.name.contains("_exps.") && p.dims.len() >= 3 {
            let count = if p.name.contains(".bias") {
                p.dims[1]
            } else {
                p.dims[2]
            };
            expert += size / count.max(1);
            expert_sum += count;
            n_expert += 1;
        } else {
            shared += size;
        }
    }
    match expert_sum.checked_div(n_expert) {
        Some(count) => format!("{count}x{}", model_id::size_label(shared + expert)),
        None => model_id::size_label(total),
    }
}

/// The expert count of a mixture-of-experts `config.json`.
fn expert_count(c: &Json) -> Option<u64> {
    keys::find(c, &["num_local_experts", "num_experts", "n_routed_experts"]).and_then(Json::as_u64)
}

/// The output's tensors in the converter's order: the made-up ones first,
/// then each shard's tensors by name, renamed (and per-expert matrices
/// stacked where the last of them comes).
fn plan<'a>(
    dir: &Path,
    st: &'a SafetensorsDir,
    (decoder, encoder): (&Decoder, Option<&EncoderConvert>),
    (arch, spec): (&str, &ConvertSpec),
    t: OutType,
    source: &str,
) -> Result<Vec<Planned<'a>>, Error> {
    let mut order: Vec<&StTensorInfo> = st.tensors.iter().collect();
    order.sort_by(|a, b| {
        st.shard_path(a)
            .cmp(st.shard_path(b))
            .then_with(|| a.name.cmp(&b.name))
    });
    let extra = decoder.as_ref().map_or(&[][..], |(_, _, hp)| &hp.extra[..]);
    let n_layers = keys::find(&st.config, &["num_hidden_layers", "n_layer"])
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
    let mut experts = write::Experts::new(expert_count(&st.config));
    let special = decoder
        .as_ref()
        .and_then(|(_, family, hp)| Some((family.special()?, hp)));
    for info in order {
        let src = st.shard_path(info).display().to_string();
        // The family's own tensors (gpt-oss's split experts): planned from
        // a conversion made and dropped here, made again when written.
        if let Some((special, hp)) = special {
            if let Some(outs) = special(st, info, hp, &src)? {
                for (n, o) in outs.into_iter().enumerate() {
                    planned.push(Planned {
                        // MXFP4 experts stay MXFP4 whatever the out type.
                        to: if o.ty == GgmlType::Mxfp4 {
                            o.ty
                        } else {
                            tensor_type(&o.name, &o.dims, t)
                        },
                        name: o.name,
                        dims: o.dims,
                        from: Source::Special(info, n),
                    });
                }
                continue;
            }
        }
        let mapped = match decoder {
            Some((_, family, hp)) => hf_decoder::map_name(*family, hp, &info.name, &src)?,
            None => {
                let how = encoder.ok_or_else(|| Error::Internal(format!("no layout for {arch}")))?;
                bert::encoder_name((arch, how.layout), &info.name, n_layers, &src)?
                    .map(|n| (n, Reshape::None))
            }
        };
        let Some((name, reshape)) = mapped else {
            continue;
        };
        // Gemma 2's converter drops lm_head whether tied or not.
        if spec.drops_output && name == crate::formats::names::OUTPUT {
            continue;
        }
        if let Some(stacked) = experts.add(&name, info, &src)? {
            planned.extend(stacked.into_iter().map(|(name, dims, parts)| Planned {
                to: tensor_type(&name, &dims, t),
                name,
                dims,
                from: Source::Experts(parts),
            }));
            continue;
        }
        let mut dims: Vec<u64> = info.shape.iter().rev().map(|&d| d as u64).collect();
        if reshape == Reshape::Transpose && dims.len() == 2 {
            dims.swap(0, 1);
        }
        // Gemma 3's converter keeps the token embedding's rows of real
        // tokens only.
        let mut rows = None;
        if spec.trims_token_embd && name == crate::formats::names::TOKEN_EMBD && dims.len() == 2 {
            let n = vocab::tokenizer_json_size(dir)?;
            if n < dims[1] {
                dims[1] = n;
                rows = Some(n as usize);
            }
        }
        planned.push(Planned {
            to: tensor_type(&name, &dims, t),
            name,
            dims,
            from: Source::St(info, reshape, rows),
        });
    }
    experts.finish(source)?;
    // The converter writes gpt-oss's MXFP4 experts before every other
    // tensor (its `generate_extra_tensors`), in their input order.
    planned.sort_by_key(|p| p.to != GgmlType::Mxfp4);
    Ok(planned)
}

/// Refuses the SentencePiece vocabularies the converter would read.
fn vocab_supported(dir: &Path, arch: &str, spec: &ConvertSpec) -> Result<(), Error> {
    if !spec.sentencepiece || !dir.join("tokenizer.model").is_file() {
        return Ok(());
    }
    // Phi-3's converter reads tokenizer.json when the class says GPT-2.
    if spec.gpt2_class_reads_json {
        let tc = std::fs::read_to_string(dir.join("tokenizer_config.json")).ok();
        let class = tc
            .and_then(|t| serde_json::from_str::<Json>(&t).ok())
            .and_then(|j| {
                j.get("tokenizer_class")
                    .and_then(Json::as_str)
                    .map(str::to_string)
            });
        if class.as_deref() == Some("GPT2Tokenizer") {
            return Ok(());
        }
    }
    Err(Error::model(
        dir.join("tokenizer.model").display().to_string(),
        format!(
            "the converter writes {arch}'s vocabulary from this SentencePiece model, which ferrite convert does not read yet",
        ),
    ))
}

/// The converter's tokenizer keys.
fn write_vocab_keys(
    dir: &Path,
    config: &Json,
    spec: &ConvertSpec,
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
