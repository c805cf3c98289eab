//! What a program that serves many requests at once needs beyond the
//! one-shot calls at the crate root: ferrite's HTTP server (continuous
//! batching) and the CLI's interactive chat are built on these.
//!
//! - The model: [`load_causal_lm`] gives a [`CausalLm`]; its [`Decoder`]
//!   runs one step over the rows of many sequences at once
//!   ([`Decoder::forward_batch`] with [`BatchItem`]s and a [`Workspace`]),
//!   each row's result bit-identical to running its sequence alone.
//! - The KV cache: a [`KvCache`] per sequence, paged in blocks of
//!   [`KV_BLOCK`] positions that forks share copy-on-write, counted in a
//!   [`KvPool`]; a prefix cache keeps a prompt's blocks as
//!   [`KvPrefixBlock`]s and starts later sequences from them
//!   ([`KvCache::share_prefix`]). [`Decoder::kv_block_bytes`] says how many bytes storing
//!   a range of positions allocates (what a scheduler reserves), and
//!   [`Decoder::kv_bytes`] what a whole context takes.
//! - One sequence's reply: a [`Continuation`] turns each step's logits
//!   into a [`Pick`] (sampling with a [`Sampler`], JSON-schema constraints
//!   through a [`JsonState`] over a [`Grammar`](crate::Grammar), tool-call [`Trigger`]s,
//!   stop strings held back with [`held_back`]); a [`Session`] does the
//!   same for one sequence that owns its model.
//! - Speculative decoding: [`Session::set_speculation`] with a
//!   [`Speculation`] (a [`Drafter`]: [`PromptLookup`], or a
//!   [`DraftModel`] whose vocabulary passes [`check_same_vocab`]; a
//!   [`DraftLength`]) scores drafted tokens in one forward pass and keeps
//!   those the sampler picks: the same text and tokens as without.
//! - Chat: a model's [`ChatTemplate`] ([`model_template`]) renders
//!   [`Message`](crate::Message)s into prompt tokens; [`fit_prompt`] drops
//!   old turns to fit a context.
//! - [`Cancel`]: a flag a client's disconnect sets to stop work between
//!   steps.
//!
//! These types are the pieces the root facade is made of: they are
//! documented and kept working, but change more often than the root.

pub use crate::generate::beam::SearchOptions;
pub use crate::generate::cancel::{Cancel, CancelOnDrop};
pub use crate::generate::chat::{
    fit_prompt, guarded_json_prompt_tokens, guarded_prompt_tokens, model_template, prompt_tokens,
    turn_end_tokens, with_bos, ChatTemplate, FittedPrompt, PromptBudget, PromptError, TEMPLATE_KEY,
};
pub use crate::generate::continuation::{held_back, Continuation, Pick, Trigger};
pub use crate::generate::json::{CallSyntax, JsonState};
pub use crate::generate::sampler::Sampler;
pub use crate::generate::session::Session;
pub use crate::generate::speculative::{
    check_same_vocab, DraftLength, DraftModel, Drafter, PromptLookup, Speculation,
};
pub use crate::kv_cache::{KvCache, KvPool, KvPrefixBlock, KV_BLOCK};
pub use crate::models::decoder::{DecoderState, Logits, Workspace, MAX_CHUNK};
pub use crate::models::transformer::{BatchItem, Decoder};
pub use crate::models::{load_causal_lm, CausalLm};
pub use crate::tokenize::StreamDecoder;
