//! The server's settings (the CLI fills them from flags and environment
//! variables).

use std::time::Duration;

use ferrite::Products;

/// Everything `ferrite serve` can be told.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Models to serve, by path or short name.
    pub models: Vec<String>,
    pub host: String,
    pub port: u16,
    /// Bearer token every request but `/health` and `/ready` must carry.
    pub api_key: Option<String>,
    /// Threads of the inference pool (shared by every model).
    pub threads: usize,
    pub limits: Limits,
    /// How long in-flight requests may run after SIGTERM before exit.
    pub grace: Duration,
}

/// Bounds that keep the server's memory and queue finite.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Largest request body in bytes.
    pub body_bytes: usize,
    /// Requests that may wait for admission, per model (429 beyond).
    pub max_queue: usize,
    /// Sequences decoded at once, per generation model.
    pub max_seqs: usize,
    /// Most positions of one sequence (prompt + reply); `None`: the
    /// model's training context.
    pub ctx: Option<usize>,
    /// KV-cache memory all sequences of a model may reserve, in MiB.
    pub kv_cache_mib: usize,
    /// Memory the prefix cache's blocks may hold per generation model, in
    /// MiB (0: no prefix cache).
    pub prefix_cache_mib: usize,
    /// Most tokens (prefill rows plus decode rows) in one forward pass.
    pub batch_tokens: usize,
    /// Most tokens in one embedding batch.
    pub embed_batch_tokens: usize,
    /// Most inputs in one embeddings request.
    pub max_embed_inputs: usize,
    /// Most choices (`n`) in one request.
    pub max_n: usize,
    /// How embedding models multiply (`ferrite serve --bf16` / `--int8`;
    /// see `Embedder::use_products`): bf16 fails to load on a CPU without
    /// AVX512-BF16.
    pub embed_products: Products,
    /// Hugging Face decoder directories' matrices quantized at load
    /// (`ferrite serve --weights TYPE`), as `ferrite convert --outtype
    /// TYPE` would write them; GGUF models are refused with it.
    pub decoder_weights: Option<ferrite::FileType>,
    /// A connection must deliver a complete request head within this of
    /// starting to wait for one (so an idle keep-alive connection is
    /// closed after it too).
    pub header_timeout: Duration,
    /// A request's whole body must arrive within this of its head (408).
    pub body_timeout: Duration,
    /// A connection on which nothing moves for this long while a response
    /// is being written (a client that stopped reading) is closed, which
    /// cancels its request.
    pub idle_timeout: Duration,
    /// Most client connections open at once (more are refused with a 503
    /// and closed); `None`: half the descriptor limit, at most 4096.
    pub max_connections: Option<usize>,
    /// Most tokens (over all its inputs) one embeddings request may hold
    /// (413 beyond, naming the limit).
    pub max_embed_work: usize,
    /// Trusted callers only: control-token text inside chat messages
    /// becomes control tokens, as in the template's own markup. Off: it is
    /// tokenized as text (`ferrite::serving::guarded_prompt_tokens`).
    pub parse_special_in_messages: bool,
    /// Speculative decoding by prompt lookup (`ferrite serve --lookup`):
    /// `Some(n)` drafts up to `n` tokens per sequence and step, which
    /// changes no output, only the number of forward passes. A request
    /// opts out with `"speculate": false`.
    pub lookup: Option<usize>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            body_bytes: 2 << 20,
            max_queue: 256,
            max_seqs: 64,
            ctx: Some(4096),
            kv_cache_mib: 4096,
            prefix_cache_mib: 512,
            batch_tokens: 256,
            embed_batch_tokens: 8192,
            max_embed_inputs: 2048,
            max_n: 16,
            embed_products: Products::F32,
            decoder_weights: None,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(60),
            max_connections: None,
            max_embed_work: 1 << 16,
            parse_special_in_messages: false,
            lookup: None,
        }
    }
}
