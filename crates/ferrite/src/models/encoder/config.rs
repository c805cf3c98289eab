//! Reading an encoder's sizes from an HF `config.json`, where the same
//! quantity goes by several names depending on who wrote the file
//! (`hidden_size` in transformers, `n_embd` in nomic's original code).

use serde_json::Value;

use crate::Error;

/// Largest size we accept for any dimension.
const MAX_SIZE: u64 = 1 << 24;

pub struct JsonConfig<'a> {
    pub value: &'a Value,
    pub source: String,
}

impl JsonConfig<'_> {
    fn find<'k>(&self, keys: &[&'k str]) -> Option<(&'k str, &Value)> {
        keys.iter()
            .find_map(|k| self.value.get(*k).filter(|v| !v.is_null()).map(|v| (*k, v)))
    }

    fn bad(&self, key: &str, problem: &str) -> Error {
        Error::model(
            format!("{}/config.json", self.source),
            format!("'{key}': {problem}"),
        )
    }

    /// A size under the first of `keys` present.
    pub fn size(&self, keys: &[&str]) -> Result<usize, Error> {
        self.opt_size(keys)?
            .ok_or_else(|| self.bad(&keys.join("' or '"), "missing"))
    }

    pub fn opt_size(&self, keys: &[&str]) -> Result<Option<usize>, Error> {
        match self.find(keys) {
            None => Ok(None),
            Some((k, v)) => match v.as_u64() {
                Some(n) if n > 0 && n <= MAX_SIZE => Ok(Some(n as usize)),
                _ => Err(self.bad(k, &format!("{v} is not a size in 1..={MAX_SIZE}"))),
            },
        }
    }

    pub fn opt_f64(&self, keys: &[&str]) -> Result<Option<f64>, Error> {
        match self.find(keys) {
            None => Ok(None),
            Some((k, v)) => match v.as_f64() {
                Some(x) if x.is_finite() => Ok(Some(x)),
                _ => Err(self.bad(k, &format!("{v} is not a finite number"))),
            },
        }
    }

    pub fn opt_str(&self, keys: &[&str]) -> Option<&str> {
        self.find(keys).and_then(|(_, v)| v.as_str())
    }

    pub fn opt_bool(&self, keys: &[&str]) -> Option<bool> {
        self.find(keys).and_then(|(_, v)| v.as_bool())
    }

    /// An error about `key`.
    pub fn error(&self, key: &str, problem: &str) -> Error {
        self.bad(key, problem)
    }
}
