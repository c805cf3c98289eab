//! The bounded queue of requests waiting for a model's thread: the HTTP
//! side pushes (or is told the queue is full), the model's thread takes
//! from the front and sleeps on it when idle.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// Why a request was not queued.
#[derive(Debug, PartialEq, Eq)]
pub enum Refused {
    /// `capacity` requests are waiting already.
    Full,
    /// The server is shutting down.
    Closed,
}

impl From<Refused> for crate::error::ApiError {
    fn from(r: Refused) -> Self {
        match r {
            Refused::Full => crate::error::ApiError::queue_full(),
            Refused::Closed => crate::error::ApiError::unavailable("the server is shutting down"),
        }
    }
}

/// The waiting requests, oldest first.
pub struct Waiting<T> {
    pub requests: VecDeque<T>,
    closed: bool,
}

/// A FIFO of at most `capacity` requests of type `T`.
pub struct Queue<T> {
    state: Mutex<Waiting<T>>,
    wake: Condvar,
    capacity: usize,
}

impl<T> Queue<T> {
    pub fn new(capacity: usize) -> Queue<T> {
        Queue {
            state: Mutex::new(Waiting {
                requests: VecDeque::new(),
                closed: false,
            }),
            wake: Condvar::new(),
            capacity,
        }
    }

    /// The waiting requests, locked.
    pub fn lock(&self) -> MutexGuard<'_, Waiting<T>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `req` at the back; returns how many are waiting.
    pub fn push(&self, req: T) -> Result<usize, Refused> {
        let mut w = self.lock();
        if w.closed {
            return Err(Refused::Closed);
        }
        if w.requests.len() >= self.capacity {
            return Err(Refused::Full);
        }
        w.requests.push_back(req);
        let n = w.requests.len();
        drop(w);
        self.wake.notify_one();
        Ok(n)
    }

    /// Refuses every later push.
    pub fn close(&self) {
        self.lock().closed = true;
        self.wake.notify_one();
    }

    /// Whether [`Queue::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.lock().closed
    }

    /// Sleeps until a request is waiting or `timeout` passes.
    pub fn wait(&self, timeout: Duration) {
        let w = self.lock();
        if w.requests.is_empty() {
            // A spurious wake-up or a timeout is fine: the caller looks again.
            let _ = self.wake.wait_timeout(w, timeout);
        }
    }
}
