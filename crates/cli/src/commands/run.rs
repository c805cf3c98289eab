//! `ferrite run [MODEL] -p PROMPT`: continue a prompt, streaming only the
//! continuation to stdout; a stats line goes to stderr.

use ferrite::generate::sampler::Sampler;
use ferrite::generate::session::{GenerateOptions, Session};

use super::common::{generate_to_stdout, load_with, ModelArgs, SamplingArgs};

#[derive(clap::Args)]
pub struct Args {
    /// A GGUF file or short name (default: smollm2).
    model: Option<String>,
    /// The prompt text (special-token text such as `<|im_start|>` is parsed).
    #[arg(short = 'p', long)]
    prompt: String,
    /// Tokens to generate at most (-1: until end of generation or a full context).
    #[arg(
        short = 'n',
        long = "n-predict",
        default_value_t = 256,
        allow_negative_numbers = true
    )]
    n_predict: i64,
    /// Stop when the text contains this string (repeatable).
    #[arg(long)]
    stop: Vec<String>,
    #[command(flatten)]
    model_args: ModelArgs,
    #[command(flatten)]
    sampling: SamplingArgs,
}

pub fn run(args: Args) -> Result<(), String> {
    let sampler_opts = args.sampling.options()?;
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
        max_tokens: usize::try_from(args.n_predict).ok(),
        stop: args.stop,
    };
    let mut sampler = Sampler::new(sampler_opts);
    generate_to_stdout(&mut session, &mut sampler, &opts)?;
    Ok(())
}
