//! Reading an encoder's sizes from an HF `config.json`, where the same
//! quantity goes by several names depending on who wrote the file
//! (`hidden_size` in transformers, `n_embd` in nomic's original code).

use serde_json::Value;

use super::EncoderConfig;
use crate::models::hparams::HParams;
use crate::Error;

/// The sizes every encoder of the BERT family has.
#[derive(Clone, Debug)]
pub struct Sizes {
    pub dim: usize,
    pub n_layers: usize,
    pub n_heads: usize,
    pub ffn: usize,
    pub eps: f32,
    /// Positions the model takes (learned table rows, or the RoPE limit).
    pub n_positions: usize,
}

impl Sizes {
    /// From `{arch}.embedding_length`, `block_count`, ... as llama.cpp
    /// writes them.
    pub fn from_gguf(hp: &HParams) -> Result<Sizes, Error> {
        let dim = hp.size("embedding_length")?;
        Ok(Sizes {
            dim,
            n_layers: hp.size("block_count")?,
            n_heads: hp.heads(dim)?.n_heads,
            ffn: hp.size("feed_forward_length")?,
            eps: hp.opt_f32("attention.layer_norm_epsilon")?.unwrap_or(1e-12),
            n_positions: hp.size("context_length")?,
        })
    }

    /// From a `config.json` in transformers' names or nomic's
    /// (`n_embd`, `n_layer`, ...); `positions` lists the keys of the
    /// position limit, in order of preference.
    pub fn from_json(cfg: &JsonConfig, positions: &[&str]) -> Result<Sizes, Error> {
        Ok(Sizes {
            dim: cfg.size(&["hidden_size", "n_embd"])?,
            n_layers: cfg.size(&["num_hidden_layers", "n_layer"])?,
            n_heads: cfg.size(&["num_attention_heads", "n_head"])?,
            ffn: cfg.size(&["intermediate_size", "n_inner"])?,
            eps: cfg
                .opt_f64(&["layer_norm_eps", "layer_norm_epsilon"])?
                .unwrap_or(1e-12) as f32,
            n_positions: cfg.size(positions)?,
        })
    }

    /// The model's [`EncoderConfig`], after checking the head split
    /// (`even`: RoPE needs an even head size).
    pub fn config(
        &self,
        n_vocab: usize,
        even: bool,
        source: &str,
    ) -> Result<EncoderConfig, Error> {
        Ok(EncoderConfig {
            dim: self.dim,
            n_heads: self.n_heads,
            head_dim: self.check_heads(source, even)?,
            ffn: self.ffn,
            n_vocab,
            max_positions: self.n_positions,
            trained_positions: self.n_positions,
        })
    }

    fn check_heads(&self, source: &str, even: bool) -> Result<usize, Error> {
        let head_dim = self.dim / self.n_heads;
        if !self.dim.is_multiple_of(self.n_heads) || (even && !head_dim.is_multiple_of(2)) {
            return Err(Error::model(
                source,
                format!(
                    "hidden size {} over {} heads does not give a{} head size",
                    self.dim,
                    self.n_heads,
                    if even { "n even" } else { " whole" }
                ),
            ));
        }
        Ok(head_dim)
    }
}

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
                Some(x) => match crate::models::hparams::float_problem(k, x) {
                    None => Ok(Some(x)),
                    Some(problem) => Err(self.bad(k, &problem)),
                },
                None => Err(self.bad(k, &format!("{v} is not a number"))),
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
