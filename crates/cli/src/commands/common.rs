//! Options and set-up shared by the generation commands (`run`, `chat`).

use std::io::{self, IsTerminal, Write};
use std::path::Path;
use std::sync::Arc;

use ferrite::formats::gguf::GgufFile;
use ferrite::generate::sampler::{Sampler, SamplerOptions};
use ferrite::generate::session::{GenerateOptions, Session, StopReason};
use ferrite::models::CausalLm;
use ferrite::parallel::Threads;
use ferrite::tokenize::Tokenizer;
use ferrite::OpenOptions;

/// The model generation commands use when none is named: the best
/// instruction-tuned model `scripts/fetch-models.sh` fetches that ferrite
/// runs (SmolLM2-135M at Q4_1 rambles in French when asked for a capital).
pub const DEFAULT_CHAT_MODEL: &str = "qwen2.5-0.5b";

/// `--max-tokens` / `-n`: at least -1 (no cap).
pub fn max_tokens(n: i64) -> Result<Option<usize>, String> {
    match n {
        -1 => Ok(None),
        n => usize::try_from(n)
            .map(Some)
            .map_err(|_| format!("--max-tokens {n}: give a count, or -1 for no cap")),
    }
}

/// Whether the stats line goes to stderr after a reply: with `--verbose`,
/// or when stderr is a terminal.
pub fn show_stats(verbose: bool) -> bool {
    verbose || io::stderr().is_terminal()
}

/// Sampling options, named as llama.cpp names them.
#[derive(clap::Args, Clone, Debug)]
pub struct SamplingArgs {
    /// Temperature; 0 picks the most likely token every time (greedy).
    #[arg(long = "temp", default_value_t = 0.8)]
    pub temperature: f32,
    /// Keep only the K most likely tokens (0 = off).
    #[arg(long, default_value_t = 40)]
    pub top_k: usize,
    /// Keep the most likely tokens up to this total probability (1 = off).
    #[arg(long, default_value_t = 0.95)]
    pub top_p: f32,
    /// Drop tokens less likely than this fraction of the most likely (0 = off).
    #[arg(long, default_value_t = 0.05)]
    pub min_p: f32,
    /// Penalise repeating any of the last --repeat-last-n tokens (1 = off).
    #[arg(long, default_value_t = 1.0)]
    pub repeat_penalty: f32,
    /// How many recent tokens the penalties consider.
    #[arg(long, default_value_t = 64)]
    pub repeat_last_n: usize,
    /// Subtracted from the logit of any recent token (0 = off).
    #[arg(long, default_value_t = 0.0)]
    pub presence_penalty: f32,
    /// Subtracted per occurrence of a recent token (0 = off).
    #[arg(long, default_value_t = 0.0)]
    pub frequency_penalty: f32,
    /// Add BIAS to token ID's logit, as ID=BIAS or ID+BIAS / ID-BIAS
    /// (`-inf` forbids it). Repeatable.
    #[arg(long = "logit-bias", value_name = "ID=BIAS", value_parser = parse_logit_bias)]
    pub logit_bias: Vec<(u32, f32)>,
    /// Random seed: the same seed, prompt and options give the same text.
    #[arg(long, default_value_t = 0x5EED)]
    pub seed: u64,
}

fn parse_logit_bias(s: &str) -> Result<(u32, f32), String> {
    let split = s
        .find(['=', '+', '-'])
        .ok_or_else(|| format!("'{s}' is not ID=BIAS"))?;
    let (id, rest) = s.split_at(split);
    let id: u32 = id
        .trim()
        .parse()
        .map_err(|_| format!("bad token id in '{s}'"))?;
    let bias_text = rest.strip_prefix('=').unwrap_or(rest).trim();
    let bias = match bias_text {
        "-inf" | "-infinity" => f32::NEG_INFINITY,
        t => t.parse().map_err(|_| format!("bad bias in '{s}'"))?,
    };
    Ok((id, bias))
}

impl SamplingArgs {
    pub fn options(&self) -> Result<SamplerOptions, String> {
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
            seed: self.seed,
        };
        opts.validate().map_err(|e| e.to_string())?;
        Ok(opts)
    }
}

/// Model, context and thread options.
#[derive(clap::Args, Clone, Debug)]
pub struct ModelArgs {
    /// Threads for the matrix products (default: one per core).
    #[arg(short = 't', long)]
    pub threads: Option<usize>,
    /// Context size in tokens (default and maximum: the model's).
    #[arg(long = "ctx", short = 'c')]
    pub ctx: Option<usize>,
    /// The tokenizer.bin of a llama2.c checkpoint (default: tokenizer.bin
    /// beside the checkpoint).
    #[arg(short = 'z', long = "tokenizer", value_name = "FILE")]
    pub tokenizer: Option<std::path::PathBuf>,
}

impl ModelArgs {
    pub fn threads(&self) -> Threads {
        match self.threads {
            Some(n) => Threads::new(n),
            None => Threads::all_cores(),
        }
    }
}

/// A loaded decoder model and its tokenizer.
pub struct Loaded {
    pub file: Arc<GgufFile>,
    pub model: Box<dyn CausalLm>,
    pub tokenizer: Tokenizer,
}

/// Loads a model by path or short name (`None`: the default chat model).
pub fn load(model: Option<&str>) -> Result<Loaded, String> {
    load_with(model, None)
}

/// As [`load`]; a llama2.c checkpoint (any file that is not GGUF) takes
/// its vocabulary from `tokenizer`, else from `tokenizer.bin` beside it. A
/// directory is read as a Hugging Face decoder (`config.json`,
/// safetensors, `tokenizer.json`). The rules are `ferrite::open`'s.
pub fn load_with(model: Option<&str>, tokenizer: Option<&Path>) -> Result<Loaded, String> {
    let path =
        ferrite::open::resolve(model.unwrap_or(DEFAULT_CHAT_MODEL)).map_err(|e| e.to_string())?;
    let opts = OpenOptions {
        tokenizer: tokenizer.map(Path::to_path_buf),
        ..Default::default()
    };
    let g = ferrite::open::open_generator(&path, &opts).map_err(|e| e.to_string())?;
    Ok(Loaded {
        file: g.file,
        model: g.model,
        tokenizer: g.tokenizer,
    })
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
) -> Result<Reply, String> {
    let stdout = io::stdout();
    let mut out = stdout.lock();
    let mut text = String::new();
    let mut write_error = None;
    let stop = session
        .generate(sampler, opts, |piece| {
            text.push_str(piece);
            match out.write_all(piece.as_bytes()).and_then(|()| out.flush()) {
                Ok(()) => true,
                Err(e) => {
                    write_error = Some(e);
                    false
                }
            }
        })
        .map_err(|e| e.to_string())?;
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
