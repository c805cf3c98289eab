//! Fuzzes the server's request handling without a socket: each input is
//! written as raw bytes into an in-memory stream that hyper's HTTP/1.1
//! server reads (request line, headers, chunked or sized bodies), routed to
//! ferrite's API with its extractors (the JSON body reader, the request
//! structs and their checks) and run on testdata's tiny Llama and BERT
//! (loaded once). Any panic, an answer that is a 5xx other than 503, or an
//! input not answered within 20 s is a bug.

#![no_main]

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::Router;
use ferrite_server::registry::Registry;
use ferrite_server::state::AppState;
use ferrite_server::{api, Limits};
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use libfuzzer_sys::fuzz_target;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

struct Harness {
    rt: tokio::runtime::Runtime,
    app: Router,
}

fn harness() -> &'static Harness {
    static H: OnceLock<Harness> = OnceLock::new();
    H.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a runtime");
        let limits = Limits {
            ctx: Some(128),
            ..Limits::default()
        };
        let state = Arc::new(AppState::new(limits, None, 0));
        let td = concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata");
        let models = [
            format!("{td}/hf-decoders/tiny-llama"),
            format!("{td}/embed/bert-tiny"),
        ];
        let threads = ferrite::Threads::try_new(1).expect("threads");
        let registry = Registry::load(&models, &limits, &state.metrics, &threads)
            .expect("testdata's tiny models load");
        let _ = state.registry.set(registry);
        Harness {
            rt,
            app: api::router(state),
        }
    })
}

fuzz_target!(|data: &[u8]| {
    let h = harness();
    let app = h.app.clone();
    let data = data.to_vec();
    let answer = h.rt.block_on(async move {
        let (client, server) = tokio::io::duplex(1 << 16);
        let conn = hyper::server::conn::http1::Builder::new()
            .half_close(true)
            .serve_connection(TokioIo::new(server), TowerToHyperService::new(app));
        let (mut rx, mut tx) = tokio::io::split(client);
        let talk = async move {
            let write = async {
                let _ = tx.write_all(&data).await;
                let _ = tx.shutdown().await;
            };
            let mut out = Vec::new();
            let read = rx.read_to_end(&mut out);
            let (_, _) = tokio::join!(write, read);
            out
        };
        tokio::time::timeout(Duration::from_secs(20), async {
            let (_, out) = tokio::join!(conn, talk);
            out
        })
        .await
    });
    let out = answer.expect("the server answered nothing within 20 s");
    // Every status line of the answers (several on a keep-alive stream).
    let text = String::from_utf8_lossy(&out);
    for line in text.split("\r\n").filter(|l| l.starts_with("HTTP/1.1 ")) {
        let status: u16 = line[9..12].parse().unwrap_or(0);
        assert!(
            !(500..600).contains(&status) || status == 503,
            "a {status} answer: {line}"
        );
    }
});
