//! What every handler shares: the models (once loaded), the metrics, the
//! limits, and the drain state that SIGTERM sets.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use tokio::sync::Notify;

use crate::config::Limits;
use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::registry::Registry;

/// Shared server state.
pub struct AppState {
    /// Set once every model is loaded (`/ready` is 503 until then).
    pub registry: OnceLock<Registry>,
    pub metrics: Metrics,
    pub limits: Limits,
    /// SHA-256 of the API key, if one is required.
    pub api_key_hash: Option<[u8; 32]>,
    /// Set by SIGTERM: `/ready` and new requests get 503.
    pub draining: AtomicBool,
    /// Inference requests not yet answered in full.
    in_flight: AtomicUsize,
    /// Signalled whenever `in_flight` drops.
    idle: Notify,
    /// Unix time the server started (the `created` of `/v1/models`).
    pub started: u64,
    /// Responses kept for `previous_response_id` (`/v1/responses` with
    /// `store: true`).
    pub responses: crate::api::responses::Store,
}

impl AppState {
    pub fn new(limits: Limits, api_key_hash: Option<[u8; 32]>, started: u64) -> AppState {
        AppState {
            registry: OnceLock::new(),
            metrics: Metrics::new(),
            limits,
            api_key_hash,
            draining: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            idle: Notify::new(),
            started,
            responses: Default::default(),
        }
    }

    /// The models, or 503 while loading or draining.
    pub fn models(&self) -> Result<&Registry, ApiError> {
        if self.draining.load(Ordering::SeqCst) {
            return Err(ApiError::unavailable("the server is shutting down"));
        }
        self.registry
            .get()
            .ok_or_else(|| ApiError::unavailable("the server is loading its models"))
    }

    /// Counts a request as in flight until the guard is dropped.
    pub fn begin(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        InFlight(self.clone())
    }

    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::SeqCst)
    }

    /// Waits until no request is in flight.
    pub async fn wait_idle(&self) {
        loop {
            let notified = self.idle.notified();
            if self.in_flight() == 0 {
                return;
            }
            notified.await;
        }
    }
}

/// An in-flight request (see [`AppState::begin`]).
pub struct InFlight(Arc<AppState>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
        self.0.idle.notify_waiters();
    }
}
