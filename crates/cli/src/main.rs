//! `ferrite`: one binary for every job. Each subcommand lives in its own
//! module under `commands/`; this file only parses arguments and reports
//! errors as one line on stderr with a non-zero exit.

mod commands;
mod error;

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use error::{CliError, CliResult};
use ferrite_kernels::dispatch::{KernelRequest, KernelSet};

#[derive(Parser)]
#[command(name = "ferrite", version, about = "Run transformer models on the CPU")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Show what a model file or directory holds: architecture,
    /// hyper-parameters, tokenizer, tensors.
    Inspect(commands::inspect::Args),
    /// Print the token ids of a text as one JSON array (as llama-tokenize does).
    Tokenize(commands::tokenize::Args),
    /// Continue a prompt with a language model, streaming the text.
    Run(commands::run::Args),
    /// Chat with a language model on the terminal (Ctrl-D ends).
    Chat(commands::chat::Args),
    /// Embed texts (one per line) with a sentence-embedding model; one JSON
    /// array per line out, same order.
    Embed(commands::embed::Args),
    /// Translate sentences (one per line) with an encoder-decoder model
    /// (Marian / opus-mt, T5 / flan-t5); one translation per line out, same order.
    Translate(commands::translate::Args),
    /// Measure prompt processing and generation speed (as llama-bench does).
    Bench(commands::bench::Args),
    /// Serve models over an OpenAI-compatible HTTP API (chat, completions,
    /// embeddings) with continuous batching.
    Serve(commands::serve::Args),
    /// Score a language model on a text: perplexity, or KL divergence
    /// against a base model's saved logits (as llama-perplexity does).
    Perplexity(commands::perplexity::Args),
    /// Quantize a GGUF file to another type or llama.cpp mix (Q4_K_M,
    /// Q8_0, ...), byte for byte as llama-quantize does.
    Quantize(commands::quantize::Args),
    /// Convert a Hugging Face directory to the GGUF file llama.cpp's
    /// convert_hf_to_gguf.py writes (--outtype f32|f16|bf16|q8_0, or a
    /// quantize type such as Q4_K_M).
    Convert(commands::convert::Args),
}

/// `FERRITE_KERNELS`: a name that is no kernel set is an error; a set
/// this CPU cannot run is said, with the set that runs instead.
fn check_kernel_request() -> CliResult {
    match KernelRequest::from_env() {
        KernelRequest::Unknown { name, .. } => {
            let names: Vec<&str> = KernelSet::ALL.iter().map(|s| s.name()).collect();
            Err(CliError::usage(format!(
                "FERRITE_KERNELS={name}: no such kernel set (expected {}, or unset for the \
                 fastest this CPU runs)",
                names.join(", ")
            )))
        }
        KernelRequest::Unsupported { asked, used } => {
            eprintln!(
                "ferrite: warning: FERRITE_KERNELS={}: this CPU cannot run the {} kernels \
                 (they need {}); running the {} kernels",
                asked.name(),
                asked.name(),
                asked.needs(),
                used.name()
            );
            Ok(())
        }
        KernelRequest::Fastest(_) | KernelRequest::Forced(_) => Ok(()),
    }
}

/// A write past the file-size limit (`ulimit -f`) then fails with an
/// error (EFBIG) instead of killing the process with SIGXFSZ, so that
/// `convert` and `quantize` remove their temporary output as on any other
/// write error.
#[cfg(unix)]
fn ignore_file_size_signal() {
    unsafe extern "C" {
        fn signal(signum: i32, handler: usize) -> usize;
    }
    // SIGXFSZ is 25 on Linux (x86-64, arm64) and macOS; SIG_IGN is 1.
    const SIGXFSZ: i32 = 25;
    const SIG_IGN: usize = 1;
    // SAFETY: signal(2) with SIG_IGN installs no handler code; it only
    // changes this process's disposition of SIGXFSZ, before any thread starts.
    unsafe {
        signal(SIGXFSZ, SIG_IGN);
    }
}

fn main() -> ExitCode {
    #[cfg(unix)]
    ignore_file_size_signal();
    let cli = Cli::parse();
    if let Err(e) = check_kernel_request() {
        eprintln!("ferrite: {e}");
        return ExitCode::FAILURE;
    }
    let result = match cli.command {
        Command::Inspect(args) => commands::inspect::run(args),
        Command::Tokenize(args) => commands::tokenize::run(args),
        Command::Run(args) => commands::run::run(args),
        Command::Chat(args) => commands::chat::run(args),
        Command::Embed(args) => commands::embed::run(args),
        Command::Translate(args) => commands::translate::run(args),
        Command::Bench(args) => commands::bench::run(args),
        Command::Serve(args) => commands::serve::run(args),
        Command::Perplexity(args) => commands::perplexity::run(args),
        Command::Quantize(args) => commands::quantize::run(args),
        Command::Convert(args) => commands::convert::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ferrite: {e}");
            ExitCode::FAILURE
        }
    }
}
