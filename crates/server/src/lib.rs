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
pub mod conn;
pub mod embed;
pub mod error;
pub mod generate;
pub mod metrics;
pub mod queue;
pub mod registry;
pub mod rerank;
pub mod state;
pub mod test_hook;
pub mod translate;

use std::io::IsTerminal;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};

use ferrite::Threads;
use tokio::sync::oneshot;

pub use config::{Limits, ServerConfig};
pub use error::ServeError;
use registry::{Kind, Registry};
use state::AppState;

/// Runs the server until SIGTERM / Ctrl-C (then drains) or a model fails
/// to load (then returns the error).
pub fn run(config: ServerConfig) -> Result<(), ServeError> {
    return_freed_memory();
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("FERRITE_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        // Colour codes only for a terminal, not in a log file or pipe.
        .with_ansi(std::io::stderr().is_terminal())
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
    let descriptors = conn::raise_descriptor_limit();
    let max_connections = match (config.limits.max_connections, descriptors) {
        (Some(n), Some(d)) if n as u64 + conn::RESERVED_DESCRIPTORS > d => {
            return Err(ServeError::Config(format!(
                "--max-connections {n} leaves too few of the {d} file descriptors this process \
                 may open (keep {} for the rest; raise `ulimit -n` or lower the cap)",
                conn::RESERVED_DESCRIPTORS
            )));
        }
        (Some(0), _) => {
            return Err(ServeError::Config(
                "--max-connections must be at least 1".into(),
            ))
        }
        (Some(n), _) => n,
        (None, d) => conn::default_max_connections(d),
    };
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
            let threads = Threads::try_new(load_cfg.threads)?;
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
    let drainer = state.clone();
    let grace = config.grace;
    // When SIGTERM came: everything ends within the grace period of it.
    let term_at = Arc::new(OnceLock::new());
    let stop = {
        let term_at = term_at.clone();
        async move {
            tokio::select! {
                () = terminate_signal() => {
                    let _ = term_at.set(tokio::time::Instant::now());
                    drain(&drainer, grace).await;
                }
                Ok(e) = failed_rx => {
                    let _ = error_tx.send(e);
                }
            }
        }
    };
    // After `stop`, open connections finish their requests (idle ones
    // close at once), but whatever clients do, not past the grace period.
    let deadline = async move {
        if let Some(&at) = term_at.get() {
            tokio::time::sleep_until(at + grace).await;
        }
    };
    let limits = conn::ConnLimits {
        header_timeout: config.limits.header_timeout,
        idle_timeout: config.limits.idle_timeout,
        max_connections,
    };
    conn::serve(listener, api::router(state.clone()), limits, stop, deadline).await;
    match error_rx.await {
        Ok(e) => Err(e),
        Err(_) => Ok(()),
    }
}

/// glibc's malloc raises its mmap threshold each time it frees a large
/// mmapped block; blocks of that size then come from the heap, which keeps
/// them when freed. KV caches (megabytes each, allocated and freed with
/// every request) would so stay with the process after a burst: fixing the
/// threshold keeps them mmapped, returned to the system when freed.
fn return_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        extern "C" {
            fn mallopt(param: std::ffi::c_int, value: std::ffi::c_int) -> std::ffi::c_int;
        }
        const M_MMAP_THRESHOLD: std::ffi::c_int = -3;
        // SAFETY: mallopt only sets a glibc malloc tuning parameter (any
        // value is valid; it fails by returning 0, which changes nothing);
        // it is called before the server's threads start.
        unsafe {
            mallopt(M_MMAP_THRESHOLD, 256 << 10);
        }
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
                Kind::Translate(t) => t.queue.close(),
                Kind::Rerank(r) => r.queue.close(),
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
