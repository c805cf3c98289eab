//! Reranking: a loaded cross-encoder and its worker thread, scheduled as
//! embeddings are (`crate::embed`): the pairs of every running request go
//! in batches of at most `embed_batch_tokens` tokens, each batch taking
//! pairs in turn from every request, so one client's 2,000 documents do
//! not hold up another's ten; a request whose client left is dropped
//! before its next batch. A pair's score is bit-identical alone or in any
//! batch (see `ferrite::Reranker`), so sharing changes no result. The
//! worker computes raw logits; each request's own activation (or none,
//! for `raw_scores`) is applied when it is answered, so requests with and
//! without it share batches.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrite::{PairTokens, RerankOptions, Reranker, Threads};
use tokio::sync::oneshot;

use crate::config::Limits;
use crate::error::ApiError;
use crate::metrics::ModelMetrics;
use crate::queue::Queue;

/// One rerank request, its pairs already tokenized (and cut to the
/// model's length).
pub struct RerankJob {
    pub pairs: Vec<PairTokens>,
    /// The logits without the model's activation.
    pub raw: bool,
    /// One score per pair, in order.
    pub reply: oneshot::Sender<Result<Vec<f32>, ApiError>>,
    pub arrived: Instant,
}

/// A cross-encoder being served.
pub struct RerankModel {
    pub name: String,
    pub reranker: Reranker,
    pub queue: Queue<RerankJob>,
    pub metrics: ModelMetrics,
    pub batch_tokens: usize,
}

impl RerankModel {
    /// Loads the cross-encoder at `path`; a model with several labels is
    /// refused (a ranking needs one score per pair).
    pub fn load(
        name: &str,
        path: &Path,
        limits: &Limits,
        metrics: ModelMetrics,
    ) -> Result<RerankModel, ferrite::Error> {
        let reranker = Reranker::open(path)?;
        if reranker.n_labels() != 1 {
            return Err(ferrite::Error::Input(format!(
                "{}: a cross-encoder with {} labels cannot rank (one score per pair needed)",
                path.display(),
                reranker.n_labels()
            )));
        }
        Ok(RerankModel {
            name: name.to_string(),
            reranker,
            queue: Queue::new(limits.max_queue),
            metrics,
            batch_tokens: limits.embed_batch_tokens.max(1),
        })
    }
}

/// Starts the worker thread of `model`.
pub fn spawn(
    model: Arc<RerankModel>,
    threads: Threads,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name(format!("ferrite-rerank-{}", model.name))
        .spawn(move || {
            let mut active: Vec<Running> = Vec::new();
            let mut turn = 0;
            loop {
                active.extend(model.queue.lock().requests.drain(..).map(Running::new));
                model.metrics.queue.set(0);
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

/// A request being scored.
struct Running {
    job: RerankJob,
    logits: Vec<Option<f32>>,
    /// Pairs handed to a batch so far (in order).
    next: usize,
    error: Option<ApiError>,
}

impl Running {
    fn new(job: RerankJob) -> Running {
        Running {
            logits: vec![None; job.pairs.len()],
            job,
            next: 0,
            error: None,
        }
    }

    fn is_done(&self) -> bool {
        self.error.is_some() || self.next == self.job.pairs.len()
    }

    fn answer(self, m: &RerankModel) {
        let act = m.reranker.activation();
        let raw = self.job.raw;
        let reply = match self.error {
            Some(e) => Err(e),
            None => self
                .logits
                .into_iter()
                .map(|x| x.map(|x| if raw { x } else { act.apply(x) }))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| ApiError::internal("a pair was not scored")),
        };
        let n_tokens: usize = self.job.pairs.iter().map(|p| p.ids.len()).sum();
        m.metrics.prompt_tokens.inc_by(n_tokens as u64);
        m.metrics.requests.inc();
        m.metrics
            .latency
            .observe(self.job.arrived.elapsed().as_secs_f64());
        let _ = self.job.reply.send(reply);
    }
}

/// Scores one batch of at most `batch_tokens` tokens, its pairs taken in
/// turn from every running request, starting with request `first`.
fn run_batch(m: &RerankModel, active: &mut [Running], first: usize, threads: &Threads) {
    let order: Vec<usize> = (first..active.len()).chain(0..first).collect();
    let mut batch: Vec<(usize, usize)> = Vec::new();
    let mut tokens = 0;
    'fill: loop {
        let mut added = false;
        for &r in &order {
            let run = &mut active[r];
            if run.next == run.job.pairs.len() {
                continue;
            }
            let t = run.job.pairs[run.next].ids.len();
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
    let pairs: Vec<&PairTokens> = batch
        .iter()
        .map(|&(r, i)| &active[r].job.pairs[i])
        .collect();
    let opts = RerankOptions {
        raw_scores: true,
        batch_size: pairs.len(),
    };
    // A panic fails this batch's requests (500), not the worker: the
    // reranker is only read, and the results are dropped, hence
    // AssertUnwindSafe.
    let scored = catch_unwind(AssertUnwindSafe(|| {
        crate::test_hook::panic_once("rerank");
        m.reranker.score_tokens(&pairs, &opts, threads)
    }));
    match scored {
        Ok(Ok(scores)) => {
            for (&(r, i), s) in batch.iter().zip(scores) {
                active[r].logits[i] = Some(s[0]);
            }
        }
        Ok(Err(e)) => {
            for &(r, _) in &batch {
                active[r].error = Some(ApiError::from_lib(&e, "documents"));
            }
        }
        Err(_) => {
            tracing::error!(model = %m.name, "a rerank batch panicked");
            for &(r, _) in &batch {
                active[r].error = Some(ApiError::internal(
                    "internal error: scoring this pair panicked",
                ));
            }
        }
    }
}
