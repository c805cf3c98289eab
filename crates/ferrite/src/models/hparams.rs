//! Reading an architecture's hyper-parameters from GGUF metadata
//! (`{arch}.embedding_length`, ...) with errors that name the key.

use crate::formats::gguf::Metadata;
use crate::Error;

/// Largest value we accept for a size hyper-parameter: far above any real
/// model, low enough that products of a few of them cannot overflow.
const MAX_SIZE: u64 = 1 << 24;

pub struct HParams<'a> {
    pub meta: &'a Metadata,
    pub arch: &'a str,
    pub source: &'a str,
}

impl HParams<'_> {
    fn key(&self, what: &str) -> String {
        format!("{}.{what}", self.arch)
    }

    fn bad(&self, what: &str, problem: &str) -> Error {
        Error::model(
            self.source,
            format!("metadata '{}': {problem}", self.key(what)),
        )
    }

    /// A required size (positive integer).
    pub fn size(&self, what: &str) -> Result<usize, Error> {
        self.opt_size(what)?
            .ok_or_else(|| self.bad(what, "missing"))
    }

    /// An optional size (positive integer).
    pub fn opt_size(&self, what: &str) -> Result<Option<usize>, Error> {
        match self.meta.get(&self.key(what)) {
            None => Ok(None),
            Some(v) => match v.as_u64() {
                Some(n) if n > 0 && n <= MAX_SIZE => Ok(Some(n as usize)),
                _ => Err(self.bad(what, &format!("{v} is not a size in 1..={MAX_SIZE}"))),
            },
        }
    }

    /// An optional float.
    pub fn opt_f32(&self, what: &str) -> Result<Option<f32>, Error> {
        match self.meta.get(&self.key(what)) {
            None => Ok(None),
            Some(v) => match v.as_f64() {
                Some(x) if x.is_finite() => Ok(Some(x as f32)),
                _ => Err(self.bad(what, &format!("{v} is not a finite number"))),
            },
        }
    }

    pub fn opt_str(&self, what: &str) -> Option<&str> {
        self.meta.get_str(&self.key(what))
    }
}
