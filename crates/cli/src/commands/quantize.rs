//! `ferrite quantize IN.gguf OUT.gguf TYPE [-t N]`: a GGUF file to another
//! file type, the same tensors, types and bytes as `llama-quantize IN OUT
//! TYPE N` makes (no importance matrix). See `ferrite::quantize`.

use std::io::{self, IsTerminal, Write};
use std::path::PathBuf;
use std::time::Instant;

use ferrite::tools::{quantize_file, QuantizeOptions, FILE_TYPES};
use ferrite::FileType;

use super::input::parse_threads;
use crate::error::{CliError, CliResult};

#[derive(clap::Args)]
pub struct Args {
    /// The GGUF file to quantize (best F32, F16 or BF16).
    input: PathBuf,
    /// Where to write the result (not the input's path).
    output: PathBuf,
    /// The file type, as llama-quantize names it: Q4_K_M, Q4_K_S, Q5_K_M,
    /// Q5_K_S, Q6_K, Q3_K_S, Q3_K_M, Q3_K_L, Q2_K, Q4_0, Q4_1, Q5_0, Q5_1,
    /// Q8_0, IQ4_NL, IQ4_XS, MXFP4_MOE, F16, BF16, F32 (Q3_K, Q4_K, Q5_K: the _M mixes;
    /// pure MXFP4: MXFP4_MOE --pure).
    #[arg(value_name = "TYPE")]
    ftype: String,
    /// Worker threads, 1 to 512 (default: every core).
    #[arg(short = 't', long, value_parser = parse_threads)]
    threads: Option<usize>,
    /// Quantize tensors that are already quantized (they are dequantized
    /// first, which loses quality).
    #[arg(long)]
    allow_requantize: bool,
    /// Every quantizable tensor to TYPE's base type, without the mix's
    /// per-tensor choices (as llama-quantize --pure).
    #[arg(long)]
    pure: bool,
}

pub fn run(args: Args) -> CliResult {
    let ftype = FileType::from_name(&args.ftype).ok_or_else(|| {
        let names: Vec<&str> = FILE_TYPES.iter().map(|f| f.name).collect();
        CliError::usage(format!(
            "unknown quantization type '{}' (expected one of {}, or Q3_K / Q4_K / Q5_K)",
            args.ftype,
            names.join(", ")
        ))
    })?;
    let threads = args.threads.unwrap_or_else(ferrite::available_cores);
    let opts = QuantizeOptions {
        ftype,
        pure: args.pure,
        allow_requantize: args.allow_requantize,
        threads,
    };
    let bar = io::stderr().is_terminal();
    let start = Instant::now();
    let mut progress = |done: usize, total: usize, name: &str| {
        if bar {
            let width = 30;
            let filled = done * width / total.max(1);
            eprint!(
                "\r[{}{}] {done}/{total} {:<40.40}",
                "#".repeat(filled),
                " ".repeat(width - filled),
                name
            );
            if done == total {
                eprintln!();
            }
            let _ = io::stderr().flush();
        }
    };
    let s = quantize_file(&args.input, &args.output, &opts, &mut progress)?;
    if s.requantized > 0 {
        eprintln!(
            "ferrite: warning: {} tensors were already quantized and were requantized",
            s.requantized
        );
    }
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    eprintln!(
        "{}: {} tensors ({} converted), {:.2} MiB -> {:.2} MiB as {} in {:.2} s",
        args.output.display(),
        s.tensors,
        s.converted,
        mib(s.bytes_in),
        mib(s.bytes_out),
        ftype.name,
        start.elapsed().as_secs_f64()
    );
    Ok(())
}
