//! Text generation: a loaded decoder model with its tokenizer and chat
//! template, the queue in front of it, and the scheduler thread that runs
//! every admitted sequence through one batched forward pass per step.

pub mod choice;
pub mod prefix;
pub mod request;
pub mod scheduler;

use std::path::Path;
use std::sync::Arc;

use ferrite::formats::gguf::GgufFile;
use ferrite::generate::chat::{model_template, turn_end_tokens, ChatTemplate};
use ferrite::models::transformer::Decoder;
use ferrite::models::{load_causal_lm, CausalLm};
use ferrite::tokenize::Tokenizer;

use crate::config::Limits;
use crate::metrics::ModelMetrics;
use crate::queue::Queue;
use request::GenRequest;

/// A decoder model being served.
pub struct GenModel {
    pub name: String,
    pub lm: Box<dyn CausalLm>,
    pub tokenizer: Tokenizer,
    /// The model's chat template (its own, or the built-in one).
    pub template: ChatTemplate,
    /// Tokens that end an assistant turn besides end of generation.
    pub end_tokens: Vec<u32>,
    /// Most positions of one sequence (prompt + reply).
    pub ctx: usize,
    /// KV-cache bytes all sequences may reserve.
    pub kv_budget: usize,
    pub queue: Queue<GenRequest>,
    pub metrics: ModelMetrics,
}

impl GenModel {
    /// Loads the decoder model in `file` (opened from `path`).
    pub fn load(
        name: &str,
        path: &Path,
        file: Arc<GgufFile>,
        limits: &Limits,
        metrics: ModelMetrics,
    ) -> Result<GenModel, ferrite::Error> {
        let tokenizer = Tokenizer::from_gguf(file.metadata())
            .map_err(|e| ferrite::Error::model(path.display().to_string(), e.to_string()))?;
        let lm = load_causal_lm(file.clone())?;
        let template = model_template(&file, &tokenizer)?;
        let end_tokens = turn_end_tokens(&tokenizer, &template);
        let train = lm.n_ctx_train();
        let ctx = limits.ctx.map_or(train, |c| c.min(train)).max(2);
        Ok(GenModel {
            name: name.to_string(),
            lm,
            tokenizer,
            template,
            end_tokens,
            ctx,
            kv_budget: limits.kv_cache_mib.saturating_mul(1 << 20),
            queue: Queue::new(limits.max_queue),
            metrics,
        })
    }

    pub fn decoder(&self) -> &Decoder {
        self.lm.decoder()
    }

    /// Bytes of a KV cache of `n_ctx` positions (what
    /// `Decoder::new_cache` allocates).
    pub fn cache_bytes(&self, n_ctx: usize) -> usize {
        self.decoder().kv_bytes(n_ctx)
    }
}
