//! Translation models being served: each has a bounded queue (`--max-queue`
//! waiting requests, 429 beyond) and one worker thread that translates the
//! requests in arrival order, as the generation and embedding models have
//! (`crate::queue`). A request whose client went away is skipped when its
//! turn comes, and one being translated stops at its next decoding step
//! (its handler's `CancelOnDrop` sets the request's cancel flag). The
//! endpoint is `api::translations`.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrite::{TranslateOptions, Translator};
use tokio::sync::oneshot;

use crate::error::ApiError;
use crate::metrics::ModelMetrics;
use crate::queue::Queue;

/// One translations request, its inputs and options already checked.
pub struct TranslateJob {
    pub texts: Vec<String>,
    /// Includes the request's cancel flag.
    pub opts: TranslateOptions,
    /// One translation per input, in order.
    pub reply: oneshot::Sender<Result<Vec<String>, ApiError>>,
    pub arrived: Instant,
}

/// A translation model being served.
pub struct TranslateModel {
    pub name: String,
    pub translator: Translator,
    /// Requests waiting for the worker (the one it runs is not counted).
    pub queue: Queue<TranslateJob>,
    /// Its requests (finished, waiting) and their latency.
    pub metrics: ModelMetrics,
}

impl TranslateModel {
    pub fn new(
        name: String,
        translator: Translator,
        max_waiting: usize,
        metrics: ModelMetrics,
    ) -> TranslateModel {
        TranslateModel {
            name,
            translator,
            queue: Queue::new(max_waiting),
            metrics,
        }
    }

    /// Translates `job` and answers it (unless its client is gone).
    fn run(&self, job: TranslateJob) {
        let out = if job.reply.is_closed() {
            Err(ferrite::Error::Cancelled)
        } else {
            let refs: Vec<&str> = job.texts.iter().map(String::as_str).collect();
            // A panic fails this request (500), not the worker: the
            // translator's weights are only read and its scratch workspace
            // (behind a poison-tolerant lock) is resized at each use, so
            // nothing half-written is read again, hence AssertUnwindSafe.
            catch_unwind(AssertUnwindSafe(|| {
                crate::test_hook::panic_once("translate");
                self.translator.translate(&refs, &job.opts)
            }))
            .unwrap_or_else(|_| {
                tracing::error!(model = %self.name, "a translation panicked");
                Err(ferrite::Error::Internal(
                    "translating this input panicked".into(),
                ))
            })
        };
        // Counted whatever the outcome (a cancelled one too).
        self.metrics.requests.inc();
        self.metrics
            .latency
            .observe(job.arrived.elapsed().as_secs_f64());
        // The client may have left meanwhile; nobody is then waiting.
        let _ = job
            .reply
            .send(out.map_err(|e| ApiError::from_lib(&e, "input")));
    }
}

/// Starts the worker thread of `model`: it takes the requests in order
/// until the queue is closed and empty.
pub fn spawn(model: Arc<TranslateModel>) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name(format!("ferrite-translate-{}", model.name))
        .spawn(move || loop {
            let next = {
                let mut w = model.queue.lock();
                let job = w.requests.pop_front();
                model.metrics.queue.set(w.requests.len() as i64);
                job
            };
            match next {
                Some(job) => model.run(job),
                None if model.queue.is_closed() => return,
                None => model.queue.wait(Duration::from_millis(50)),
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::Refused;
    use ferrite::serving::Cancel;
    use ferrite::Threads;
    use ferrite::WeightFormat;

    fn tiny(max_waiting: usize) -> Arc<TranslateModel> {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../testdata/translation/tiny-marian");
        let translator =
            Translator::open_with_threads(&dir, WeightFormat::F32, Threads::new(1)).unwrap();
        let metrics = crate::metrics::Metrics::new().for_model("tiny");
        Arc::new(TranslateModel::new(
            "tiny".into(),
            translator,
            max_waiting,
            metrics,
        ))
    }

    fn job(
        cancel: &Cancel,
    ) -> (
        TranslateJob,
        oneshot::Receiver<Result<Vec<String>, ApiError>>,
    ) {
        let (tx, rx) = oneshot::channel();
        let opts = TranslateOptions {
            cancel: cancel.clone(),
            ..Default::default()
        };
        let job = TranslateJob {
            texts: vec!["Hello there.".into()],
            opts,
            reply: tx,
            arrived: Instant::now(),
        };
        (job, rx)
    }

    /// `max_waiting` requests wait, the next is refused (429); the worker
    /// answers the waiting ones in order with what `translate` gives.
    #[test]
    fn waits_up_to_max_queue_and_answers_in_order() {
        let model = tiny(2);
        let cancel = Cancel::new();
        let (a, ra) = job(&cancel);
        let (b, rb) = job(&cancel);
        let (c, _rc) = job(&cancel);
        assert_eq!(model.queue.push(a).ok(), Some(1));
        assert_eq!(model.queue.push(b).ok(), Some(2));
        assert_eq!(model.queue.push(c).err(), Some(Refused::Full));
        let expected = model
            .translator
            .translate(&["Hello there."], &TranslateOptions::default())
            .unwrap();
        let worker = spawn(model.clone()).unwrap();
        let got_a = ra.blocking_recv().unwrap().unwrap();
        let got_b = rb.blocking_recv().unwrap().unwrap();
        assert_eq!((got_a, got_b), (expected.clone(), expected));
        model.queue.close();
        worker.join().unwrap();
    }

    /// A request whose client left (receiver dropped) or whose cancel flag
    /// is set is not translated; the worker goes on to the next.
    #[test]
    fn abandoned_requests_are_skipped() {
        let model = tiny(4);
        let (gone, rx) = job(&Cancel::new());
        drop(rx);
        let cancelled = Cancel::new();
        let (stopped, r_stopped) = job(&cancelled);
        cancelled.cancel();
        let (kept, r_kept) = job(&Cancel::new());
        for j in [gone, stopped, kept] {
            model.queue.push(j).ok().unwrap();
        }
        let worker = spawn(model.clone()).unwrap();
        let err = r_stopped.blocking_recv().unwrap().unwrap_err();
        assert_eq!(err.status.as_u16(), 499, "{err:?}");
        assert_eq!(r_kept.blocking_recv().unwrap().unwrap().len(), 1);
        model.queue.close();
        worker.join().unwrap();
    }
}
