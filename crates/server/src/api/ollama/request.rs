//! Ollama's request bodies, checked and translated into the OpenAI
//! requests the existing routes serve (`/v1/chat/completions`,
//! `/v1/completions`, `/v1/embeddings`): Ollama's option names become
//! OpenAI's fields, `format` becomes `response_format`, messages keep
//! their tool calls (arguments as objects, which the chat route takes).

use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::error::ApiError;

/// `options` Ollama clients send that change nothing here (threads, GPU
/// layers, memory mapping, batch size, the context size: the server's own
/// settings decide those). Accepted and ignored.
const IGNORED_OPTIONS: [&str; 12] = [
    "num_ctx",
    "num_keep",
    "num_batch",
    "num_gpu",
    "main_gpu",
    "low_vram",
    "num_thread",
    "use_mmap",
    "use_mlock",
    "numa",
    "vocab_only",
    "f16_kv",
];

/// `options` that map onto the OpenAI fields of the same meaning.
const SAMPLING_OPTIONS: [(&str, &str); 10] = [
    ("num_predict", "max_tokens"),
    ("temperature", "temperature"),
    ("top_k", "top_k"),
    ("top_p", "top_p"),
    ("min_p", "min_p"),
    ("seed", "seed"),
    ("stop", "stop"),
    ("repeat_penalty", "repeat_penalty"),
    ("presence_penalty", "presence_penalty"),
    ("frequency_penalty", "frequency_penalty"),
];

/// What `/api/chat` and `/api/generate` share.
#[derive(Deserialize, Debug)]
pub struct Shared {
    pub model: String,
    pub format: Option<Value>,
    pub options: Option<Map<String, Value>>,
    pub stream: Option<bool>,
    /// How long the model stays loaded: every served model stays loaded,
    /// so any value is accepted.
    #[allow(dead_code)]
    pub keep_alive: Option<Value>,
    pub think: Option<Value>,
}

#[derive(Deserialize, Debug)]
pub struct ChatMessage {
    pub role: String,
    #[serde(default)]
    pub content: String,
    pub images: Option<Vec<Value>>,
    pub tool_calls: Option<Vec<Value>>,
    /// A tool result's function name.
    pub tool_name: Option<String>,
    /// Ollama's reasoning text of an earlier reply (not shown to the
    /// template).
    #[allow(dead_code)]
    pub thinking: Option<String>,
}

/// `POST /api/chat`.
#[derive(Deserialize, Debug)]
pub struct ChatRequest {
    pub messages: Option<Vec<ChatMessage>>,
    pub tools: Option<Vec<Value>>,
    #[serde(flatten)]
    pub shared: Shared,
}

/// `POST /api/generate`.
#[derive(Deserialize, Debug)]
pub struct GenerateRequest {
    #[serde(default)]
    pub prompt: String,
    pub system: Option<String>,
    pub suffix: Option<String>,
    pub template: Option<String>,
    pub context: Option<Vec<Value>>,
    pub raw: Option<bool>,
    pub images: Option<Vec<Value>>,
    #[serde(flatten)]
    pub shared: Shared,
}

/// `POST /api/embed` (`input`) and `/api/embeddings` (`prompt`).
#[derive(Deserialize, Debug)]
pub struct EmbedRequest {
    pub model: String,
    pub input: Option<Value>,
    pub prompt: Option<String>,
    pub dimensions: Option<i64>,
    /// Whether to cut inputs longer than the model takes: the embeddings
    /// route refuses those either way.
    #[allow(dead_code)]
    pub truncate: Option<bool>,
    #[allow(dead_code)]
    pub options: Option<Map<String, Value>>,
    #[allow(dead_code)]
    pub keep_alive: Option<Value>,
}

fn bad(param: &'static str, message: impl Into<String>) -> ApiError {
    ApiError::bad_param(param, message)
}

impl Shared {
    /// Whether the reply streams (Ollama's default: yes).
    pub fn stream(&self) -> bool {
        self.stream != Some(false)
    }

    /// The OpenAI request fields of the model, options and format (the
    /// reply is always streamed inside: the Ollama side gathers it).
    pub fn openai(&self, model: &str) -> Result<Map<String, Value>, ApiError> {
        if matches!(
            &self.think,
            Some(Value::Bool(true)) | Some(Value::String(_))
        ) {
            return Err(bad(
                "think",
                format!("\"{model}\" does not support thinking"),
            ));
        }
        let mut out = Map::new();
        out.insert("model".into(), json!(model));
        out.insert("stream".into(), json!(true));
        out.insert("stream_options".into(), json!({"include_usage": true}));
        for (k, v) in self.options.iter().flatten() {
            if let Some((_, to)) = SAMPLING_OPTIONS.iter().find(|(from, _)| from == k) {
                // num_predict -1 (until the end) and -2 (fill the context):
                // the rest of the context, the chat route's default.
                if k == "num_predict" && matches!(v.as_i64(), Some(-1 | -2)) {
                    continue;
                }
                if !v.is_null() {
                    out.insert((*to).into(), v.clone());
                }
            } else if IGNORED_OPTIONS.contains(&k.as_str()) {
                if k == "num_ctx" && v.as_u64().is_none_or(|n| n == 0) {
                    return Err(bad(
                        "options",
                        format!("num_ctx must be a positive integer, got {v}"),
                    ));
                }
            } else {
                return Err(bad(
                    "options",
                    format!(
                        "option '{k}' is not supported (supported: {}; accepted and ignored: {})",
                        SAMPLING_OPTIONS.map(|(k, _)| k).join(", "),
                        IGNORED_OPTIONS.join(", ")
                    ),
                ));
            }
        }
        match &self.format {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) if s.is_empty() => {}
            Some(Value::String(s)) if s == "json" => {
                out.insert("response_format".into(), json!({"type": "json_object"}));
            }
            Some(schema @ Value::Object(_)) => {
                out.insert(
                    "response_format".into(),
                    json!({"type": "json_schema", "json_schema": {"name": "format", "schema": schema}}),
                );
            }
            Some(other) => {
                return Err(bad(
                    "format",
                    format!("format must be \"json\" or a JSON schema object, got {other}"),
                ))
            }
        }
        Ok(out)
    }
}

/// An Ollama message as an OpenAI one: an assistant's calls keep their
/// arguments as objects, a tool result names its function.
fn message(i: usize, m: &ChatMessage) -> Result<Value, ApiError> {
    if m.images.as_ref().is_some_and(|v| !v.is_empty()) {
        return Err(bad(
            "messages",
            format!("messages[{i}]: images are not supported"),
        ));
    }
    let mut out = json!({"role": m.role, "content": m.content});
    if let Some(calls) = &m.tool_calls {
        let calls: Vec<Value> = calls
            .iter()
            .map(|c| {
                let f = c.get("function").unwrap_or(c);
                json!({"type": "function", "function": {
                    "name": f.get("name").cloned().unwrap_or(Value::Null),
                    "arguments": f.get("arguments").cloned().unwrap_or(json!({}))}})
            })
            .collect();
        out["tool_calls"] = Value::Array(calls);
    }
    if let Some(name) = &m.tool_name {
        out["name"] = json!(name);
    }
    Ok(out)
}

impl ChatRequest {
    /// The `/v1/chat/completions` body (`None`: no messages, which
    /// Ollama answers by loading the model).
    pub fn openai(&self, model: &str) -> Result<Option<Value>, ApiError> {
        let mut out = self.shared.openai(model)?;
        let msgs = match &self.messages {
            None => return Ok(None),
            Some(m) if m.is_empty() => return Ok(None),
            Some(m) => m,
        };
        let msgs = msgs
            .iter()
            .enumerate()
            .map(|(i, m)| message(i, m))
            .collect::<Result<Vec<_>, _>>()?;
        out.insert("messages".into(), Value::Array(msgs));
        if let Some(tools) = &self.tools {
            if !tools.is_empty() {
                out.insert("tools".into(), json!(tools));
            }
        }
        Ok(Some(Value::Object(out)))
    }
}

/// Which route a generate request goes to.
pub enum Generate {
    /// Nothing to generate (Ollama loads the model).
    Load,
    /// Through the chat template: `/v1/chat/completions`.
    Chat(Value),
    /// `raw`: the prompt as it is, `/v1/completions`.
    Raw(Value),
}

impl GenerateRequest {
    pub fn openai(&self, model: &str) -> Result<Generate, ApiError> {
        let mut out = self.shared.openai(model)?;
        if self.images.as_ref().is_some_and(|v| !v.is_empty()) {
            return Err(bad("images", "images are not supported"));
        }
        if self.template.as_ref().is_some_and(|t| !t.is_empty()) {
            return Err(bad(
                "template",
                "a template override is not supported (the model's own is used)",
            ));
        }
        if self.suffix.as_ref().is_some_and(|t| !t.is_empty()) {
            return Err(bad(
                "suffix",
                "suffix (fill in the middle) is not supported here",
            ));
        }
        if self.context.as_ref().is_some_and(|t| !t.is_empty()) {
            return Err(bad(
                "context",
                "context (an earlier reply's tokens) is not supported: send the text",
            ));
        }
        let system = self.system.as_deref().unwrap_or("");
        if self.prompt.is_empty() && system.is_empty() {
            return Ok(Generate::Load);
        }
        if self.raw == Some(true) {
            out.insert("prompt".into(), json!(self.prompt));
            return Ok(Generate::Raw(Value::Object(out)));
        }
        let mut msgs = Vec::new();
        if !system.is_empty() {
            msgs.push(json!({"role": "system", "content": system}));
        }
        msgs.push(json!({"role": "user", "content": self.prompt}));
        out.insert("messages".into(), Value::Array(msgs));
        Ok(Generate::Chat(Value::Object(out)))
    }
}

impl EmbedRequest {
    /// The `/v1/embeddings` body; `legacy`: `/api/embeddings` (`prompt`).
    pub fn openai(&self, legacy: bool) -> Result<Value, ApiError> {
        let input = if legacy {
            match &self.prompt {
                Some(p) => json!(p),
                None => return Err(bad("prompt", "prompt is required")),
            }
        } else {
            match &self.input {
                Some(i @ (Value::String(_) | Value::Array(_))) => i.clone(),
                Some(other) => {
                    return Err(bad(
                        "input",
                        format!("input must be a string or a list of strings, got {other}"),
                    ))
                }
                None => return Err(bad("input", "input is required")),
            }
        };
        let mut out = json!({"model": self.model, "input": input});
        if let Some(d) = self.dimensions {
            out["dimensions"] = json!(d);
        }
        Ok(out)
    }
}
