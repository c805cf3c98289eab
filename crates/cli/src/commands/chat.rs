//! `ferrite chat [MODEL]`: an interactive multi-turn chat on stdin/stdout.
//!
//! Each turn renders the whole conversation with the model's chat template
//! and feeds only what the KV cache does not already hold, so history is not
//! re-processed. A reply ends at any end-of-generation token of the model or
//! the template's turn end, or after `--max-tokens`. When the conversation
//! outgrows the context, its oldest turns are dropped (the system prompt is
//! kept) and the user is told once on stderr; a reply that fills the context
//! is cut there and the chat goes on. On a terminal a one-line banner says
//! which model answers and how to quit; piped input is one message a line.
//! EOF (Ctrl-D) ends the chat.

use crate::error::{CliError, CliResult};
use std::io::{self, BufRead, IsTerminal};

use ferrite::serving::{
    fit_prompt, model_template, turn_end_tokens, ChatTemplate, PromptBudget, PromptError, Sampler,
    Session, TEMPLATE_KEY,
};
use ferrite::{GenerateOptions, Message, StopReason};

use super::common::{
    generate_to_stdout, load_with, max_tokens, show_stats, ModelArgs, SamplingArgs,
    DEFAULT_CHAT_MODEL,
};
use super::input::{input_name, read_prompt, refuse_text_file, utf8_error};
use super::speculate::SpecArgs;

#[derive(clap::Args)]
pub struct Args {
    /// A GGUF file, a Hugging Face decoder directory (config.json,
    /// safetensors, tokenizer.json) or a short name (default: qwen2.5-0.5b).
    model: Option<String>,
    /// A system prompt for the conversation.
    #[arg(long, conflicts_with = "file")]
    system: Option<String>,
    /// Read the system prompt from this file (one final newline dropped).
    #[arg(short = 'f', long, value_name = "FILE")]
    file: Option<String>,
    /// Most tokens per reply (-1: no cap; a reply then ends at the end of
    /// its turn or where the context is full).
    #[arg(
        short = 'n',
        long = "max-tokens",
        visible_alias = "n-predict",
        value_name = "N",
        default_value_t = 1024,
        allow_negative_numbers = true
    )]
    max_tokens: i64,
    /// Print a stats line (tokens, speed, why the reply stopped) on stderr
    /// after each reply even when stderr is not a terminal.
    #[arg(short = 'v', long)]
    verbose: bool,
    /// Use a built-in chat template (chatml or gemma) instead of the
    /// model's own; needed to chat with a model whose file has none (a
    /// base model, which continues text rather than answering).
    #[arg(long, value_name = "NAME")]
    chat_template: Option<String>,
    #[command(flatten)]
    model_args: ModelArgs,
    #[command(flatten)]
    sampling: SamplingArgs,
    #[command(flatten)]
    spec: SpecArgs,
}

pub fn run(args: Args) -> CliResult {
    let system = match (&args.system, &args.file) {
        (_, Some(f)) if f == "-" => {
            return Err(CliError::usage(
                "--file -: standard input carries the messages; \
                        give the system prompt in a file",
            ))
        }
        (_, Some(f)) => Some(read_prompt(f)?),
        (s, None) => s.clone(),
    };
    let sampler_opts = args.sampling.options(args.verbose)?;
    let max_reply = max_tokens(args.max_tokens)?;
    let show_stats = show_stats(args.verbose);
    let builtin = match args.chat_template.as_deref() {
        None => None,
        Some("chatml") => Some(ChatTemplate::chatml()),
        Some("gemma") => Some(ChatTemplate::gemma()),
        Some(other) => {
            return Err(CliError::usage(format!(
                "--chat-template '{other}': expected chatml or gemma"
            )))
        }
    };
    refuse_text_file(args.model.as_deref(), "chat")?;
    let name = args.model.as_deref().unwrap_or(DEFAULT_CHAT_MODEL);
    let loaded = load_with(
        args.model.as_deref(),
        args.model_args.tokenizer.as_deref(),
        args.model_args.weights.as_deref(),
    )?;
    let has_template = loaded.file().metadata().get_str(TEMPLATE_KEY).is_some();
    let template = match builtin {
        Some(t) => t,
        None if !has_template => {
            return Err(CliError::usage(format!(
                "{name} has no chat template: it looks like a base model, which continues \
                 a text rather than answering in turns (its replies would not end). \
                 `ferrite run {name} -p TEXT` continues a text; --chat-template chatml or \
                 gemma chats with it anyway"
            )))
        }
        None => model_template(loaded.file(), loaded.tokenizer()).map_err(ferrite::Error::from)?,
    };
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
    let mut sampler = Sampler::new(sampler_opts);
    let opts = GenerateOptions {
        json: None,
        speculate: None,
        max_tokens: max_reply,
        stop: Vec::new(),
        end_tokens: turn_end_tokens(loaded.tokenizer(), &template),
    };
    let budget = PromptBudget::new(session.n_ctx(), max_reply);

    let mut messages = Vec::new();
    if let Some(system) = &system {
        messages.push(Message::new("system", system));
    }
    let interactive = io::stdin().is_terminal();
    if interactive {
        let title = match loaded.file().metadata().get_str("general.name") {
            Some(t) if t != name => format!("{name} ({t})"),
            _ => name.to_string(),
        };
        eprintln!("Chatting with {title}. Type a message and press Enter; Ctrl-D quits.");
    }
    let mut told_full = false;
    let mut tell_full = |n_ctx: usize| {
        if !told_full {
            told_full = true;
            eprintln!(
                "ferrite: the context ({n_ctx} tokens) is full: the oldest turns are dropped \
                 from now on, the system prompt is kept (--ctx sets the size)"
            );
        }
    };
    let stdin = io::stdin();
    let mut stdin = stdin.lock();
    let (mut line_no, mut offset) = (0, 0);
    let mut bytes = Vec::new();
    loop {
        if interactive {
            eprint!("> ");
        }
        bytes.clear();
        let n = stdin
            .read_until(b'\n', &mut bytes)
            .map_err(|e| CliError::read("reading standard input", e))?;
        if n == 0 {
            break;
        }
        line_no += 1;
        // As every command: a message that is not UTF-8 is an error naming
        // it (the replies to earlier messages are out already).
        let line = match std::str::from_utf8(&bytes) {
            Ok(text) => text.trim_end_matches(['\n', '\r']).to_string(),
            Err(e) => {
                return Err(utf8_error(
                    input_name("-"),
                    &bytes,
                    e.valid_up_to(),
                    line_no,
                    offset,
                ))
            }
        };
        offset += n;
        if line.trim().is_empty() {
            continue;
        }
        messages.push(Message::new("user", &line));
        let prompt = match fit_prompt(loaded.tokenizer(), &template, &mut messages, budget) {
            Ok(p) => p,
            Err(e @ PromptError::TooLong { .. }) => {
                eprintln!("ferrite: {e}; message skipped");
                messages.pop();
                continue;
            }
            Err(PromptError::Template(e)) => return Err(ferrite::Error::from(e).into()),
        };
        if prompt.dropped > 0 {
            tell_full(session.n_ctx());
        }
        session.set_prompt(&prompt.tokens)?;

        let reply = generate_to_stdout(&mut session, &mut sampler, &opts, show_stats)?;
        match reply.stop {
            // stdout was closed: nobody reads the replies any more.
            StopReason::Cancelled => break,
            StopReason::ContextFull => tell_full(session.n_ctx()),
            _ => {}
        }
        messages.push(Message::new("assistant", reply.text.trim()));
    }
    Ok(())
}
