//! Text generation: a loaded decoder model with its tokenizer and chat
//! template, the queue in front of it, and the scheduler thread that runs
//! every admitted sequence through one batched forward pass per step.

pub mod choice;
pub mod prefix;
pub mod request;
pub mod scheduler;

use std::path::Path;
use std::sync::Arc;

use ferrite::serving::Decoder;
use ferrite::serving::KvPool;
use ferrite::serving::{load_causal_lm, CausalLm};
use ferrite::serving::{model_template, turn_end_tokens, ChatTemplate};
use ferrite::tools::GgufFile;
use ferrite::tools::Tokenizer;

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
    /// Where every KV block of the model's sequences and prefix cache is
    /// counted.
    pub pool: KvPool,
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
            pool: KvPool::new(),
            queue: Queue::new(limits.max_queue),
            metrics,
        })
    }

    pub fn decoder(&self) -> &Decoder {
        self.lm.decoder()
    }

    /// KV bytes a request reserves: its prompt's blocks from position
    /// `cached` on (the ones before come shared from the prefix cache),
    /// and per choice the blocks its reply may allocate or copy on write
    /// (the prompt's last block, shared by the choices, included).
    pub fn kv_need(&self, prompt: usize, cached: usize, max_tokens: usize) -> KvNeed {
        let d = self.decoder();
        let end = prompt + max_tokens;
        KvNeed {
            prompt: d.kv_block_bytes(cached..prompt, end),
            per_choice: d.kv_block_bytes(prompt..end, end),
        }
    }
}

/// KV bytes a request reserves ([`GenModel::kv_need`]).
#[derive(Clone, Copy, Debug)]
pub struct KvNeed {
    /// Held until the request ends.
    pub prompt: usize,
    /// Held by each choice until it ends.
    pub per_choice: usize,
}

impl KvNeed {
    pub fn total(&self, n: usize) -> usize {
        self.prompt
            .saturating_add(self.per_choice.saturating_mul(n))
    }
}
