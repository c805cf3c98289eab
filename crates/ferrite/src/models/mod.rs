//! Model architectures. Each file holds a typed config read from the file's
//! metadata, a loader, and a forward pass built from `crate::layers`.

pub mod decoder;
pub mod encoder;
pub mod gemma3;
pub mod hparams;
pub mod llama;

use std::path::Path;
use std::sync::Arc;

use crate::formats::gguf::GgufFile;
use crate::parallel::Threads;
use crate::Error;
use decoder::{DecoderState, Logits};

/// A decoder-only language model.
pub trait CausalLm: Send + Sync {
    fn n_vocab(&self) -> usize;
    /// The context length the model was trained with.
    fn n_ctx_train(&self) -> usize;
    /// A fresh sequence state with room for `n_ctx` positions.
    fn new_state(&self, n_ctx: usize, threads: Threads) -> Result<DecoderState, Error>;
    /// Feeds `tokens` at the next positions of `state` and writes the
    /// requested logits (`n_vocab` per row) into `logits`.
    fn forward(
        &self,
        tokens: &[u32],
        state: &mut DecoderState,
        which: Logits,
        logits: &mut Vec<f32>,
    ) -> Result<(), Error>;
}

/// Architectures `load_causal_lm` can run.
pub const SUPPORTED_ARCHITECTURES: [&str; 2] = ["llama", "gemma3"];

/// Loads the decoder model in a GGUF file, by its `general.architecture`.
pub fn load_causal_lm(file: Arc<GgufFile>) -> Result<Box<dyn CausalLm>, Error> {
    let source = file.path().display().to_string();
    match file.header.architecture() {
        Some("llama") => Ok(Box::new(llama::Llama::load(file)?)),
        Some("gemma3") => Ok(Box::new(gemma3::Gemma3::load(file)?)),
        Some(other) => Err(Error::model(
            source,
            format!(
                "architecture '{other}' is not supported for text generation (supported: {})",
                SUPPORTED_ARCHITECTURES.join(", ")
            ),
        )),
        None => Err(Error::model(
            source,
            "no general.architecture in the metadata",
        )),
    }
}

/// Opens a GGUF file and loads its decoder model.
pub fn open_causal_lm(path: &Path) -> Result<(Arc<GgufFile>, Box<dyn CausalLm>), Error> {
    let file = Arc::new(GgufFile::open(path)?);
    let model = load_causal_lm(file.clone())?;
    Ok((file, model))
}
