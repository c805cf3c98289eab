//! `ferrite run [MODEL] -p PROMPT`: continue a prompt, streaming only the
//! continuation to stdout; a stats line goes to stderr with `--verbose` or
//! when stderr is a terminal.

use std::sync::Arc;

use ferrite::generate::json::Grammar;
use ferrite::generate::sampler::Sampler;
use ferrite::generate::session::{GenerateOptions, Session};

use super::common::{
    generate_to_stdout, load_with, max_tokens, show_stats, ModelArgs, SamplingArgs,
};

#[derive(clap::Args)]
pub struct Args {
    /// A GGUF file, a Hugging Face decoder directory (config.json,
    /// safetensors, tokenizer.json) or a short name (default: qwen2.5-0.5b).
    model: Option<String>,
    /// The prompt text (special-token text such as `<|im_start|>` is parsed).
    #[arg(short = 'p', long)]
    prompt: String,
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
    #[command(flatten)]
    model_args: ModelArgs,
    #[command(flatten)]
    sampling: SamplingArgs,
}

pub fn run(args: Args) -> Result<(), String> {
    let sampler_opts = args.sampling.options()?;
    let json = args.json_schema.as_deref().map(json_grammar).transpose()?;
    let max_tokens = max_tokens(args.max_tokens)?;
    let loaded = load_with(args.model.as_deref(), args.model_args.tokenizer.as_deref())?;
    let tokens = loaded.tokenizer.encode(&args.prompt, true, true);
    let mut session = Session::new(
        loaded.model.as_ref(),
        &loaded.tokenizer,
        args.model_args.ctx,
        args.model_args.threads(),
    )
    .map_err(|e| e.to_string())?;
    session.set_prompt(&tokens).map_err(|e| e.to_string())?;

    let opts = GenerateOptions {
        max_tokens,
        stop: args.stop,
        end_tokens: Vec::new(),
        json,
    };
    let mut sampler = Sampler::new(sampler_opts);
    generate_to_stdout(&mut session, &mut sampler, &opts, show_stats(args.verbose))?;
    Ok(())
}

/// The grammar of the JSON Schema in `path`.
fn json_grammar(path: &std::path::Path) -> Result<Arc<Grammar>, String> {
    let shown = path.display();
    let text = std::fs::read_to_string(path).map_err(|e| format!("--json-schema {shown}: {e}"))?;
    let schema: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("--json-schema {shown}: not JSON: {e}"))?;
    Grammar::from_schema(&schema)
        .map(Arc::new)
        .map_err(|e| format!("--json-schema {shown}: {e}"))
}
