//! `ferrite chat [MODEL]`: an interactive multi-turn chat on stdin/stdout.
//!
//! Each turn renders the whole conversation with the model's chat template
//! and feeds only what the KV cache does not already hold, so history is not
//! re-processed. EOF (Ctrl-D) ends the chat.

use std::io::{self, BufRead, IsTerminal};

use ferrite::formats::gguf::GgufFile;
use ferrite::generate::chat::{builtin_template, ChatTemplate, Message, TEMPLATE_KEY};
use ferrite::generate::sampler::Sampler;
use ferrite::generate::session::{GenerateOptions, Session};
use ferrite::tokenize::Tokenizer;

use super::common::{generate_to_stdout, load, ModelArgs, SamplingArgs};

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

/// The file's chat template, or the built-in one for its architecture.
fn template_for(file: &GgufFile, tok: &Tokenizer) -> Result<ChatTemplate, String> {
    let text_of = |id: Option<u32>| id.and_then(|i| tok.token_text(i)).unwrap_or("").to_string();
    let (bos, eos) = (text_of(tok.bos_id()), text_of(tok.eos_id()));
    match file.metadata().get_str(TEMPLATE_KEY) {
        Some(src) => ChatTemplate::new(src, &bos, &eos).map_err(|e| e.to_string()),
        None => Ok(builtin_template(file.header.architecture())),
    }
}

/// Tokens of a rendered conversation: special-token text parsed, and BOS
/// added when the tokenizer wants one and the template did not write it.
fn tokenize_prompt(tok: &Tokenizer, text: &str) -> Vec<u32> {
    let mut ids = tok.encode(text, false, true);
    if tok.adds_bos() {
        if let Some(bos) = tok.bos_id() {
            if ids.first() != Some(&bos) {
                ids.insert(0, bos);
            }
        }
    }
    ids
}

pub fn run(args: Args) -> Result<(), String> {
    let sampler_opts = args.sampling.options()?;
    let loaded = load(args.model.as_deref())?;
    let template = template_for(&loaded.file, &loaded.tokenizer)?;
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
        let text = template
            .render(&messages, true)
            .map_err(|e| e.to_string())?;
        let tokens = tokenize_prompt(&loaded.tokenizer, &text);
        session.set_prompt(&tokens).map_err(|e| e.to_string())?;

        let reply = generate_to_stdout(&mut session, &mut sampler, &opts)?;
        messages.push(Message::new("assistant", reply.trim()));
    }
    Ok(())
}
