//! `ferrite chat [MODEL]`: an interactive multi-turn chat on stdin/stdout.
//!
//! Each turn renders the whole conversation with the model's chat template
//! and feeds only what the KV cache does not already hold, so history is not
//! re-processed. EOF (Ctrl-D) ends the chat.

use std::io::{self, BufRead, IsTerminal};

use ferrite::generate::chat::{model_template, prompt_tokens, Message};
use ferrite::generate::sampler::Sampler;
use ferrite::generate::session::{GenerateOptions, Session};

use super::common::{generate_to_stdout, load_with, ModelArgs, SamplingArgs};

#[derive(clap::Args)]
pub struct Args {
    /// A GGUF file or short name (default: smollm2).
    model: Option<String>,
    /// A system prompt for the conversation.
    #[arg(long)]
    system: Option<String>,
    /// Most tokens per reply (-1: until end of turn or a full context).
    #[arg(short = 'n', long = "n-predict", default_value_t = -1, allow_negative_numbers = true)]
    n_predict: i64,
    #[command(flatten)]
    model_args: ModelArgs,
    #[command(flatten)]
    sampling: SamplingArgs,
}

pub fn run(args: Args) -> Result<(), String> {
    let sampler_opts = args.sampling.options()?;
    let loaded = load_with(args.model.as_deref(), args.model_args.tokenizer.as_deref())?;
    let template = model_template(&loaded.file, &loaded.tokenizer).map_err(|e| e.to_string())?;
    let mut session = Session::new(
        loaded.model.as_ref(),
        &loaded.tokenizer,
        args.model_args.ctx,
        args.model_args.threads(),
    )
    .map_err(|e| e.to_string())?;
    let mut sampler = Sampler::new(sampler_opts);
    let opts = GenerateOptions {
        max_tokens: usize::try_from(args.n_predict).ok(),
        stop: Vec::new(),
    };

    let mut messages = Vec::new();
    if let Some(system) = &args.system {
        messages.push(Message::new("system", system));
    }
    let interactive = io::stdin().is_terminal();
    let stdin = io::stdin();
    let mut lines = stdin.lock().lines();
    loop {
        if interactive {
            eprint!("> ");
        }
        let line = match lines.next() {
            None => break,
            Some(Ok(line)) => line,
            Some(Err(e)) => return Err(format!("reading input: {e}")),
        };
        if line.trim().is_empty() {
            continue;
        }
        messages.push(Message::new("user", &line));
        let tokens =
            prompt_tokens(&loaded.tokenizer, &template, &messages).map_err(|e| e.to_string())?;
        session.set_prompt(&tokens).map_err(|e| e.to_string())?;

        let reply = generate_to_stdout(&mut session, &mut sampler, &opts)?;
        messages.push(Message::new("assistant", reply.trim()));
    }
    Ok(())
}
