//! The library facade's generation calls beyond [`Generator::complete_with`]:
//! a chosen context size, and a reply to a conversation in the model's
//! chat template (what `ferrite chat` does for one message). The Python
//! binding (`python/`) is built on these.

use crate::generate::chat::{
    fit_prompt, model_template, turn_end_tokens, Message, PromptBudget, PromptError, TEMPLATE_KEY,
};
use crate::generate::sampler::{Sampler, SamplerOptions};
use crate::generate::session::{GenerateOptions, Session, StopReason};
use crate::open::Generator;
use crate::parallel::Threads;
use crate::Error;

impl Generator {
    /// As [`Generator::complete_with`], in a context of `n_ctx` positions
    /// (`None`: the model's training context, as `ferrite run` without
    /// `--ctx`; larger values are capped at it).
    pub fn complete_in(
        &self,
        prompt: &str,
        sampling: &SamplerOptions,
        opts: &GenerateOptions,
        threads: Threads,
        n_ctx: Option<usize>,
        on_text: impl FnMut(&str) -> bool,
    ) -> Result<StopReason, Error> {
        let tokens = self.tokenizer.encode(prompt, true, true);
        self.generate_after(&tokens, sampling, opts, threads, n_ctx, on_text)
    }

    /// The assistant's reply to `messages` (roles `system`, `user`,
    /// `assistant`), rendered with the model's chat template, streamed to
    /// `on_text` (`false` stops): the same text as `ferrite chat` gives
    /// for the same conversation and options. The reply ends at the
    /// template's turn end as well as the model's end-of-generation
    /// tokens. As in `ferrite chat`, when the conversation does not fit
    /// the context (less room for the reply) its oldest turns are left
    /// out, never the system messages or the last turn. A model whose
    /// file has no chat template (a base model) is refused.
    pub fn chat_with(
        &self,
        messages: &[Message],
        sampling: &SamplerOptions,
        opts: &GenerateOptions,
        threads: Threads,
        n_ctx: Option<usize>,
        on_text: impl FnMut(&str) -> bool,
    ) -> Result<StopReason, Error> {
        if messages.is_empty() {
            return Err(Error::Input("the conversation has no messages".into()));
        }
        if let Some(m) = messages
            .iter()
            .find(|m| !matches!(m.role.as_str(), "system" | "user" | "assistant"))
        {
            return Err(Error::Input(format!(
                "message role '{}': expected system, user or assistant",
                m.role
            )));
        }
        if self.file.metadata().get_str(TEMPLATE_KEY).is_none() {
            return Err(Error::Input(format!(
                "{} has no chat template: it looks like a base model, which continues a \
                 text rather than answering in turns; use complete() instead",
                self.path.display()
            )));
        }
        let template = model_template(&self.file, &self.tokenizer)?;
        let n_ctx = n_ctx
            .unwrap_or(self.model.n_ctx_train())
            .min(self.model.n_ctx_train());
        let budget = PromptBudget::new(n_ctx, opts.max_tokens);
        let mut kept = messages.to_vec();
        let prompt = match fit_prompt(&self.tokenizer, &template, &mut kept, budget) {
            Ok(p) => p,
            Err(PromptError::Template(e)) => return Err(e.into()),
            Err(e @ PromptError::TooLong { .. }) => return Err(Error::Input(e.to_string())),
        };
        let mut opts = opts.clone();
        opts.end_tokens
            .extend(turn_end_tokens(&self.tokenizer, &template));
        self.generate_after(
            &prompt.tokens,
            sampling,
            &opts,
            threads,
            Some(n_ctx),
            on_text,
        )
    }

    /// Generates after the prompt `tokens` in a fresh session.
    fn generate_after(
        &self,
        tokens: &[u32],
        sampling: &SamplerOptions,
        opts: &GenerateOptions,
        threads: Threads,
        n_ctx: Option<usize>,
        on_text: impl FnMut(&str) -> bool,
    ) -> Result<StopReason, Error> {
        sampling.validate()?;
        if n_ctx == Some(0) {
            return Err(Error::Input(
                "the context must hold at least one token".into(),
            ));
        }
        let mut session = Session::new(self.model.as_ref(), &self.tokenizer, n_ctx, threads)?;
        session.set_prompt(tokens)?;
        let mut sampler = Sampler::new(sampling.clone());
        session.generate(&mut sampler, opts, on_text)
    }
}
