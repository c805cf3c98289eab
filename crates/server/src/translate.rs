//! Translation models being served: each translates one request at a time
//! and admits `--max-queue` more to wait, refusing the rest (429), as the
//! generation and embedding queues do. The endpoint is
//! `api::translations`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use ferrite::translate::Translator;

use crate::metrics::ModelMetrics;

/// A translation model being served.
pub struct TranslateModel {
    pub name: String,
    pub translator: Translator,
    /// Requests admitted: the one translating and those waiting for it.
    admitted: AtomicUsize,
    /// Most requests that may wait while one translates.
    max_waiting: usize,
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
            admitted: AtomicUsize::new(0),
            max_waiting,
            metrics,
        }
    }

    /// Admits one more request unless `max_waiting` are already waiting;
    /// the request counts until the returned guard is dropped.
    pub fn admit(self: &Arc<Self>) -> Option<Admitted> {
        let before = self.admitted.fetch_add(1, Ordering::AcqRel);
        self.metrics.queue.set(before as i64);
        let admitted = Admitted(self.clone());
        (before <= self.max_waiting).then_some(admitted)
    }
}

/// One admitted request of a [`TranslateModel`] (see
/// [`TranslateModel::admit`]); dropping it lets another in.
pub struct Admitted(Arc<TranslateModel>);

impl Drop for Admitted {
    fn drop(&mut self) {
        let left = self.0.admitted.fetch_sub(1, Ordering::AcqRel) - 1;
        self.0.metrics.queue.set(left.saturating_sub(1) as i64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrite::models::seq2seq::weights::WeightFormat;
    use ferrite::parallel::Threads;

    /// One translating and `max_waiting` waiting are admitted, the next is
    /// refused (429), and a dropped guard lets one more in.
    #[test]
    fn admits_one_running_and_max_waiting() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../testdata/translation/tiny-marian");
        let translator =
            Translator::open_with_threads(&dir, WeightFormat::F32, Threads::new(1)).unwrap();
        let metrics = crate::metrics::Metrics::new().for_model("tiny");
        let model = Arc::new(TranslateModel::new("tiny".into(), translator, 2, metrics));
        let running = model.admit().expect("the first runs");
        let waiting: Vec<Admitted> = (0..2).map(|_| model.admit().expect("may wait")).collect();
        assert!(model.admit().is_none(), "a fourth is refused");
        assert!(model.admit().is_none(), "and a fifth");
        drop(running);
        let next = model.admit().expect("room again");
        assert!(model.admit().is_none());
        drop((waiting, next));
        assert_eq!(model.admitted.load(Ordering::Acquire), 0);
    }
}
