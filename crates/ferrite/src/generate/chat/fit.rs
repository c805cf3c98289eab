//! Keeping a conversation's prompt inside the context ([`fit_prompt`]):
//! the oldest turns are dropped, never the system prompt.

use std::fmt;

use super::{prompt_tokens, ChatTemplate, Message, TemplateError};
use crate::tokenize::Tokenizer;

/// How many tokens a chat prompt may take in a context of `n_ctx`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PromptBudget {
    /// Most tokens of a prompt: the context less the room kept for a reply.
    pub limit: usize,
    /// When turns must be dropped, they are dropped until the prompt takes
    /// at most this many tokens (if it can), so that the next few turns fit
    /// without dropping again and reuse the KV cache.
    pub after_drop: usize,
}

impl PromptBudget {
    /// The budget in a context of `n_ctx` tokens for replies of at most
    /// `max_reply` tokens (`None`: no cap): room for `max_reply` tokens is
    /// kept, but at most a quarter of the context (at least one token);
    /// dropping goes down to half the context.
    pub fn new(n_ctx: usize, max_reply: Option<usize>) -> PromptBudget {
        let quarter = n_ctx / 4;
        let reserve = max_reply.map_or(quarter, |m| m.min(quarter)).max(1);
        let limit = n_ctx.saturating_sub(reserve);
        PromptBudget {
            limit,
            after_drop: (n_ctx / 2).min(limit),
        }
    }
}

/// A conversation's prompt, made to fit a [`PromptBudget`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FittedPrompt {
    /// The prompt's tokens, the assistant's turn opened.
    pub tokens: Vec<u32>,
    /// How many of the oldest non-system messages were dropped.
    pub dropped: usize,
}

/// Why a conversation could not be made into a prompt.
#[derive(Debug)]
pub enum PromptError {
    /// The chat template failed to render.
    Template(TemplateError),
    /// With every older turn dropped, the system prompt and the last turn
    /// still take `tokens` tokens, more than the `limit`.
    TooLong {
        /// Tokens the shortest prompt takes.
        tokens: usize,
        /// Tokens the prompt may take.
        limit: usize,
    },
}

impl fmt::Display for PromptError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PromptError::Template(e) => e.fmt(f),
            PromptError::TooLong { tokens, limit } => write!(
                f,
                "the message is too long: with the system prompt it takes {tokens} tokens, \
                 more than the {limit} the context leaves for a prompt"
            ),
        }
    }
}

impl std::error::Error for PromptError {}

impl From<TemplateError> for PromptError {
    fn from(e: TemplateError) -> PromptError {
        PromptError::Template(e)
    }
}

/// The prompt tokens of `messages` ([`prompt_tokens`]) within `budget`.
///
/// If the whole conversation takes more than `budget.limit` tokens, the
/// oldest turns are dropped from `messages` — whole turns, each a user
/// message and what follows it up to the next user message — until the
/// prompt takes at most `budget.after_drop` tokens, or failing that as few
/// turns as keep it within `budget.limit`. System messages and the last
/// turn are always kept; if they alone are over the limit, this is
/// [`PromptError::TooLong`] and `messages` is left as it was.
pub fn fit_prompt(
    tok: &Tokenizer,
    template: &ChatTemplate,
    messages: &mut Vec<Message>,
    budget: PromptBudget,
) -> Result<FittedPrompt, PromptError> {
    let is_system = |m: &Message| m.role == "system";
    let tokens = prompt_tokens(tok, template, messages)?;
    if tokens.len() <= budget.limit {
        return Ok(FittedPrompt { tokens, dropped: 0 });
    }
    // Where a kept conversation may start: each user message after the
    // first non-system one.
    let first = messages.iter().position(|m| !is_system(m));
    let cuts: Vec<usize> = messages
        .iter()
        .enumerate()
        .filter(|&(i, m)| m.role == "user" && first.is_some_and(|f| i > f))
        .map(|(i, _)| i)
        .collect();
    let kept = |cut: usize| -> Vec<Message> {
        messages
            .iter()
            .enumerate()
            .filter(|&(i, m)| i >= cut || is_system(m))
            .map(|(_, m)| m.clone())
            .collect()
    };
    let render = |cut: usize| prompt_tokens(tok, template, &kept(cut));
    // The prompt shrinks as the cut moves later: binary search for the
    // earliest cut within `target`, checked by its actual length.
    let earliest_within = |target: usize| -> Result<Option<(usize, Vec<u32>)>, PromptError> {
        let (mut lo, mut hi) = (0, cuts.len());
        let mut found = None;
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let ids = render(cuts[mid])?;
            if ids.len() <= target {
                found = Some((cuts[mid], ids));
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        Ok(found)
    };
    let found = match earliest_within(budget.after_drop)? {
        Some(f) => Some(f),
        None => earliest_within(budget.limit)?,
    };
    let Some((cut, tokens)) = found else {
        let shortest = match cuts.last() {
            Some(&cut) => render(cut)?.len(),
            None => tokens.len(),
        };
        return Err(PromptError::TooLong {
            tokens: shortest,
            limit: budget.limit,
        });
    };
    let dropped = messages[..cut].iter().filter(|m| !is_system(m)).count();
    *messages = kept(cut);
    Ok(FittedPrompt { tokens, dropped })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompt_budget_keeps_room_for_a_reply() {
        let b = PromptBudget::new(32768, Some(1024));
        assert_eq!((b.limit, b.after_drop), (31744, 16384));
        let b = PromptBudget::new(256, Some(1024));
        assert_eq!((b.limit, b.after_drop), (192, 128));
        let b = PromptBudget::new(256, None);
        assert_eq!((b.limit, b.after_drop), (192, 128));
        let b = PromptBudget::new(256, Some(10));
        assert_eq!((b.limit, b.after_drop), (246, 128));
        let b = PromptBudget::new(2, Some(0));
        assert_eq!((b.limit, b.after_drop), (1, 1));
        assert_eq!(PromptBudget::new(0, None).limit, 0);
    }
}
