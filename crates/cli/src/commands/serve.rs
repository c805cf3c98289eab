//! `ferrite serve [MODEL ...]`: the OpenAI-compatible HTTP server
//! (`crates/server`). With no model it serves the default chat model and
//! `minilm`. Every option can also come from a `FERRITE_*` variable.

use crate::error::{CliError, CliResult};
use std::time::Duration;

use ferrite_server::{Limits, ServerConfig};

use super::common::DEFAULT_CHAT_MODEL;

/// The embedding model served when none is named.
const DEFAULT_EMBED_MODEL: &str = "minilm";

#[derive(clap::Args)]
pub struct Args {
    /// Models to serve: GGUF files, model directories or short names
    /// (default: qwen2.5-0.5b and minilm). Clients address each by its
    /// short name, or its file name without `.gguf`.
    #[arg(env = "FERRITE_SERVE_MODELS", value_delimiter = ',')]
    models: Vec<String>,
    /// Address to listen on.
    #[arg(long, env = "FERRITE_HOST", default_value = "127.0.0.1")]
    host: String,
    /// Port to listen on (0: any free port, printed at start).
    #[arg(long, env = "FERRITE_PORT", default_value_t = 8080)]
    port: u16,
    /// Require `Authorization: Bearer KEY` on every request but /health
    /// and /ready.
    #[arg(long, env = "FERRITE_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// Threads of the inference pool, 1 to 512 (default: one per core).
    #[arg(
        short = 't',
        long,
        env = "FERRITE_THREADS",
        value_parser = super::input::parse_threads,
        allow_negative_numbers = true
    )]
    threads: Option<usize>,
    /// Most positions (prompt + reply) of one sequence (default: the
    /// model's context, at most 4096).
    #[arg(short = 'c', long, env = "FERRITE_CTX")]
    ctx: Option<usize>,
    /// Sequences decoded at once per model.
    #[arg(long, env = "FERRITE_MAX_SEQS", default_value_t = 64)]
    max_seqs: usize,
    /// Requests that may wait per model; more get 429.
    #[arg(long, env = "FERRITE_MAX_QUEUE", default_value_t = 256)]
    max_queue: usize,
    /// KV-cache memory per model in MiB; admission waits while it is used.
    #[arg(long, env = "FERRITE_KV_CACHE_MIB", default_value_t = 4096)]
    kv_cache_mib: usize,
    /// Memory per model for keys and values of prompt prefixes kept for
    /// later requests that start the same way (system prompt, earlier
    /// turns), in MiB; least recently used blocks are evicted. 0: off.
    #[arg(long, env = "FERRITE_PREFIX_CACHE_MIB", default_value_t = 512)]
    prefix_cache_mib: usize,
    /// Most tokens in one forward pass (prompt rows + decode rows, <= 256).
    #[arg(long, env = "FERRITE_BATCH_TOKENS", default_value_t = 256)]
    batch_tokens: usize,
    /// Most tokens in one embedding batch.
    #[arg(long, env = "FERRITE_EMBED_BATCH_TOKENS", default_value_t = 8192)]
    embed_batch_tokens: usize,
    /// Most tokens (over all its inputs) one embeddings request may hold;
    /// more get 413 naming the limit.
    #[arg(long, env = "FERRITE_MAX_EMBED_TOKENS", default_value_t = 65536)]
    max_embed_tokens: usize,
    /// Largest request body in bytes.
    #[arg(long, env = "FERRITE_BODY_LIMIT", default_value_t = 2 << 20)]
    body_limit: usize,
    /// Seconds in-flight requests may run after SIGTERM.
    #[arg(long, env = "FERRITE_GRACE", default_value_t = 30)]
    grace: u64,
    /// Seconds a connection may take to send a request head, counted from
    /// when it starts waiting for one (idle keep-alive connections close
    /// after it too).
    #[arg(long, env = "FERRITE_HEADER_TIMEOUT", default_value_t = 10)]
    header_timeout: u64,
    /// Seconds a request's body may take to arrive after its head (408).
    #[arg(long, env = "FERRITE_BODY_TIMEOUT", default_value_t = 30)]
    body_timeout: u64,
    /// Seconds a response may wait on a client that reads nothing before
    /// its connection is closed (and its request cancelled).
    #[arg(long, env = "FERRITE_IDLE_TIMEOUT", default_value_t = 60)]
    idle_timeout: u64,
    /// Most client connections open at once; more are answered 503 and
    /// closed at once (default: half the file-descriptor limit, which the
    /// server raises to its hard limit at start, at most 4096).
    #[arg(long, env = "FERRITE_MAX_CONNECTIONS")]
    max_connections: Option<usize>,
    /// Trusted callers only: control-token text inside chat messages
    /// (`<|im_start|>`, ...) becomes control tokens, so a message can open
    /// turns of its own. By default it is tokenized as plain text and only
    /// the chat template's own markup yields control tokens.
    #[arg(long, env = "FERRITE_PARSE_SPECIAL_IN_MESSAGES")]
    parse_special_in_messages: bool,
    /// Embedding models multiply in bf16 on CPUs with AVX512-BF16 or
    /// FEAT_BF16 (see `ferrite embed --bf16`: faster, not the f32 results).
    #[arg(long, env = "FERRITE_BF16", conflicts_with = "int8")]
    bf16: bool,
    /// Embedding models multiply in int8 on any CPU (see `ferrite embed
    /// --int8`: faster, not the f32 results); other models are unchanged.
    #[arg(long, env = "FERRITE_INT8")]
    int8: bool,
    /// Quantize Hugging Face decoder directories at load (Q8_0, Q4_K_M,
    /// ...: any `ferrite quantize` type), as `ferrite convert --outtype
    /// TYPE` would; GGUF models are refused with it.
    #[arg(long, env = "FERRITE_WEIGHTS", value_name = "TYPE")]
    weights: Option<String>,
    /// Speculative decoding by prompt lookup for every generation request
    /// (a request opts out with `"speculate": false`): each sequence may
    /// feed a guess of what follows, copied from an earlier occurrence of
    /// its last tokens, in the same pass. The output is the same as
    /// without; replies that quote their prompt come faster.
    #[arg(long, env = "FERRITE_LOOKUP")]
    lookup: bool,
    /// Most tokens per draft with --lookup (default 8; the length adapts
    /// below it).
    #[arg(long, env = "FERRITE_DRAFT_MAX", value_name = "N")]
    draft_max: Option<usize>,
}

/// Most tokens per prompt-lookup draft by default (as `run --lookup`).
const LOOKUP_MAX: usize = 8;

/// `--lookup` / `--draft-max` as the server takes them.
fn lookup(on: bool, max: Option<usize>) -> CliResult<Option<usize>> {
    match (on, max) {
        (false, Some(_)) => Err(CliError::usage("--draft-max needs --lookup")),
        (_, Some(0)) => Err(CliError::usage("--draft-max must be at least 1")),
        (false, None) => Ok(None),
        (true, max) => Ok(Some(max.unwrap_or(LOOKUP_MAX))),
    }
}

pub fn run(args: Args) -> CliResult {
    let models = if args.models.is_empty() {
        vec![
            DEFAULT_CHAT_MODEL.to_string(),
            DEFAULT_EMBED_MODEL.to_string(),
        ]
    } else {
        args.models
    };
    let defaults = Limits::default();
    let max_chunk = ferrite::serving::MAX_CHUNK;
    if args.max_seqs == 0 || args.max_seqs > max_chunk {
        return Err(CliError::usage(format!(
            "--max-seqs must be in 1..={max_chunk}"
        )));
    }
    if args.batch_tokens < args.max_seqs || args.batch_tokens > max_chunk {
        return Err(CliError::usage(format!(
            "--batch-tokens must be in --max-seqs..={max_chunk} (a pass holds every running sequence)"
        )));
    }
    let threads = args.threads.unwrap_or_else(ferrite::available_cores);
    let config = ServerConfig {
        models,
        host: args.host,
        port: args.port,
        api_key: args.api_key.filter(|k| !k.is_empty()),
        threads,
        limits: Limits {
            body_bytes: args.body_limit,
            max_queue: args.max_queue,
            max_seqs: args.max_seqs,
            ctx: Some(args.ctx.unwrap_or(4096)),
            kv_cache_mib: args.kv_cache_mib,
            prefix_cache_mib: args.prefix_cache_mib,
            batch_tokens: args.batch_tokens,
            embed_batch_tokens: args.embed_batch_tokens.max(1),
            embed_products: super::embed::products(args.bf16, args.int8),
            decoder_weights: match &args.weights {
                None => None,
                Some(w) => Some(ferrite::FileType::from_name(w).ok_or_else(|| {
                    CliError::usage(format!(
                        "--weights '{w}': not a quantize type (Q8_0, Q4_K_M, Q4_0, Q6_K, ...)"
                    ))
                })?),
            },
            header_timeout: seconds("--header-timeout", args.header_timeout)?,
            body_timeout: seconds("--body-timeout", args.body_timeout)?,
            idle_timeout: seconds("--idle-timeout", args.idle_timeout)?,
            max_connections: args.max_connections,
            parse_special_in_messages: args.parse_special_in_messages,
            max_embed_work: args.max_embed_tokens.max(1),
            lookup: lookup(args.lookup, args.draft_max)?,
            ..defaults
        },
        grace: Duration::from_secs(args.grace),
    };
    Ok(ferrite_server::run(config)?)
}

/// A timeout in whole seconds, at least 1.
fn seconds(flag: &str, s: u64) -> CliResult<Duration> {
    if s == 0 {
        return Err(CliError::usage(format!("{flag} must be at least 1 second")));
    }
    Ok(Duration::from_secs(s))
}
