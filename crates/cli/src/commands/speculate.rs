//! `--lookup` / `--draft FILE` / `--draft-max N` (`run`, `chat`):
//! speculative decoding, which changes no output (the library's
//! `Session::set_speculation`), only how many forward passes it takes.

use crate::error::{CliError, CliResult};

use ferrite::serving::{check_same_vocab, DraftModel, PromptLookup, Speculation};
use ferrite::{Generator, Threads};

use super::common::load;

/// Most tokens per draft by default: prompt lookup's guesses cost only
/// rows of the verifying pass; a draft model's cost a pass each.
const LOOKUP_MAX: usize = 8;
const DRAFT_MAX: usize = 4;

/// The speculative-decoding flags.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct SpecArgs {
    /// Speculative decoding by prompt lookup: guess that the text goes on
    /// as it did after an earlier occurrence of its last tokens (quoting
    /// or editing the prompt). The output is the same as without.
    #[arg(long, conflicts_with = "draft")]
    pub lookup: bool,
    /// Speculative decoding with a draft model FILE (a GGUF file or short
    /// name) that has the model's tokenizer, e.g. the same model more
    /// coarsely quantized. The output is the same as without.
    #[arg(long, value_name = "FILE")]
    pub draft: Option<String>,
    /// Most tokens per draft (default: 8 with --lookup, 4 with --draft);
    /// the length adapts below it.
    #[arg(long, value_name = "N")]
    pub draft_max: Option<usize>,
}

impl SpecArgs {
    /// Whether speculation was asked for.
    pub fn enabled(&self) -> bool {
        self.lookup || self.draft.is_some()
    }

    /// Checks the flags, then loads the draft model (`--draft`) and checks
    /// it has `target`'s vocabulary.
    pub fn load_draft(&self, target: &Generator) -> CliResult<Option<Generator>> {
        if self.draft_max.is_some() && !self.enabled() {
            return Err(CliError::usage(
                "--draft-max needs --lookup or --draft FILE",
            ));
        }
        if self.draft_max == Some(0) {
            return Err(CliError::usage("--draft-max must be at least 1"));
        }
        let Some(name) = &self.draft else {
            return Ok(None);
        };
        let draft = load(Some(name))?;
        check_same_vocab(target.tokenizer(), draft.tokenizer())
            .map_err(|e| CliError::input(format!("--draft {name}"), e))?;
        Ok(Some(draft))
    }

    /// The speculation for a session of `n_ctx` positions (`None`: none
    /// asked for); `draft` is what [`SpecArgs::load_draft`] returned.
    pub fn speculation<'a>(
        &self,
        draft: Option<&'a Generator>,
        n_ctx: usize,
        threads: Threads,
    ) -> CliResult<Option<Speculation<'a>>> {
        if let Some(d) = draft {
            let drafter = DraftModel::new(d.model(), n_ctx, threads)?;
            let max = self.draft_max.unwrap_or(DRAFT_MAX);
            return Ok(Some(Speculation::new(Box::new(drafter), max)));
        }
        if self.lookup {
            let max = self.draft_max.unwrap_or(LOOKUP_MAX);
            return Ok(Some(Speculation::new(
                Box::new(PromptLookup::default()),
                max,
            )));
        }
        Ok(None)
    }
}
