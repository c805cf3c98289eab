//! Embeddings: a loaded embedding model and its worker thread, which
//! takes every waiting request at once and runs their inputs in batches of
//! at most `embed_batch_tokens` tokens (a client's large batch is split,
//! small requests are merged), as text-embeddings-inference's
//! `max-batch-tokens` does. An input's vector is bit-identical alone or in
//! any batch (see `ferrite::embed`), so merging changes no result.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrite::embed::{EmbedOptions, Embedder};
use ferrite::parallel::Threads;
use tokio::sync::oneshot;

use crate::config::Limits;
use crate::error::ApiError;
use crate::metrics::ModelMetrics;
use crate::queue::Queue;

/// One embeddings request, its inputs already checked and counted.
pub struct EmbedJob {
    pub texts: Vec<String>,
    /// Tokens of each input (with special tokens).
    pub n_tokens: Vec<usize>,
    /// Matryoshka cut, if asked for.
    pub dims: Option<usize>,
    /// One vector per input, in order.
    pub reply: oneshot::Sender<Result<Vec<Vec<f32>>, ApiError>>,
    pub arrived: Instant,
}

/// An embedding model being served.
pub struct EmbedModel {
    pub name: String,
    pub embedder: Embedder,
    pub queue: Queue<EmbedJob>,
    pub metrics: ModelMetrics,
    pub batch_tokens: usize,
}

impl EmbedModel {
    pub fn load(
        name: &str,
        path: &Path,
        limits: &Limits,
        metrics: ModelMetrics,
    ) -> Result<EmbedModel, ferrite::Error> {
        let mut embedder = Embedder::open(path)?;
        let products = limits.embed_products;
        embedder
            .use_products(products)
            .map_err(|e| ferrite::Error::Input(format!("{}: {e}", products.name())))?;
        Ok(EmbedModel {
            name: name.to_string(),
            embedder,
            queue: Queue::new(limits.max_queue),
            metrics,
            batch_tokens: limits.embed_batch_tokens.max(1),
        })
    }

    /// Width of the vectors before any cut.
    pub fn dim(&self) -> usize {
        self.embedder.dim()
    }

    /// The cut a request's `dimensions` asks for. A Matryoshka-trained
    /// model takes the sizes `ferrite embed --dim` takes (nomic-embed-text:
    /// 64..768, its recipe applied even at full width); any other model
    /// takes only its full width, which changes nothing: cutting a vector
    /// not trained for it gives poor embeddings, and OpenAI likewise
    /// refuses `dimensions` for models without it.
    pub fn cut(&self, dimensions: i64) -> Result<Option<usize>, ApiError> {
        let dim = self.dim();
        if !self.embedder.matryoshka() {
            return if dimensions == dim as i64 {
                Ok(None)
            } else {
                Err(ApiError::bad_param(
                    "dimensions",
                    format!(
                        "'{}' was not trained for shortened (Matryoshka) embeddings: \
                         dimensions may only be its full width, {dim}; got {dimensions}",
                        self.name
                    ),
                ))
            };
        }
        let dims = self.embedder.dims();
        match usize::try_from(dimensions) {
            Ok(d) if dims.contains(&d) => Ok(Some(d)),
            _ => Err(ApiError::bad_param(
                "dimensions",
                format!(
                    "dimensions must be between {} and {} for '{}', got {dimensions}",
                    dims.start(),
                    dims.end(),
                    self.name
                ),
            )),
        }
    }

    /// Most tokens of one input.
    pub fn max_tokens(&self) -> usize {
        self.embedder.tokenizer.max_tokens
    }
}

/// Starts the worker thread of `model`.
pub fn spawn(
    model: Arc<EmbedModel>,
    threads: Threads,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name(format!("ferrite-embed-{}", model.name))
        .spawn(move || loop {
            let jobs: Vec<EmbedJob> = model.queue.lock().requests.drain(..).collect();
            model.metrics.queue.set(0);
            if jobs.is_empty() {
                model.queue.wait(Duration::from_millis(50));
                continue;
            }
            run_jobs(&model, jobs, &threads);
        })
}

/// An input of some job: `(job, input)`.
type Slot = (usize, usize);

/// Embeds the inputs of `jobs` and answers each.
fn run_jobs(m: &EmbedModel, jobs: Vec<EmbedJob>, threads: &Threads) {
    let mut jobs: Vec<EmbedJob> = jobs.into_iter().filter(|j| !j.reply.is_closed()).collect();
    let mut results: Vec<Vec<Option<Vec<f32>>>> =
        jobs.iter().map(|j| vec![None; j.texts.len()]).collect();
    let mut errors: Vec<Option<ApiError>> = vec![None; jobs.len()];
    // Inputs with the same cut can share a batch.
    let mut cuts: Vec<Option<usize>> = jobs.iter().map(|j| j.dims).collect();
    cuts.sort();
    cuts.dedup();
    for dims in cuts {
        let slots: Vec<Slot> = jobs
            .iter()
            .enumerate()
            .filter(|(_, j)| j.dims == dims)
            .flat_map(|(ji, j)| (0..j.texts.len()).map(move |i| (ji, i)))
            .collect();
        for batch in token_batches(&slots, |(j, i)| jobs[j].n_tokens[i], m.batch_tokens) {
            let texts: Vec<&str> = batch
                .iter()
                .map(|&(j, i)| jobs[j].texts[i].as_str())
                .collect();
            let opts = EmbedOptions {
                dim: dims,
                batch_size: texts.len(),
                ..EmbedOptions::default()
            };
            match m.embedder.embed(&texts, &opts, threads) {
                Ok(vectors) => {
                    for (&(j, i), e) in batch.iter().zip(vectors) {
                        results[j][i] = Some(e.vector);
                    }
                }
                Err(e) => {
                    for &(j, _) in batch {
                        errors[j] = Some(ApiError::from_lib(&e, "input"));
                    }
                }
            }
        }
    }
    for ((job, vectors), error) in jobs.drain(..).zip(results).zip(errors) {
        let n_tokens: usize = job.n_tokens.iter().sum();
        let reply = match error {
            Some(e) => Err(e),
            None => vectors
                .into_iter()
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| ApiError::internal("an input was not embedded")),
        };
        m.metrics.prompt_tokens.inc_by(n_tokens as u64);
        m.metrics.requests.inc();
        m.metrics
            .latency
            .observe(job.arrived.elapsed().as_secs_f64());
        let _ = job.reply.send(reply);
    }
}

/// Consecutive runs of `slots` whose token counts total at most `limit`
/// (an input larger than `limit` is a batch of its own).
fn token_batches<T: Copy>(slots: &[T], tokens: impl Fn(T) -> usize, limit: usize) -> Vec<&[T]> {
    let mut out = Vec::new();
    let (mut start, mut sum) = (0, 0);
    for (i, &s) in slots.iter().enumerate() {
        let t = tokens(s);
        if i > start && sum + t > limit {
            out.push(&slots[start..i]);
            start = i;
            sum = 0;
        }
        sum += t;
    }
    if start < slots.len() {
        out.push(&slots[start..]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::token_batches;

    #[test]
    fn batches_split_by_tokens() {
        let sizes = [3usize, 4, 2, 10, 1];
        let b = token_batches(&sizes, |s| s, 7);
        assert_eq!(b, vec![&[3, 4][..], &[2][..], &[10][..], &[1][..]]);
        assert!(token_batches(&[] as &[usize], |s| s, 7).is_empty());
    }
}
