//! Options and set-up shared by the generation commands (`run`, `chat`).

use crate::error::{CliError, CliResult};
use std::io::{self, IsTerminal, Write};
use std::path::Path;

use ferrite::serving::{Sampler, Session};
use ferrite::{
    random_seed, GenerateOptions, Generator, OpenOptions, SamplerOptions, StopReason, Threads,
};

/// The model generation commands use when none is named: the best
/// instruction-tuned model `scripts/fetch-models.sh` fetches that ferrite
/// runs (SmolLM2-135M at Q4_1 rambles in French when asked for a capital).
pub const DEFAULT_CHAT_MODEL: &str = "qwen2.5-0.5b";

/// `--max-tokens` / `-n`: at least -1 (no cap).
pub fn max_tokens(n: i64) -> CliResult<Option<usize>> {
    match n {
        -1 => Ok(None),
        n => usize::try_from(n).map(Some).map_err(|_| {
            CliError::usage(format!("--max-tokens {n}: give a count, or -1 for no cap"))
        }),
    }
}

/// Whether the stats line goes to stderr after a reply: with `--verbose`,
/// or when stderr is a terminal.
pub fn show_stats(verbose: bool) -> bool {
    verbose || io::stderr().is_terminal()
}

/// Sampling options, named as llama.cpp names them. Options where a
/// negative number means something (the penalties) take one as
/// `--presence-penalty -0.5`; the others refuse one with a message.
#[derive(clap::Args, Clone, Debug)]
pub struct SamplingArgs {
    /// Temperature, at least 0; 0 picks the most likely token every time
    /// (greedy).
    #[arg(long = "temp", default_value_t = 0.8, allow_negative_numbers = true)]
    pub temperature: f32,
    /// Keep only the K most likely tokens (0 = off).
    #[arg(long, default_value_t = 40)]
    pub top_k: usize,
    /// Keep the most likely tokens up to this total probability (1 = off).
    #[arg(long, default_value_t = 0.95, allow_negative_numbers = true)]
    pub top_p: f32,
    /// Drop tokens less likely than this fraction of the most likely (0 = off).
    #[arg(long, default_value_t = 0.05, allow_negative_numbers = true)]
    pub min_p: f32,
    /// Penalise repeating any of the last --repeat-last-n tokens (1 = off).
    #[arg(long, default_value_t = 1.0, allow_negative_numbers = true)]
    pub repeat_penalty: f32,
    /// How many recent tokens the penalties consider.
    #[arg(long, default_value_t = 64)]
    pub repeat_last_n: usize,
    /// Subtracted from the logit of any recent token (0 = off; negative
    /// favours them).
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub presence_penalty: f32,
    /// Subtracted per occurrence of a recent token (0 = off; negative
    /// favours them).
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub frequency_penalty: f32,
    /// Add BIAS to token ID's logit, as ID=BIAS or ID+BIAS / ID-BIAS
    /// (`-inf` forbids it). Repeatable.
    #[arg(long = "logit-bias", value_name = "ID=BIAS", value_parser = parse_logit_bias)]
    pub logit_bias: Vec<(u32, f32)>,
    /// Random seed: the same seed, prompt and options give the same text.
    /// Default (or -1): a new random seed each run, printed with --verbose.
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = parse_seed)]
    pub seed: Option<Seed>,
}

/// `--seed`: a number, or -1 for a random one.
#[derive(Clone, Copy, Debug)]
pub enum Seed {
    Random,
    Fixed(u64),
}

fn parse_seed(s: &str) -> Result<Seed, ferrite::Error> {
    match s.trim() {
        "-1" => Ok(Seed::Random),
        t => t.parse().map(Seed::Fixed).map_err(|_| {
            input(format!(
                "'{s}' is not a seed (0 to 2^64-1, or -1 for a random one)"
            ))
        }),
    }
}

/// A value parser's error.
fn input(message: String) -> ferrite::Error {
    ferrite::Error::Input(message)
}

fn parse_logit_bias(s: &str) -> Result<(u32, f32), ferrite::Error> {
    let split = s
        .find(['=', '+', '-'])
        .ok_or_else(|| input(format!("'{s}' is not ID=BIAS")))?;
    let (id, rest) = s.split_at(split);
    let id: u32 = id
        .trim()
        .parse()
        .map_err(|_| input(format!("bad token id in '{s}'")))?;
    let bias_text = rest.strip_prefix('=').unwrap_or(rest).trim();
    let bias = match bias_text {
        "-inf" | "-infinity" => f32::NEG_INFINITY,
        t => t.parse().map_err(|_| input(format!("bad bias in '{s}'")))?,
    };
    Ok((id, bias))
}

impl SamplingArgs {
    /// The sampler options; a seed drawn now when none was given, and
    /// printed on stderr with `verbose` (unless greedy) so the run can be
    /// repeated.
    pub fn options(&self, verbose: bool) -> CliResult<SamplerOptions> {
        let seed = match self.seed {
            Some(Seed::Fixed(s)) => s,
            None | Some(Seed::Random) => {
                let s = random_seed();
                // Greedy decoding (temperature 0) draws nothing.
                if verbose && self.temperature > 0.0 {
                    eprintln!("ferrite: seed {s} (--seed {s} repeats this run)");
                }
                s
            }
        };
        let opts = SamplerOptions {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            repeat_penalty: self.repeat_penalty,
            presence_penalty: self.presence_penalty,
            frequency_penalty: self.frequency_penalty,
            penalty_last_n: self.repeat_last_n,
            logit_bias: self.logit_bias.clone(),
            seed,
        };
        opts.validate()?;
        Ok(opts)
    }
}

/// Model, context and thread options.
#[derive(clap::Args, Clone, Debug)]
pub struct ModelArgs {
    /// Threads for the matrix products, 1 to 512 (default: one per core).
    #[arg(short = 't', long, value_parser = super::input::parse_threads, allow_negative_numbers = true)]
    pub threads: Option<usize>,
    /// Context size in tokens (default and maximum: the model's).
    #[arg(long = "ctx", short = 'c')]
    pub ctx: Option<usize>,
    /// The tokenizer.bin of a llama2.c checkpoint (default: tokenizer.bin
    /// beside the checkpoint).
    #[arg(short = 'z', long = "tokenizer", value_name = "FILE")]
    pub tokenizer: Option<std::path::PathBuf>,
    /// Quantize a Hugging Face directory's matrices at load (Q8_0, Q4_K_M,
    /// Q4_0, ...: any `ferrite quantize` type), as `ferrite convert
    /// --outtype TYPE` would.
    #[arg(long, value_name = "TYPE")]
    pub weights: Option<String>,
}

impl ModelArgs {
    pub fn threads(&self) -> CliResult<Threads> {
        super::input::threads(self.threads)
    }
}

/// Loads a model by path or short name (`None`: the default chat model).
pub fn load(model: Option<&str>) -> CliResult<Generator> {
    load_with(model, None, None)
}

/// As [`load`]; a llama2.c checkpoint (any file that is not GGUF) takes
/// its vocabulary from `tokenizer`, else from `tokenizer.bin` beside it. A
/// directory is read as a Hugging Face decoder (`config.json`,
/// safetensors, `tokenizer.json`). The rules are `ferrite::open`'s.
pub fn load_with(
    model: Option<&str>,
    tokenizer: Option<&Path>,
    weights: Option<&str>,
) -> CliResult<Generator> {
    let path = ferrite::tools::resolve(model.unwrap_or(DEFAULT_CHAT_MODEL))?;
    let decoder_weights = match weights {
        None => None,
        Some(w) => Some(ferrite::FileType::from_name(w).ok_or_else(|| {
            CliError::usage(format!(
                "--weights '{w}': not a quantize type (Q8_0, Q4_K_M, Q4_0, Q6_K, ...)"
            ))
        })?),
    };
    let opts = OpenOptions {
        tokenizer: tokenizer.map(Path::to_path_buf),
        decoder_weights,
        ..Default::default()
    };
    Ok(ferrite::tools::open_generator(&path, &opts)?)
}

/// A reply generated by [`generate_to_stdout`].
pub struct Reply {
    pub text: String,
    pub stop: StopReason,
}

/// Generates after the session's prompt, streaming the text to stdout as it
/// comes, then a newline; with `show_stats`, a stats line (ending with why
/// generation stopped) goes to stderr. Returns the text. A closed stdout
/// (`| head`) ends generation quietly.
pub fn generate_to_stdout(
    session: &mut Session,
    sampler: &mut Sampler,
    opts: &GenerateOptions,
    show_stats: bool,
) -> CliResult<Reply> {
    let stdout = io::stdout();
    let mut out = stdout.lock();
    let mut text = String::new();
    let mut write_error = None;
    let stop = session.generate(sampler, opts, |piece| {
        text.push_str(piece);
        match out.write_all(piece.as_bytes()).and_then(|()| out.flush()) {
            Ok(()) => true,
            Err(e) => {
                write_error = Some(e);
                false
            }
        }
    })?;
    let written = match write_error {
        Some(e) => Err(e),
        None => writeln!(out).and_then(|()| out.flush()),
    };
    super::output_result(written)?;
    if show_stats {
        eprintln!("{} | stop: {}", session.stats.summary(), stop.describe());
    }
    Ok(Reply { text, stop })
}

/// `--dump DIR [--dump-filter PATTERN]` (`run`, `embed`, `translate`):
/// every named intermediate tensor of every forward pass written as
/// `DIR/NAME.stepN.npy`, for finding where two runs diverge
/// (`scripts/compare-dumps.py`).
#[derive(clap::Args, Clone, Debug, Default)]
pub struct DumpArgs {
    /// Debugging: write each named intermediate tensor of every forward
    /// pass (llama.cpp's names: attn_norm-3, ffn_out-3, result_output,
    /// ...) into DIR as NAME.stepN.npy (f32, one row per token); N counts
    /// the forward passes. Changes no output.
    #[arg(long, value_name = "DIR")]
    pub dump: Option<std::path::PathBuf>,
    /// With --dump: only the tensors whose name matches PATTERN, a glob
    /// when it holds * or ? (`attn_norm-*`, `*-3`), else a substring.
    #[arg(long, value_name = "PATTERN", requires = "dump")]
    pub dump_filter: Option<String>,
}

impl DumpArgs {
    /// The dump asked for, its directory created; `None` without `--dump`.
    pub fn open(&self) -> CliResult<Option<std::sync::Arc<ferrite::TensorDump>>> {
        let Some(dir) = &self.dump else {
            return Ok(None);
        };
        let dump = ferrite::TensorDump::new(dir, self.dump_filter.as_deref())?;
        Ok(Some(std::sync::Arc::new(dump)))
    }

    /// Says on stderr what a dump wrote.
    pub fn report(dump: Option<&ferrite::TensorDump>) {
        if let Some(d) = dump {
            eprintln!(
                "ferrite: dumped {} tensors of {} forward passes into {}",
                d.files_written(),
                d.passes(),
                d.dir().display()
            );
        }
    }
}
