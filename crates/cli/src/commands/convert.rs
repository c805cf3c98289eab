//! `ferrite convert HF_DIR -o OUT.gguf [--outtype f32|f16|bf16|q8_0|TYPE]`:
//! the GGUF file llama.cpp's `convert_hf_to_gguf.py` writes for the
//! directory (any other TYPE: that file then quantized as `llama-quantize`
//! would). See `ferrite::convert`.

use std::path::PathBuf;
use std::time::Instant;

use ferrite::tools::FILE_TYPES;
use ferrite::tools::{convert_dir, ConvertOptions, Target};

use super::input::parse_threads;
use crate::error::{CliError, CliResult};

#[derive(clap::Args)]
pub struct Args {
    /// The Hugging Face model directory (config.json, safetensors,
    /// tokenizer.json).
    dir: PathBuf,
    /// Where to write the GGUF file.
    #[arg(short = 'o', long = "outfile")]
    output: PathBuf,
    /// f32, f16, bf16, q8_0 (lower case: convert_hf_to_gguf.py's file), or
    /// a llama-quantize type in upper case (Q4_K_M, Q6_K, Q8_0, ...: the f32
    /// conversion, then quantized as llama-quantize would).
    #[arg(long, default_value = "f16")]
    outtype: String,
    /// The pre-tokenizer to record when the tokenizer is not one the
    /// converter recognises (e.g. gpt-2).
    #[arg(long, value_name = "NAME")]
    pre_tokenizer: Option<String>,
    /// Replace OUT if it exists.
    #[arg(long)]
    force: bool,
    /// Worker threads for a quantize type (default: every core).
    #[arg(short = 't', long, value_parser = parse_threads)]
    threads: Option<usize>,
}

pub fn run(args: Args) -> CliResult {
    let target = Target::from_name(&args.outtype).ok_or_else(|| {
        let names: Vec<&str> = FILE_TYPES.iter().map(|f| f.name).collect();
        CliError::usage(format!(
            "unknown --outtype '{}' (f32, f16, bf16, q8_0, or one of {})",
            args.outtype,
            names.join(", ")
        ))
    })?;
    let opts = ConvertOptions {
        target,
        pre_tokenizer: args.pre_tokenizer,
        force: args.force,
        threads: args.threads.unwrap_or_else(ferrite::available_cores),
    };
    let start = Instant::now();
    let s = convert_dir(&args.dir, &args.output, &opts)?;
    eprintln!(
        "{}: {} ({} tensors, {} parameters), {:.2} MiB in {:.2} s",
        args.output.display(),
        s.architecture,
        s.tensors,
        s.parameters,
        s.bytes_out as f64 / (1024.0 * 1024.0),
        start.elapsed().as_secs_f64()
    );
    Ok(())
}
