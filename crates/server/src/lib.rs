//! ferrite's OpenAI-compatible HTTP server: chat and text completions with
//! continuous batching, embeddings batched by tokens, tokenize, models,
//! health, readiness and Prometheus metrics. Inference runs on one thread
//! per model over ferrite's own worker pool; the async side only moves
//! requests and events.
//!
//! Lifecycle: bind, answer `/health` at once and `/ready` with 503 while
//! the models load, then serve. SIGTERM (or Ctrl-C) turns `/ready` and new
//! requests to 503, lets in-flight requests finish for up to the grace
//! period (then closes whatever is still open), and returns `Ok` (the
//! process exits 0).

pub mod api;
pub mod auth;
pub mod config;
pub mod embed;
pub mod error;
pub mod generate;
pub mod metrics;
pub mod queue;
pub mod registry;
pub mod state;
pub mod translate;

use std::sync::atomic::Ordering;
use std::sync::Arc;

use ferrite::parallel::Threads;
use tokio::sync::oneshot;

pub use config::{Limits, ServerConfig};
pub use error::ServeError;
use registry::{Kind, Registry};
use state::AppState;

/// Runs the server until SIGTERM / Ctrl-C (then drains) or a model fails
/// to load (then returns the error).
pub fn run(config: ServerConfig) -> Result<(), ServeError> {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("FERRITE_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .try_init();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| ServeError::io("starting the async runtime", e))?;
    let result = runtime.block_on(serve(config));
    // Tasks of requests cut off by the grace period are dropped, not awaited.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    result
}

async fn serve(config: ServerConfig) -> Result<(), ServeError> {
    let addr = format!("{}:{}", config.host, config.port);
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .map_err(|e| ServeError::io(format!("cannot listen on {addr}"), e))?;
    let local = listener
        .local_addr()
        .map_err(|e| ServeError::io("the listening address", e))?;
    let started = api::generation::now_secs();
    let state = Arc::new(AppState::new(
        config.limits,
        config.api_key.as_deref().map(auth::key_hash),
        started,
    ));
    eprintln!("ferrite: listening on http://{local}");

    let (failed_tx, failed_rx) = oneshot::channel::<ServeError>();
    let loader = state.clone();
    let load_cfg = config.clone();
    tokio::spawn(async move {
        let st = loader.clone();
        let loaded = tokio::task::spawn_blocking(move || {
            let threads = Threads::new(load_cfg.threads);
            Registry::load(&load_cfg.models, &load_cfg.limits, &st.metrics, &threads)
        })
        .await
        .unwrap_or_else(|e| {
            Err(ServeError::Model(ferrite::Error::Internal(format!(
                "loading panicked: {e}"
            ))))
        });
        match loaded {
            Ok(reg) => {
                let names: Vec<String> = reg.models.iter().map(|m| m.name.clone()).collect();
                let _ = loader.registry.set(reg);
                eprintln!("ferrite: ready, serving {}", names.join(", "));
            }
            Err(e) => {
                let _ = failed_tx.send(e);
            }
        }
    });

    let (error_tx, error_rx) = oneshot::channel::<ServeError>();
    let (expired_tx, expired_rx) = oneshot::channel::<()>();
    let drainer = state.clone();
    let grace = config.grace;
    let shutdown = async move {
        tokio::select! {
            () = terminate_signal() => {
                if !drain(&drainer, grace).await {
                    let _ = expired_tx.send(());
                }
            }
            Ok(e) = failed_rx => {
                let _ = error_tx.send(e);
            }
        }
    };
    // After the shutdown future, axum waits for every open connection;
    // once the grace period is over, stop waiting for them.
    let server = axum::serve(listener, api::router(state.clone())).with_graceful_shutdown(shutdown);
    tokio::select! {
        served = server => served.map_err(|e| ServeError::io("server error", e))?,
        Ok(()) = expired_rx => {}
    }
    match error_rx.await {
        Ok(e) => Err(e),
        Err(_) => Ok(()),
    }
}

/// SIGTERM or Ctrl-C.
async fn terminate_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}

/// Refuses new work and waits (up to `grace`) for in-flight requests;
/// returns whether they all finished.
async fn drain(state: &AppState, grace: std::time::Duration) -> bool {
    state.draining.store(true, Ordering::SeqCst);
    if let Some(reg) = state.registry.get() {
        for m in &reg.models {
            match &m.kind {
                Kind::Generate(g) => g.queue.close(),
                Kind::Embed(e) => e.queue.close(),
                Kind::Translate(_) => {}
            }
        }
    }
    eprintln!(
        "ferrite: draining {} in-flight request(s) (grace {:?})",
        state.in_flight(),
        grace
    );
    let idle = tokio::time::timeout(grace, state.wait_idle()).await.is_ok();
    if !idle {
        eprintln!(
            "ferrite: grace period over; exiting with {} request(s) in flight",
            state.in_flight()
        );
    }
    idle
}
