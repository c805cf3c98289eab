//! `ferrite run [MODEL] -p PROMPT`: continue a prompt, streaming only the
//! continuation to stdout; a stats line goes to stderr with `--verbose` or
//! when stderr is a terminal.

use crate::error::{CliError, CliResult};
use std::io::Write;
use std::sync::Arc;

use ferrite::serving::{Sampler, SearchOptions, Session};
use ferrite::{GenerateOptions, Generator, Grammar};

use super::common::{
    generate_to_stdout, load_with, max_tokens, show_stats, DumpArgs, ModelArgs, SamplingArgs,
};
use super::input::{read_prompt, refuse_text_file};
use super::speculate::SpecArgs;

#[derive(clap::Args)]
pub struct Args {
    /// A GGUF file, a Hugging Face decoder directory (config.json,
    /// safetensors, tokenizer.json) or a short name (default: qwen2.5-0.5b).
    model: Option<String>,
    /// The prompt text (special-token text such as `<|im_start|>` is
    /// parsed); `-` reads it from standard input.
    #[arg(
        short = 'p',
        long,
        required_unless_present = "file",
        conflicts_with = "file"
    )]
    prompt: Option<String>,
    /// Read the prompt from this file (`-`: standard input); one final
    /// newline is dropped, as llama.cpp's `-f` does.
    #[arg(short = 'f', long, value_name = "FILE")]
    file: Option<String>,
    /// Tokens to generate at most (-1: until end of generation or a full context).
    #[arg(
        short = 'n',
        long = "max-tokens",
        visible_alias = "n-predict",
        value_name = "N",
        default_value_t = 256,
        allow_negative_numbers = true
    )]
    max_tokens: i64,
    /// Print the stats line (tokens, speed, why it stopped) on stderr even
    /// when stderr is not a terminal.
    #[arg(short = 'v', long)]
    verbose: bool,
    /// Stop when the text contains this string (repeatable).
    #[arg(long)]
    stop: Vec<String>,
    /// Constrain the continuation to one JSON value matching the JSON
    /// Schema in FILE (the server's `response_format` constrained
    /// decoding): a reply that ends by itself parses and matches it.
    #[arg(long, value_name = "FILE")]
    json_schema: Option<std::path::PathBuf>,
    /// Beam search with N beams (transformers' `num_beams`): the most
    /// likely continuation among N kept at each step, printed when the
    /// search ends. 1 (the default): the sampler below, streamed.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 1,
        conflicts_with_all = [
            "temperature", "top_k", "top_p", "min_p", "repeat_penalty", "repeat_last_n",
            "presence_penalty", "frequency_penalty", "logit_bias", "seed",
        ]
    )]
    beams: usize,
    /// Beam search: finished continuations are scored by their
    /// log-probability / length^F (transformers' `length_penalty`).
    /// (Default 1.)
    #[arg(long, value_name = "F")]
    length_penalty: Option<f32>,
    /// Beam search: never repeat an n-gram of this size
    /// (`no_repeat_ngram_size`; 0: off).
    #[arg(long, value_name = "N")]
    no_repeat_ngram: Option<usize>,
    #[command(flatten)]
    model_args: ModelArgs,
    #[command(flatten)]
    sampling: SamplingArgs,
    #[command(flatten)]
    dump: DumpArgs,
    #[command(flatten)]
    spec: SpecArgs,
}

pub fn run(args: Args) -> CliResult {
    if args.beams == 1 && (args.length_penalty.is_some() || args.no_repeat_ngram.is_some()) {
        return Err(CliError::usage(
            "--length-penalty and --no-repeat-ngram apply to beam search (--beams N)",
        ));
    }
    if args.beams != 1 && args.dump.dump.is_some() {
        return Err(CliError::usage("--dump does not combine with --beams"));
    }
    if args.spec.enabled() && (args.beams != 1 || args.dump.dump.is_some()) {
        return Err(CliError::usage(
            "--lookup and --draft do not combine with --beams or --dump",
        ));
    }
    let json = args.json_schema.as_deref().map(json_grammar).transpose()?;
    let max_tokens = max_tokens(args.max_tokens)?;
    let prompt = match (&args.prompt, &args.file) {
        (Some(p), None) if p != "-" => p.clone(),
        (Some(_), None) => read_prompt("-")?,
        (_, Some(f)) => read_prompt(f)?,
        (None, None) => return Err(CliError::usage("give a prompt: -p TEXT, -p - or -f FILE")),
    };
    refuse_text_file(args.model.as_deref(), "run")?;
    let loaded = load_with(
        args.model.as_deref(),
        args.model_args.tokenizer.as_deref(),
        args.model_args.weights.as_deref(),
    )?;
    if args.beams != 1 {
        return beam_search(&args, &loaded, &prompt, max_tokens);
    }
    let sampler_opts = args.sampling.options(args.verbose)?;
    let tokens = loaded.tokenizer().encode(&prompt, true, true);
    let draft = args.spec.load_draft(&loaded)?;
    let threads = args.model_args.threads()?;
    let mut session = Session::new(
        loaded.model(),
        loaded.tokenizer(),
        args.model_args.ctx,
        threads.clone(),
    )?;
    session.set_speculation(
        args.spec
            .speculation(draft.as_ref(), session.n_ctx(), threads)?,
    );
    let dump = args.dump.open()?;
    session.set_dump(dump.clone());
    session.set_prompt(&tokens)?;

    let opts = GenerateOptions {
        max_tokens,
        stop: args.stop,
        end_tokens: Vec::new(),
        json,
        speculate: None,
    };
    let mut sampler = Sampler::new(sampler_opts);
    generate_to_stdout(&mut session, &mut sampler, &opts, show_stats(args.verbose))?;
    DumpArgs::report(dump.as_deref());
    Ok(())
}

/// `--beams N`: the search's best continuation, printed at the end.
fn beam_search(
    args: &Args,
    loaded: &Generator,
    prompt: &str,
    max_tokens: Option<usize>,
) -> CliResult {
    if args.beams == 0 {
        return Err(CliError::usage("--beams must be at least 1"));
    }
    if !args.stop.is_empty() || args.json_schema.is_some() {
        return Err(CliError::usage(
            "--beams does not combine with --stop or --json-schema",
        ));
    }
    let length_penalty = args.length_penalty.unwrap_or(1.0);
    if !length_penalty.is_finite() {
        return Err(CliError::usage("--length-penalty must be a finite number"));
    }
    let n_prompt = loaded.tokenizer().encode(prompt, true, true).len();
    let n_ctx = args
        .model_args
        .ctx
        .unwrap_or(usize::MAX)
        .min(loaded.model().n_ctx_train());
    let opts = SearchOptions {
        num_beams: args.beams,
        max_length: max_tokens.map_or(n_ctx, |m| n_prompt.saturating_add(m).min(n_ctx)),
        length_penalty,
        no_repeat_ngram_size: args.no_repeat_ngram.unwrap_or(0),
        ..SearchOptions::default()
    };
    let start = std::time::Instant::now();
    let (text, ids) = loaded.beam_search(prompt, &opts, args.model_args.threads()?)?;
    let mut out = std::io::stdout().lock();
    super::output_result(writeln!(out, "{text}").and_then(|()| out.flush()))?;
    if show_stats(args.verbose) {
        eprintln!(
            "prompt: {n_prompt} tokens | beam search ({} beams): {} tokens in {:.2} s",
            args.beams,
            ids.len(),
            start.elapsed().as_secs_f64()
        );
    }
    Ok(())
}

/// The grammar of the JSON Schema in `path`.
fn json_grammar(path: &std::path::Path) -> CliResult<Arc<Grammar>> {
    let shown = format!("--json-schema {}", path.display());
    let text = std::fs::read_to_string(path).map_err(|e| CliError::read(&shown, e))?;
    let schema: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| CliError::input(&shown, format!("not JSON: {e}")))?;
    Grammar::from_schema(&schema)
        .map(Arc::new)
        .map_err(|e| CliError::input(&shown, e))
}
