//! How good a model's predictions are on a text: perplexity, and the KL
//! divergence of its token distributions from a base model's, computed as
//! llama.cpp's `llama-perplexity` computes them so the numbers compare.
//!
//! The text's tokens (with the model's BOS, as `llama-perplexity`
//! tokenizes) are cut into chunks of `n_ctx` tokens; each chunk is run
//! from an empty cache with its first token replaced by BOS (when the
//! model adds one); the second half of each chunk is scored: the
//! logits at positions `first = n_ctx / 2 .. n_ctx - 2` predict the
//! tokens after them, `n_ctx - 1 - first` predictions a chunk. Perplexity
//! is `exp` of the mean negative log-likelihood; its uncertainty
//! `ppl * sqrt(var(nll) / (count - 1))`.
//!
//! With a base file ([`base`], llama.cpp's `--kl-divergence-base` format,
//! so either program can read the other's), each scored position's
//! distribution is compared with the base's: KL divergence, whether the
//! most likely token is the same, and the change of the correct token's
//! probability ([`kld`]).
//!
//! Every sum runs in a fixed order (chunk by chunk, position by
//! position, in f64), so the figures do not depend on the thread count.

pub mod base;
pub mod kld;

use std::ops::Range;
use std::sync::Mutex;

use crate::models::decoder::Logits;
use crate::models::CausalLm;
use crate::parallel::Threads;
use crate::tokenize::Tokenizer;
use crate::Error;

pub use base::{BaseReader, BaseWriter};
pub use kld::{KldReport, KldStats};

/// `llama-perplexity`'s default context per chunk.
pub const DEFAULT_N_CTX: usize = 512;

/// What to score and how.
#[derive(Clone, Debug)]
pub struct PerplexityOptions {
    /// Tokens per chunk (`-c`), at least 4.
    pub n_ctx: usize,
    /// Score at most this many chunks (`--chunks`); all that fit if `None`.
    pub max_chunks: Option<usize>,
    /// Threads for the forward pass and the scoring.
    pub threads: Threads,
}

impl Default for PerplexityOptions {
    fn default() -> Self {
        PerplexityOptions {
            n_ctx: DEFAULT_N_CTX,
            max_chunks: None,
            threads: Threads::new(1),
        }
    }
}

/// Running sums of the negative log-likelihoods of the scored tokens.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct NllStats {
    /// Sum of `-ln p(token)`.
    pub sum: f64,
    /// Sum of its squares.
    pub sum2: f64,
    /// Tokens scored.
    pub count: usize,
}

impl NllStats {
    /// Adds one token's negative log-likelihood.
    pub fn add(&mut self, nll: f64) {
        self.sum += nll;
        self.sum2 += nll * nll;
        self.count += 1;
    }

    /// `exp(mean nll)`, the perplexity.
    pub fn perplexity(&self) -> f64 {
        (self.sum / self.count as f64).exp()
    }

    /// The perplexity's standard error, `ppl * sqrt(var / (count - 1))`
    /// (`None` when the variance is not positive, as llama.cpp reports).
    pub fn uncertainty(&self) -> Option<f64> {
        let n = self.count as f64;
        let mean = self.sum / n;
        let var = self.sum2 / n - mean * mean;
        (var > 0.0 && self.count > 1).then(|| (var / (n - 1.0)).sqrt() * self.perplexity())
    }
}

/// The text's tokens as `llama-perplexity` takes them: the model's BOS
/// (and no EOS), special-token texts read as plain text.
pub fn text_tokens(tok: &Tokenizer, text: &str) -> Vec<u32> {
    tok.encode(text, tok.adds_bos(), false)
}

/// How a token list is cut into chunks.
#[derive(Clone, Copy, Debug)]
pub struct Chunking {
    /// Tokens per chunk.
    pub n_ctx: usize,
    /// Chunks scored.
    pub n_chunk: usize,
}

impl Chunking {
    /// The chunks of `n_tokens` tokens under `opts`; an error when fewer
    /// than two chunks' worth of tokens are there (as llama-perplexity).
    pub fn of(n_tokens: usize, opts: &PerplexityOptions, model_ctx: usize) -> Result<Chunking, Error> {
        let n_ctx = opts.n_ctx;
        if n_ctx < 4 {
            return Err(Error::Input(format!("a context of {n_ctx} tokens is too short to score (at least 4)")));
        }
        if n_ctx > model_ctx {
            return Err(Error::Input(format!(
                "a context of {n_ctx} tokens is longer than the model's {model_ctx}"
            )));
        }
        if n_tokens < 2 * n_ctx {
            return Err(Error::Input(format!(
                "the text is {n_tokens} tokens; a context of {n_ctx} needs at least {}",
                2 * n_ctx
            )));
        }
        let all = n_tokens / n_ctx;
        let n_chunk = opts.max_chunks.map_or(all, |m| m.min(all)).max(1);
        Ok(Chunking { n_ctx, n_chunk })
    }

    /// The first scored position of a chunk.
    pub fn first(&self) -> usize {
        self.n_ctx / 2
    }

    /// Scored predictions per chunk.
    pub fn scored(&self) -> usize {
        self.n_ctx - 1 - self.first()
    }
}

/// The logits of one chunk's scored positions (`first .. n_ctx - 1`,
/// `scored()` rows of `n_vocab`): the chunk run from an empty cache, its
/// first token replaced by `bos` when given.
pub fn chunk_logits(
    model: &dyn CausalLm,
    chunk: &[u32],
    bos: Option<u32>,
    threads: &Threads,
    logits: &mut Vec<f32>,
) -> Result<(), Error> {
    let n_ctx = chunk.len();
    let first = n_ctx / 2;
    let mut tokens = chunk.to_vec();
    if let Some(b) = bos {
        tokens[0] = b;
    }
    let mut state = model.new_state(n_ctx, threads.clone())?;
    // Each row's logits are the same whatever else is in its batch, so the
    // unscored first half asks for no logits.
    model.forward(&tokens[..first], &mut state, Logits::Last, logits)?;
    model.forward(&tokens[first..n_ctx - 1], &mut state, Logits::All, logits)
}

/// Runs `f(row)` for rows `0..n` on `threads` and returns the results in
/// row order (so sums over them are the same for every thread count).
pub(crate) fn per_row<T: Send>(threads: &Threads, n: usize, f: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let parts: Mutex<Vec<(usize, Vec<T>)>> = Mutex::new(Vec::new());
    threads.split(n, |range: Range<usize>| {
        let start = range.start;
        let out: Vec<T> = range.map(&f).collect();
        parts.lock().unwrap_or_else(|e| e.into_inner()).push((start, out));
    });
    let mut parts = parts.into_inner().unwrap_or_else(|e| e.into_inner());
    parts.sort_by_key(|(start, _)| *start);
    parts.into_iter().flat_map(|(_, v)| v).collect()
}

/// `-ln softmax(logits)[token]`, with the max subtracted and the sum of
/// exponentials in f64.
pub fn nll(logits: &[f32], token: u32) -> f64 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits.iter().map(|&l| f64::from(l - max).exp()).sum();
    sum.ln() - f64::from(logits[token as usize] - max)
}

/// Perplexity of `model` on `tokens` (see the module notes), calling
/// `on_chunk(i, running)` after chunk `i`. With `base_out`, also writes
/// every scored position's distribution to it in llama.cpp's
/// `--kl-divergence-base` format (the tokens first).
pub fn perplexity(
    model: &dyn CausalLm,
    tok: &Tokenizer,
    tokens: &[u32],
    opts: &PerplexityOptions,
    mut base_out: Option<&mut BaseWriter<'_>>,
    mut on_chunk: impl FnMut(usize, &NllStats),
) -> Result<NllStats, Error> {
    let chunks = Chunking::of(tokens.len(), opts, model.n_ctx_train())?;
    let bos = bos_of(tok);
    let n_vocab = model.n_vocab();
    if let Some(w) = base_out.as_deref_mut() {
        w.header(&chunks, n_vocab, &tokens[..chunks.n_chunk * chunks.n_ctx])?;
    }
    let mut stats = NllStats::default();
    let mut logits = Vec::new();
    for i in 0..chunks.n_chunk {
        let chunk = &tokens[i * chunks.n_ctx..(i + 1) * chunks.n_ctx];
        chunk_logits(model, chunk, bos, &opts.threads, &mut logits)?;
        let targets = &chunk[chunks.first() + 1..];
        let save = base_out.is_some();
        let rows = per_row(&opts.threads, chunks.scored(), |r| {
            let row = &logits[r * n_vocab..][..n_vocab];
            let q = save.then(|| base::quantize_row(row));
            (nll(row, targets[r]), q)
        });
        for (v, q) in rows {
            stats.add(v);
            if let (Some(w), Some(q)) = (base_out.as_deref_mut(), q) {
                w.row(&q)?;
            }
        }
        on_chunk(i, &stats);
    }
    Ok(stats)
}

/// The BOS a chunk starts with, if the model adds one.
pub fn bos_of(tok: &Tokenizer) -> Option<u32> {
    tok.adds_bos().then(|| tok.bos_id()).flatten()
}

#[cfg(test)]
mod tests;
