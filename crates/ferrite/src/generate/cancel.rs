//! A flag that stops a long computation early: a server sets it when the
//! client of a request went away, and the translation loop checks it
//! between steps, so no blocking thread keeps working for nobody.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// A shared stop flag; the default one is never set. Clones share the
/// flag.
#[derive(Clone, Debug, Default)]
pub struct Cancel(Option<Arc<AtomicBool>>);

impl Cancel {
    /// A flag that [`Cancel::cancel`] can set.
    pub fn new() -> Cancel {
        Cancel(Some(Arc::new(AtomicBool::new(false))))
    }

    /// Asks every holder of a clone to stop.
    pub fn cancel(&self) {
        if let Some(flag) = &self.0 {
            flag.store(true, Ordering::Release);
        }
    }

    /// Whether [`Cancel::cancel`] was called on this flag or a clone.
    pub fn is_cancelled(&self) -> bool {
        self.0.as_ref().is_some_and(|f| f.load(Ordering::Acquire))
    }

    /// `Err(Error::Cancelled)` once the flag is set.
    pub fn check(&self) -> Result<(), crate::Error> {
        if self.is_cancelled() {
            Err(crate::Error::Cancelled)
        } else {
            Ok(())
        }
    }
}

/// Sets its flag when dropped: a request handler holds one while its work
/// runs elsewhere, and the handler is dropped if its client disconnects.
#[derive(Debug)]
pub struct CancelOnDrop(pub Cancel);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clones_share_the_flag_and_the_default_is_never_set() {
        let c = Cancel::new();
        let seen_by_worker = c.clone();
        assert!(seen_by_worker.check().is_ok());
        drop(CancelOnDrop(c));
        assert!(seen_by_worker.is_cancelled());
        assert!(matches!(
            seen_by_worker.check(),
            Err(crate::Error::Cancelled)
        ));
        let never = Cancel::default();
        never.cancel();
        assert!(!never.is_cancelled());
    }
}
