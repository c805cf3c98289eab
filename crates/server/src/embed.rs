//! Embeddings: a loaded embedding model and its worker thread, which runs
//! the inputs of every running request in batches of at most
//! `embed_batch_tokens` tokens (as text-embeddings-inference's
//! `max-batch-tokens`), each batch taking inputs in turn from every
//! request: a client's large request is split into many batches with
//! other clients' inputs between them, and a request whose client left is
//! dropped before its next batch. An input's vector is bit-identical alone
//! or in any batch (see `ferrite::embed`), so sharing changes no result.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrite::Threads;
use ferrite::{EmbedOptions, Embedder};
use tokio::sync::oneshot;

use crate::config::Limits;
use crate::error::ApiError;
use crate::metrics::ModelMetrics;
use crate::queue::Queue;

/// One embeddings request, its inputs already checked and counted.
pub struct EmbedJob {
    /// Each input's token ids, special tokens included.
    pub texts: Vec<Vec<u32>>,
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
        self.embedder.tokenizer().max_tokens
    }
}

/// Starts the worker thread of `model`.
pub fn spawn(
    model: Arc<EmbedModel>,
    threads: Threads,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name(format!("ferrite-embed-{}", model.name))
        .spawn(move || {
            let mut active: Vec<Running> = Vec::new();
            let mut turn = 0;
            loop {
                active.extend(model.queue.lock().requests.drain(..).map(Running::new));
                model.metrics.queue.set(0);
                // A client that left: its request stops here.
                let before = active.len();
                active.retain(|r| !r.job.reply.is_closed());
                let gone = before - active.len();
                if gone > 0 {
                    model.metrics.requests.inc_by(gone as u64);
                }
                if active.is_empty() {
                    model.queue.wait(Duration::from_millis(50));
                    continue;
                }
                turn = (turn + 1) % active.len();
                run_batch(&model, &mut active, turn, &threads);
                let (done, running): (Vec<Running>, Vec<Running>) =
                    active.drain(..).partition(Running::is_done);
                active = running;
                for r in done {
                    r.answer(&model);
                }
            }
        })
}

/// A request being embedded.
struct Running {
    job: EmbedJob,
    vectors: Vec<Option<Vec<f32>>>,
    /// Inputs handed to a batch so far (in order).
    next: usize,
    error: Option<ApiError>,
}

impl Running {
    fn new(job: EmbedJob) -> Running {
        Running {
            vectors: vec![None; job.texts.len()],
            job,
            next: 0,
            error: None,
        }
    }

    fn is_done(&self) -> bool {
        self.error.is_some() || self.next == self.job.texts.len()
    }

    fn answer(self, m: &EmbedModel) {
        let reply = match self.error {
            Some(e) => Err(e),
            None => self
                .vectors
                .into_iter()
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| ApiError::internal("an input was not embedded")),
        };
        let n_tokens: usize = self.job.n_tokens.iter().sum();
        m.metrics.prompt_tokens.inc_by(n_tokens as u64);
        m.metrics.requests.inc();
        m.metrics
            .latency
            .observe(self.job.arrived.elapsed().as_secs_f64());
        let _ = self.job.reply.send(reply);
    }
}

/// An input of some running request: `(request, input)`.
type Slot = (usize, usize);

/// Embeds one batch of at most `batch_tokens` tokens, its inputs taken in
/// turn from every running request with the same cut (starting with
/// request `first`), so a large request is split into many batches and
/// other clients' requests go between them. An input's vector is the same
/// whatever it is batched with.
fn run_batch(m: &EmbedModel, active: &mut [Running], first: usize, threads: &Threads) {
    let dims = active[first].job.dims;
    let order: Vec<usize> = (first..active.len())
        .chain(0..first)
        .filter(|&r| active[r].job.dims == dims)
        .collect();
    let mut batch: Vec<Slot> = Vec::new();
    let mut tokens = 0;
    'fill: loop {
        let mut added = false;
        for &r in &order {
            let run = &mut active[r];
            if run.next == run.job.texts.len() {
                continue;
            }
            let t = run.job.n_tokens[run.next];
            if !batch.is_empty() && tokens + t > m.batch_tokens {
                break 'fill;
            }
            batch.push((r, run.next));
            run.next += 1;
            tokens += t;
            added = true;
        }
        if !added {
            break;
        }
    }
    let texts: Vec<&[u32]> = batch
        .iter()
        .map(|&(r, i)| active[r].job.texts[i].as_slice())
        .collect();
    let opts = EmbedOptions {
        dim: dims,
        batch_size: texts.len(),
        ..EmbedOptions::default()
    };
    // A panic fails this batch's requests (500), not the worker: the
    // embedder is only read (its weights; scratch is per call) and the
    // results are dropped, so nothing half-written is used again, hence
    // AssertUnwindSafe.
    let embedded = catch_unwind(AssertUnwindSafe(|| {
        crate::test_hook::panic_once("embed");
        m.embedder.embed_tokens(&texts, &opts, threads)
    }));
    match embedded {
        Ok(Ok(vectors)) => {
            for (&(r, i), e) in batch.iter().zip(vectors) {
                active[r].vectors[i] = Some(e.vector);
            }
        }
        Ok(Err(e)) => {
            for &(r, _) in &batch {
                active[r].error = Some(ApiError::from_lib(&e, "input"));
            }
        }
        Err(_) => {
            tracing::error!(model = %m.name, "an embedding batch panicked");
            for &(r, _) in &batch {
                active[r].error = Some(ApiError::internal(
                    "internal error: embedding this input panicked",
                ));
            }
        }
    }
}
