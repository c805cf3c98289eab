//! `ferrite translate MODEL [FILE|-]`: one sentence per input line in, its
//! translation on the same line number out, in order. Blank lines give
//! blank lines; a line that is not valid UTF-8 is an error naming it,
//! before anything is translated; a line longer than the model's positions
//! is cut to fit, with a warning on stderr. Lines are translated in
//! chunks, each printed as soon as it is done, with progress on stderr for
//! long inputs on a terminal.

use crate::error::{CliError, CliResult};
use std::io::{self, BufWriter, IsTerminal, Write};
use std::path::PathBuf;
use std::time::Instant;

use ferrite::WeightFormat;
use ferrite::{TranslateOptions, Translator, MAX_BEAMS};

use super::output_result;

/// Lines translated (and printed) together.
const CHUNK: usize = 256;

#[derive(clap::Args)]
pub struct Args {
    /// A translation model directory: Marian / opus-mt (config.json,
    /// model.safetensors, source.spm, target.spm, vocab.json) or T5 /
    /// flan-t5 (config.json, model.safetensors, tokenizer.json).
    model: PathBuf,
    /// Sentences, one per line; `-` or nothing reads stdin.
    input: Option<String>,
    /// Beam width, 1 to 16 (default: the model's generation config; 1 is
    /// greedy).
    #[arg(long)]
    beams: Option<usize>,
    /// Longest output in tokens, counting the start token (default: the
    /// model's generation config).
    #[arg(long)]
    max_length: Option<usize>,
    /// Sentences per batch.
    #[arg(long, default_value_t = 32)]
    batch_size: usize,
    /// Weights in memory: f32, or q8_0 (quantized at load).
    #[arg(long, default_value = "f32")]
    weights: String,
    /// Threads, 1 to 512 (default: one per core).
    #[arg(short = 't', long, value_parser = super::input::parse_threads, allow_negative_numbers = true)]
    threads: Option<usize>,
    /// Print load and translation times on stderr.
    #[arg(short = 'v', long)]
    verbose: bool,
    #[command(flatten)]
    dump: super::common::DumpArgs,
}

pub fn run(args: Args) -> CliResult {
    if args.batch_size == 0 {
        return Err(CliError::usage("--batch-size must be at least 1"));
    }
    if args.beams.is_some_and(|b| b == 0 || b > MAX_BEAMS) {
        return Err(CliError::usage(format!(
            "--beams must be 1 to {MAX_BEAMS} (1 is greedy; wider beams take longer and rarely \
             change a translation)"
        )));
    }
    let format = match args.weights.as_str() {
        "f32" => WeightFormat::F32,
        "q8_0" => WeightFormat::Q8_0,
        other => {
            return Err(CliError::usage(format!(
                "--weights '{other}': expected f32 or q8_0"
            )))
        }
    };
    super::input::refuse_text_file(args.model.to_str(), "translate")?;
    let threads = super::input::threads(args.threads)?;
    let loading = Instant::now();
    let translator = Translator::open_with_threads(&args.model, format, threads)?;
    let load_secs = loading.elapsed().as_secs_f64();
    let dump = args.dump.open()?;
    let opts = TranslateOptions {
        beams: args.beams,
        max_length: args.max_length,
        batch: Some(args.batch_size),
        dump: dump.clone(),
        ..Default::default()
    };
    let lines = super::embed::read_lines(args.input.as_deref())?;
    let mut cut = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if translator.is_cut(line)? {
            cut.push(i + 1);
        }
    }
    super::input::warn_cut(&cut, translator.max_source_tokens());
    let total = lines.len();
    let show_progress = total > CHUNK && io::stderr().is_terminal();
    let mut out = BufWriter::new(io::stdout().lock());
    let translating = Instant::now();
    for (c, chunk) in lines.chunks(CHUNK).enumerate() {
        let texts: Vec<&str> = chunk.iter().map(String::as_str).collect();
        let translated = translator.translate(&texts, &opts)?;
        let written = (|| {
            for t in &translated {
                // One line per input: a translation never holds a newline.
                writeln!(out, "{}", t.replace(['\n', '\r'], " "))?;
            }
            out.flush()
        })();
        output_result(written)?;
        if show_progress {
            let done = (c * CHUNK + chunk.len()).min(total);
            eprint!("\rtranslated {done}/{total} lines");
            if done == total {
                eprintln!();
            }
        }
    }
    super::common::DumpArgs::report(dump.as_deref());
    if args.verbose {
        eprintln!(
            "ferrite: loaded in {load_secs:.3} s; translated {total} lines in {:.3} s",
            translating.elapsed().as_secs_f64()
        );
    }
    Ok(())
}
