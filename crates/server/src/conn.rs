//! Connections: the accept loop (hyper's HTTP/1 and HTTP/2 over each TCP
//! stream, with a deadline on request heads), the cap on open connections
//! (the ones beyond it refused at once), the idle close (a connection of
//! either protocol with no request open for the header timeout is
//! closed: HTTP/2 PINGs do not keep it), and the write-stall timeouts
//! that close a connection whose client stopped reading: a write blocked
//! on the socket ([`StallLimit`]), or a response body hyper does not take
//! the next piece of (an HTTP/2 stream whose flow-control window the
//! client keeps shut: the socket is free, the stream is not), for the idle
//! timeout either way.
//!
//! Why its own loop rather than `axum::serve`: that one has no way to
//! bound how long a client may take to send a request head, so a client
//! that sends half a request holds its connection (and, before, the
//! shutdown) forever.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::Request;
use axum::Router;
use hyper::body::{Frame, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify, Semaphore};
use tokio::time::{Instant, Sleep};

/// A stream whose writes fail with `TimedOut` once one has been blocked
/// (the peer's receive window full: it reads nothing) for `limit`.
pub struct StallLimit<T> {
    inner: T,
    limit: Duration,
    /// Armed while a write is blocked, at the moment it must give up.
    timer: Pin<Box<Sleep>>,
    blocked: bool,
}

impl<T> StallLimit<T> {
    pub fn new(inner: T, limit: Duration) -> StallLimit<T> {
        StallLimit {
            inner,
            limit,
            timer: Box::pin(tokio::time::sleep(limit)),
            blocked: false,
        }
    }

    /// A blocked write: arms the timer at the first block, then reports
    /// whether it has run out.
    fn stalled(&mut self, cx: &mut Context<'_>) -> bool {
        if !self.blocked {
            self.blocked = true;
            let at = Instant::now() + self.limit;
            self.timer.as_mut().reset(at);
        }
        self.timer.as_mut().poll(cx).is_ready()
    }

    /// A write's outcome, or `TimedOut` when it has been blocked too long.
    fn limit_stall<R>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<R>>,
    ) -> Poll<io::Result<R>> {
        match polled {
            Poll::Pending if self.stalled(cx) => Poll::Ready(Err(self.timed_out())),
            Poll::Pending => Poll::Pending,
            ready => {
                self.blocked = false;
                ready
            }
        }
    }

    fn timed_out(&self) -> io::Error {
        io::Error::new(
            io::ErrorKind::TimedOut,
            format!(
                "the client read nothing for {:?}; closing the connection",
                self.limit
            ),
        )
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for StallLimit<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for StallLimit<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, data);
        self.limit_stall(cx, polled)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_flush(cx);
        self.limit_stall(cx, polled)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// How connections are served.
#[derive(Clone, Copy, Debug)]
pub struct ConnLimits {
    /// A request head must arrive within this; a connection (HTTP/1.1 or
    /// HTTP/2) with no request open for this long is closed.
    pub header_timeout: Duration,
    /// A write the client does not read for this long closes the
    /// connection ([`StallLimit`]).
    pub idle_timeout: Duration,
    /// Most connections open at once; the next ones are refused at once
    /// (a 503 written, then closed).
    pub max_connections: usize,
}

/// After SIGTERM, how long a connection with no request open may still
/// take to flush what it was writing before it is closed.
const LINGER: Duration = Duration::from_millis(500);

/// Refused connections being answered at once (each holds its socket
/// for at most [`REFUSAL_TIME`]); beyond this many they are just closed.
const MAX_REFUSING: usize = 64;
const REFUSAL_TIME: Duration = Duration::from_millis(500);

/// The body of the 503 a connection refused for the cap is sent.
const REFUSAL_BODY: &str = "{\"error\":{\"message\":\"the server has too many open connections; \
retry later\",\"type\":\"server_error\",\"param\":null,\"code\":null}}";

/// The whole 503 response a refused connection is sent before it closes.
fn refusal() -> String {
    format!(
        "HTTP/1.1 503 Service Unavailable\r\nconnection: close\r\n\
         content-type: application/json\r\nretry-after: 1\r\ncontent-length: {}\r\n\r\n{}",
        REFUSAL_BODY.len(),
        REFUSAL_BODY
    )
}

/// Serves `app` on `listener` until `stop` completes; then stops
/// accepting, lets open connections finish their requests (connections
/// with no request open, a half-sent head included, close at once) and
/// returns when they have, or when `deadline` (awaited only after `stop`)
/// completes first.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ConnLimits,
    stop: impl Future<Output = ()>,
    deadline: impl Future<Output = ()>,
) {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(Some(limits.header_timeout));
    let max = limits.max_connections.clamp(1, Semaphore::MAX_PERMITS);
    let slots = Arc::new(Semaphore::new(max));
    let refusing = Arc::new(Semaphore::new(MAX_REFUSING));
    let (stopping_tx, stopping) = watch::channel(false);
    let mut accept_errors = AcceptErrors::default();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let stream = match accepted {
                    Ok((s, _)) => s,
                    Err(e) => {
                        // Out of descriptors, say: wait rather than spin.
                        accept_errors.report(&e);
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let Ok(slot) = slots.clone().try_acquire_owned() else {
                    refuse(stream, &refusing);
                    continue;
                };
                let _ = stream.set_nodelay(true);
                let conn = Connection {
                    builder: builder.clone(),
                    app: app.clone(),
                    limits,
                    stopping: stopping.clone(),
                };
                tokio::spawn(async move {
                    conn.run(stream).await;
                    drop(slot);
                });
            }
            () = &mut stop => break,
        }
    }
    drop(listener);
    let _ = stopping_tx.send(true);
    // Every slot back: every connection has ended.
    tokio::select! {
        _ = slots.acquire_many(max as u32) => {}
        () = deadline => {}
    }
}

/// Answers a connection over the cap with a 503 and closes it, without
/// waiting on the client for more than [`REFUSAL_TIME`].
fn refuse(stream: TcpStream, refusing: &Arc<Semaphore>) {
    let Ok(permit) = refusing.clone().try_acquire_owned() else {
        return; // Dropped: closed at once.
    };
    tokio::spawn(async move {
        let _ = tokio::time::timeout(REFUSAL_TIME, async {
            let mut stream = stream;
            stream.write_all(refusal().as_bytes()).await?;
            stream.shutdown().await?;
            // Read what the client sent, so closing sends FIN, not a reset
            // that could discard the 503 before the client reads it.
            let mut sink = [0u8; 4096];
            while stream.read(&mut sink).await? > 0 {}
            Ok::<(), io::Error>(())
        })
        .await;
        drop(permit);
    });
}

/// Logs failed accepts at most once a second (a full descriptor table
/// fails every accept).
#[derive(Default)]
struct AcceptErrors {
    last: Option<Instant>,
    missed: u64,
}

impl AcceptErrors {
    fn report(&mut self, e: &io::Error) {
        let now = Instant::now();
        if self
            .last
            .is_some_and(|t| now.duration_since(t) < Duration::from_secs(1))
        {
            self.missed += 1;
            return;
        }
        tracing::warn!(error = %e, more = self.missed, "accept failed");
        self.last = Some(now);
        self.missed = 0;
    }
}

/// One accepted connection, served until it ends.
struct Connection {
    builder: auto::Builder<TokioExecutor>,
    app: Router,
    limits: ConnLimits,
    /// Becomes `true` at SIGTERM.
    stopping: watch::Receiver<bool>,
}

impl Connection {
    async fn run(mut self, stream: TcpStream) {
        let limits = self.limits;
        // A connection that sends nothing gets the header timeout too
        // (hyper's starts once it knows the protocol, from the first
        // bytes); at SIGTERM it is closed at once.
        let mut first = [0u8; 1];
        tokio::select! {
            peeked = tokio::time::timeout(limits.header_timeout, stream.peek(&mut first)) => {
                match peeked {
                    Ok(Ok(n)) if n > 0 => {}
                    _ => return,
                }
            }
            _ = self.stopping.wait_for(|s| *s) => return,
        }
        let activity = Arc::new(Activity::default());
        let io = TokioIo::new(StallLimit::new(stream, limits.idle_timeout));
        let service = Tracked {
            inner: TowerToHyperService::new(self.app.clone()),
            activity: activity.clone(),
        };
        let conn = self.builder.serve_connection_with_upgrades(io, service);
        tokio::pin!(conn);
        // Whether the connection was asked to close (GOAWAY for HTTP/2;
        // HTTP/1.1 closes after the response in progress).
        let mut closing = false;
        let mut stopping = false;
        loop {
            // With no request open for this long the connection goes:
            // hyper's header timeout does it for HTTP/1.1 but HTTP/2 has
            // none (a client answering PINGs would stay forever); once
            // asked to close, the same wait again (or `LINGER` after
            // SIGTERM) and it is dropped whatever it is doing.
            let idle_limit = if stopping {
                LINGER
            } else {
                limits.header_timeout
            };
            tokio::select! {
                ended = conn.as_mut() => {
                    if let Err(e) = ended {
                        tracing::debug!(error = %e, "connection ended");
                    }
                    return;
                }
                _ = self.stopping.wait_for(|s| *s), if !stopping => {
                    stopping = true;
                    if !closing {
                        closing = true;
                        conn.as_mut().graceful_shutdown();
                    }
                }
                () = activity.idle_for(idle_limit) => {
                    if closing {
                        return;
                    }
                    closing = true;
                    conn.as_mut().graceful_shutdown();
                }
                () = activity.stalled_for(limits.idle_timeout) => {
                    // A response the client does not take (an HTTP/2
                    // window kept shut): nothing graceful can reach it.
                    tracing::debug!(
                        limit = ?limits.idle_timeout,
                        "a response was not read; closing the connection"
                    );
                    return;
                }
            }
        }
    }
}

/// How many requests of a connection are open (from their head to the
/// end of their response body), and a wake-up when that changes; and,
/// for each response body with a piece ready, since when it has waited
/// for hyper to take it.
#[derive(Default)]
struct Activity {
    open: AtomicUsize,
    changed: Notify,
    /// Response bodies (by id) that handed out a piece, or were just made,
    /// and have not been polled since: when each started waiting.
    waiting: Mutex<HashMap<u64, Instant>>,
    next_body: AtomicU64,
}

impl Activity {
    fn enter(self: &Arc<Self>) -> Open {
        self.open.fetch_add(1, Ordering::SeqCst);
        self.changed.notify_waiters();
        Open(self.clone())
    }

    /// A body `id` waits for hyper to take its next piece from now on
    /// (`Some`), or is being polled or gone (`None`).
    fn set_waiting(&self, id: u64, since: Option<Instant>) {
        let mut waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        match since {
            Some(t) => waiting.insert(id, t),
            None => waiting.remove(&id),
        };
    }

    /// Completes once some response body has waited `limit` for hyper to
    /// take its next piece: the client is not reading it (hyper only takes
    /// a piece when the connection, and for HTTP/2 the stream's window,
    /// can carry it). A body waiting on the model is being polled, so it
    /// does not count.
    async fn stalled_for(&self, limit: Duration) {
        loop {
            let oldest = {
                let waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
                waiting.values().min().copied()
            };
            match oldest {
                Some(t) if t.elapsed() >= limit => return,
                Some(t) => tokio::time::sleep_until(t + limit).await,
                // A body that starts waiting now is seen at most half a
                // limit late.
                None => tokio::time::sleep(limit / 2).await,
            }
        }
    }

    /// Completes once no request has been open for `limit` in a row.
    async fn idle_for(&self, limit: Duration) {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if self.open.load(Ordering::SeqCst) == 0 {
                tokio::select! {
                    () = tokio::time::sleep(limit) => return,
                    () = changed => {}
                }
            } else {
                changed.await;
            }
        }
    }
}

/// An open request (see [`Activity`]); closed when dropped.
struct Open(Arc<Activity>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::SeqCst);
        self.0.changed.notify_waiters();
    }
}

/// The app as hyper calls it, counting each request open until its
/// response body has been sent (or dropped).
#[derive(Clone)]
struct Tracked {
    inner: TowerToHyperService<Router>,
    activity: Arc<Activity>,
}

type Reply = Pin<Box<dyn Future<Output = Result<axum::response::Response, Infallible>> + Send>>;

impl hyper::service::Service<Request<Incoming>> for Tracked {
    type Response = axum::response::Response;
    type Error = Infallible;
    type Future = Reply;

    fn call(&self, req: Request<Incoming>) -> Reply {
        let open = self.activity.enter();
        let answer = self.inner.call(req);
        Box::pin(async move {
            let response = answer.await?;
            let activity = open.0.clone();
            let id = activity.next_body.fetch_add(1, Ordering::Relaxed);
            // Made: unless empty, it waits for hyper's first poll.
            let empty = hyper::body::Body::is_end_stream(response.body());
            activity.set_waiting(id, (!empty).then(Instant::now));
            Ok(response.map(|body| Body::new(OpenBody { body, id, open })))
        })
    }
}

/// A response body that keeps its request counted open, and tells the
/// connection when it waits for hyper to take a piece.
struct OpenBody {
    body: Body,
    id: u64,
    open: Open,
}

impl hyper::body::Body for OpenBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let id = self.id;
        let polled = Pin::new(&mut self.body).poll_frame(cx);
        // A piece handed out: the next one waits for hyper's next poll.
        // Pending: the body waits on the model, not on the client.
        let more = matches!(polled, Poll::Ready(Some(Ok(_)))) && !self.body.is_end_stream();
        let waiting = more.then(Instant::now);
        self.open.0.set_waiting(id, waiting);
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

impl Drop for OpenBody {
    fn drop(&mut self) {
        self.open.0.set_waiting(self.id, None);
    }
}

/// The descriptor limit after raising the soft limit to the hard one
/// (Linux; `None` where it cannot be read).
pub fn raise_descriptor_limit() -> Option<u64> {
    #[cfg(unix)]
    {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes one rlimit into the struct we own.
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
            return None;
        }
        if lim.rlim_cur < lim.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            // SAFETY: setrlimit only reads the struct; raising the soft
            // limit up to the hard one needs no privilege (failure leaves
            // the old limit, which we then report).
            if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
                lim = raised;
            }
        }
        // rlim_t is u64 on 64-bit Linux, not on every Unix.
        #[allow(clippy::unnecessary_cast)]
        Some(lim.rlim_cur as u64)
    }
    #[cfg(not(unix))]
    None
}

/// Descriptors kept for everything but client connections (model files,
/// the listener, the runtime, refusals in progress).
pub const RESERVED_DESCRIPTORS: u64 = 64 + MAX_REFUSING as u64;

/// The default connection cap for a descriptor limit: half of it (at most
/// 4096), so connections never exhaust it.
pub fn default_max_connections(descriptors: Option<u64>) -> usize {
    match descriptors {
        Some(d) => (d / 2).clamp(1, 4096) as usize,
        None => 1024,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A write the peer does not read fails after the limit; one it reads
    /// goes through however long the whole response takes.
    #[tokio::test]
    async fn a_blocked_write_times_out() {
        let (near, mut far) = tokio::io::duplex(64);
        let mut s = StallLimit::new(near, Duration::from_millis(200));
        s.write_all(&[1; 64]).await.unwrap();
        let t = std::time::Instant::now();
        let err = s.write_all(&[2; 64]).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert!(t.elapsed() >= Duration::from_millis(200));
        // A reader that keeps up: no timeout, even past the limit in total.
        let (near, mut far2) = tokio::io::duplex(64);
        let reader = tokio::spawn(async move {
            let mut buf = Vec::new();
            tokio::io::AsyncReadExt::read_to_end(&mut far2, &mut buf)
                .await
                .map(|_| buf.len())
        });
        let mut s = StallLimit::new(near, Duration::from_millis(200));
        for _ in 0..10 {
            s.write_all(&[3; 100]).await.unwrap();
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        s.shutdown().await.unwrap();
        drop(s);
        assert_eq!(reader.await.unwrap().unwrap(), 1000);
        let mut buf = [0u8; 64];
        tokio::io::AsyncReadExt::read_exact(&mut far, &mut buf)
            .await
            .unwrap();
    }
}
