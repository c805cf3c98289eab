//! Connections: the accept loop (hyper's HTTP/1 and HTTP/2 over each TCP
//! stream, with a deadline on request heads) and the write-stall timeout
//! that closes a connection whose client stopped reading.
//!
//! Why its own loop rather than `axum::serve`: that one has no way to
//! bound how long a client may take to send a request head, so a client
//! that sends half a request holds its connection (and, before, the
//! shutdown) forever.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
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
    pub header_timeout: Duration,
    pub idle_timeout: Duration,
}

/// Serves `app` on `listener` until `stop` completes; then stops
/// accepting, lets open connections finish their requests (idle ones
/// close at once) and returns when they have, or when `deadline`
/// (awaited only after `stop`) completes first.
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
    let graceful = GracefulShutdown::new();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let stream = match accepted {
                    Ok((s, _)) => s,
                    Err(e) => {
                        // Out of descriptors, say: wait rather than spin.
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                let watcher = graceful.watcher();
                let builder = builder.clone();
                let app = app.clone();
                tokio::spawn(async move {
                    // A connection that sends nothing gets the header
                    // timeout too (hyper's starts once it knows the
                    // protocol, from the first bytes).
                    let mut first = [0u8; 1];
                    match tokio::time::timeout(limits.header_timeout, stream.peek(&mut first)).await {
                        Ok(Ok(n)) if n > 0 => {}
                        _ => return,
                    }
                    let io = TokioIo::new(StallLimit::new(stream, limits.idle_timeout));
                    let service = TowerToHyperService::new(app);
                    let conn = builder.serve_connection_with_upgrades(io, service).into_owned();
                    if let Err(e) = watcher.watch(conn).await {
                        tracing::debug!(error = %e, "connection ended");
                    }
                });
            }
            () = &mut stop => break,
        }
    }
    drop(listener);
    tokio::select! {
        () = graceful.shutdown() => {}
        () = deadline => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

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
