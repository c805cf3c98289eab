//! Reads of a Hugging Face directory's JSON files, bounded in size.

use std::path::Path;

use serde_json::Value as Json;

use crate::Error;

/// Largest tokenizer file read.
const MAX_TOKENIZER_BYTES: u64 = 256 << 20;

/// The JSON file at `path`: `None` when it is missing and not `required`.
pub(super) fn read_json(path: &Path, required: bool) -> Result<Option<Json>, Error> {
    let shown = || path.display().to_string();
    let Ok(meta) = std::fs::metadata(path) else {
        if required {
            return Err(Error::model(shown(), "missing"));
        }
        return Ok(None);
    };
    if meta.len() > MAX_TOKENIZER_BYTES {
        return Err(Error::model(shown(), "too large"));
    }
    let text = std::fs::read(path).map_err(|e| Error::io(shown(), e))?;
    serde_json::from_slice(&text)
        .map(Some)
        .map_err(|e| Error::model(shown(), format!("invalid JSON: {e}")))
}
