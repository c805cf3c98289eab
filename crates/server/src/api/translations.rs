//! `POST /v1/translations` (ferrite's own endpoint): `{model, input:
//! string | [string], beams?, max_length?}` -> `{object: "list", model,
//! data: [{object: "translation", index, translation}]}`, one translation
//! per input in order. The request goes to the model's queue and its
//! worker (`crate::translate`): at most `--max-queue` wait while one runs,
//! later ones get 429 at once. A request whose client disconnects stops at
//! its next decoding step (or does not start).

use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use ferrite::serving::{Cancel, CancelOnDrop};
use ferrite::{TranslateOptions, MAX_BEAMS};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::oneshot;

use super::extract::ApiJson;
use super::TextInput as Input;
use crate::error::ApiError;
use crate::state::AppState;
use crate::translate::TranslateJob;

/// Most inputs one request may hold.
const MAX_INPUTS: usize = 256;

#[derive(Deserialize, Debug)]
pub struct TranslationsRequest {
    model: Option<String>,
    input: Option<Input>,
    beams: Option<i64>,
    max_length: Option<i64>,
}

pub async fn handle(
    State(state): State<Arc<AppState>>,
    ApiJson(req): ApiJson<TranslationsRequest>,
) -> Result<Json<Value>, ApiError> {
    let arrived = std::time::Instant::now();
    let model = state.models()?.translator(req.model.as_deref())?;
    let texts = match req.input {
        Some(Input::One(t)) => vec![t],
        Some(Input::Many(v)) if !v.is_empty() && v.len() <= MAX_INPUTS => v,
        None | Some(Input::Many(_)) | Some(Input::Other(_)) => {
            return Err(ApiError::bad_param(
                "input",
                format!("input must be a string or a list of 1 to {MAX_INPUTS} strings"),
            ))
        }
    };
    let beams = match req.beams {
        None => None,
        Some(b) if (1..=MAX_BEAMS as i64).contains(&b) => Some(b as usize),
        Some(b) => {
            return Err(ApiError::bad_param(
                "beams",
                format!("beams must be between 1 and {MAX_BEAMS}, got {b}"),
            ))
        }
    };
    let max_length = match req.max_length {
        None => None,
        Some(m) if (2..=4096).contains(&m) => Some(m as usize),
        Some(m) => {
            return Err(ApiError::bad_param(
                "max_length",
                format!("max_length must be between 2 and 4096, got {m}"),
            ))
        }
    };
    let _guard = state.begin();
    let cancel = Cancel::new();
    // This handler is dropped if the client disconnects; the flag then
    // stops the translation (or keeps a waiting one from starting).
    let _cancel_on_drop = CancelOnDrop(cancel.clone());
    let opts = TranslateOptions {
        beams,
        max_length,
        cancel,
        ..Default::default()
    };
    let (reply, rx) = oneshot::channel();
    let job = TranslateJob {
        texts,
        opts,
        reply,
        arrived,
    };
    let waiting = model.queue.push(job)?;
    model.metrics.queue.set(waiting as i64);
    let out = rx
        .await
        .map_err(|_| ApiError::internal("the translation worker dropped the request"))??;
    let data: Vec<Value> = out
        .iter()
        .enumerate()
        .map(|(i, t)| json!({"object": "translation", "index": i, "translation": t}))
        .collect();
    Ok(Json(
        json!({"object": "list", "model": model.name, "data": data}),
    ))
}
