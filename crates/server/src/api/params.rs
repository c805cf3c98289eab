//! The sampling and length fields that chat and text completions share,
//! checked into [`GenParams`] against the model and the server's limits.

use std::collections::HashMap;
use std::sync::Arc;

use ferrite::{random_seed, SamplerOptions};
use serde::Deserialize;

use crate::config::Limits;
use crate::error::ApiError;
use crate::generate::request::GenParams;
use crate::generate::GenModel;
use ferrite::Grammar;

/// `stop`: a string or a list of strings.
#[derive(Deserialize, Debug)]
#[serde(untagged)]
pub enum Stop {
    One(String),
    Many(Vec<String>),
}

#[derive(Deserialize, Debug, Default)]
pub struct StreamOptions {
    pub include_usage: Option<bool>,
}

/// Fields shared by `/v1/chat/completions` and `/v1/completions`.
#[derive(Deserialize, Debug, Default)]
pub struct Common {
    pub model: Option<String>,
    pub max_tokens: Option<i64>,
    pub max_completion_tokens: Option<i64>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub top_k: Option<i64>,
    pub min_p: Option<f32>,
    pub seed: Option<i64>,
    pub stop: Option<Stop>,
    pub n: Option<i64>,
    pub presence_penalty: Option<f32>,
    pub frequency_penalty: Option<f32>,
    pub repeat_penalty: Option<f32>,
    pub logit_bias: Option<HashMap<String, f32>>,
    pub stream: Option<bool>,
    pub stream_options: Option<StreamOptions>,
    pub response_format: Option<serde_json::Value>,
    /// ferrite's own: `false` turns speculative decoding off for this
    /// request (`ferrite serve --lookup`); the output is the same either
    /// way.
    pub speculate: Option<bool>,
}

/// The grammar `response_format` asks for (`None`: free text).
fn grammar(rf: &serde_json::Value) -> Result<Option<Arc<Grammar>>, ApiError> {
    let bad = |m: String| ApiError::bad_param("response_format", m);
    let kind = rf.get("type").and_then(|t| t.as_str()).unwrap_or("");
    match kind {
        "text" => Ok(None),
        "json_object" => Ok(Some(Arc::new(Grammar::any_object()))),
        "json_schema" => {
            let schema = rf
                .get("json_schema")
                .and_then(|j| j.get("schema"))
                .ok_or_else(|| bad("json_schema needs a 'schema'".into()))?;
            Grammar::from_schema(schema)
                .map(|g| Some(Arc::new(g)))
                .map_err(|e| bad(format!("json_schema: {e}")))
        }
        other => Err(bad(format!(
            "response_format type '{other}' is not one of text, json_object, json_schema"
        ))),
    }
}

/// Most stop strings, as OpenAI allows.
const MAX_STOPS: usize = 4;
/// Most alternatives per token in logprobs.
pub const MAX_TOP_LOGPROBS: usize = 20;

fn in_range(name: &'static str, v: f32, lo: f32, hi: f32) -> Result<f32, ApiError> {
    if v.is_finite() && (lo..=hi).contains(&v) {
        Ok(v)
    } else {
        Err(ApiError::bad_param(
            name,
            format!("{name} must be between {lo} and {hi}, got {v}"),
        ))
    }
}

impl Common {
    /// Whether the reply streams.
    pub fn stream(&self) -> bool {
        self.stream == Some(true)
    }

    /// Whether a streamed reply ends with a usage chunk.
    pub fn include_usage(&self) -> bool {
        self.stream_options
            .as_ref()
            .and_then(|o| o.include_usage)
            .unwrap_or(false)
    }

    /// Checks every field; `prompt_len` is the prompt's token count,
    /// `default_max` the reply length when none is asked for (`None`: the
    /// rest of the context).
    pub fn params(
        &self,
        m: &GenModel,
        limits: &Limits,
        prompt_len: usize,
        default_max: Option<usize>,
        logprobs: Option<usize>,
    ) -> Result<GenParams, ApiError> {
        let json = self
            .response_format
            .as_ref()
            .map(grammar)
            .transpose()?
            .flatten();
        if self.stream_options.is_some() && !self.stream() {
            return Err(ApiError::bad_param(
                "stream_options",
                "stream_options is only allowed with stream: true",
            ));
        }
        let n = self.n.unwrap_or(1);
        let max_n = limits.max_n.min(limits.max_seqs) as i64;
        if !(1..=max_n).contains(&n) {
            return Err(ApiError::bad_param(
                "n",
                format!("n must be between 1 and {max_n}, got {n}"),
            ));
        }
        let n = n as usize;
        let ctx = m.ctx;
        if prompt_len == 0 {
            return Err(ApiError::bad_param(
                "prompt",
                "the prompt is empty (no tokens)",
            ));
        }
        if prompt_len >= ctx {
            return Err(ApiError {
                code: Some("context_length_exceeded"),
                ..ApiError::bad_request(format!(
                    "the prompt is {prompt_len} tokens; this model's context is {ctx} tokens, \
                     leaving no room for a reply"
                ))
            });
        }
        let asked = self.max_completion_tokens.or(self.max_tokens);
        let max_tokens = match asked {
            Some(v) if v < 1 => {
                return Err(ApiError::bad_param(
                    "max_tokens",
                    format!("max_tokens must be at least 1, got {v}"),
                ))
            }
            Some(v) => usize::try_from(v).unwrap_or(usize::MAX),
            None => default_max
                .unwrap_or(ctx - prompt_len)
                .min(ctx - prompt_len),
        };
        if prompt_len.saturating_add(max_tokens) > ctx {
            return Err(ApiError {
                code: Some("context_length_exceeded"),
                ..ApiError::bad_param(
                    "max_tokens",
                    format!(
                        "this model's context is {ctx} tokens; you asked for {} \
                         ({prompt_len} in the prompt, {max_tokens} for the reply)",
                        prompt_len + max_tokens
                    ),
                )
            });
        }
        let need = m.kv_need(prompt_len, 0, max_tokens).total(n);
        if need > m.kv_budget {
            return Err(ApiError::bad_request(format!(
                "this request needs {} MiB of KV cache, more than the server's budget of {} MiB \
                 (lower max_tokens or n)",
                need >> 20,
                m.kv_budget >> 20
            )));
        }
        let stop = match &self.stop {
            None => Vec::new(),
            Some(Stop::One(s)) => vec![s.clone()],
            Some(Stop::Many(v)) => v.clone(),
        };
        if stop.len() > MAX_STOPS {
            return Err(ApiError::bad_param(
                "stop",
                format!("at most {MAX_STOPS} stop strings, got {}", stop.len()),
            ));
        }
        let stop = stop.into_iter().filter(|s| !s.is_empty()).collect();
        let defaults = SamplerOptions::default();
        let n_vocab = m.lm.n_vocab();
        let mut logit_bias = Vec::new();
        for (k, &v) in self.logit_bias.iter().flatten() {
            let id: u32 = k
                .parse()
                .ok()
                .filter(|&id| (id as usize) < n_vocab)
                .ok_or_else(|| {
                    ApiError::bad_param(
                        "logit_bias",
                        format!("logit_bias key '{k}' is not a token id below {n_vocab}"),
                    )
                })?;
            logit_bias.push((id, in_range("logit_bias", v, -100.0, 100.0)?));
        }
        // One order whatever the JSON object's order.
        logit_bias.sort_by_key(|&(id, _)| id);
        let top_k = match self.top_k {
            None => defaults.top_k,
            Some(k) if k < 0 => {
                return Err(ApiError::bad_param(
                    "top_k",
                    format!("top_k must be >= 0, got {k}"),
                ))
            }
            Some(k) => usize::try_from(k).unwrap_or(usize::MAX),
        };
        let opt = |v: Option<f32>, d: f32| v.unwrap_or(d);
        let sampler = SamplerOptions {
            temperature: in_range(
                "temperature",
                opt(self.temperature, defaults.temperature),
                0.0,
                2.0,
            )?,
            top_k,
            top_p: in_range("top_p", opt(self.top_p, defaults.top_p), 0.0, 1.0)?,
            min_p: in_range("min_p", opt(self.min_p, defaults.min_p), 0.0, 1.0)?,
            repeat_penalty: in_range("repeat_penalty", opt(self.repeat_penalty, 1.0), 0.01, 10.0)?,
            presence_penalty: in_range(
                "presence_penalty",
                opt(self.presence_penalty, 0.0),
                -2.0,
                2.0,
            )?,
            frequency_penalty: in_range(
                "frequency_penalty",
                opt(self.frequency_penalty, 0.0),
                -2.0,
                2.0,
            )?,
            // Penalties look at everything generated (not the prompt).
            penalty_last_n: max_tokens,
            logit_bias,
            seed: self.seed.map_or_else(random_seed, |s| s as u64),
        };
        Ok(GenParams {
            tool_calls: None,
            json,
            sampler,
            max_tokens,
            stop,
            n,
            logprobs,
            speculate: self.speculate.unwrap_or(true),
        })
    }
}
