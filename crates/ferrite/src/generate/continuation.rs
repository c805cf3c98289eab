//! One sequence's continuation after its prompt, the part of the
//! generation loop that does not run the model: picking each next token
//! (the sampler, end-of-generation tokens, an optional JSON-schema
//! constraint) and turning tokens into text (stream decoding, stop strings,
//! holding back text that may be the start of one).
//!
//! `Session::generate` (the CLI, the library's `Generator`) and the
//! server's per-choice loop both drive one of these, so a prompt gives the
//! same text through either; they differ only in how they run the model
//! (one sequence, or a batch of many) and how they report.

use std::borrow::BorrowMut;
use std::sync::Arc;

use super::json::{mask_logits, Grammar, JsonState};
use super::sampler::Sampler;
use crate::tokenize::{StreamDecoder, Tokenizer};

/// The next token, or the end of the continuation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pick {
    /// An end-of-generation token (or, under a JSON constraint, no token
    /// may follow): nothing more is generated.
    End,
    /// This token comes next.
    Token(u32),
}

/// When a lazily applied constraint ([`Continuation::with_trigger`])
/// starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Trigger {
    /// Once the text ends with this (a function call's `<tool_call>`): the
    /// constraint applies to what follows.
    After(String),
    /// When the text's first byte is this (Llama 3's JSON calls start with
    /// `{`): the constraint applies from that byte on, and a first token
    /// starting with it must already follow the constraint.
    Start(u8),
}

/// Text released by [`Continuation::push`].
#[derive(Debug, Default)]
pub struct Piece {
    /// Complete UTF-8 that cannot be the start of a stop string (may be
    /// empty).
    pub text: String,
    /// A stop string appeared: `text` ends just before it, and the
    /// continuation is over.
    pub stopped: bool,
    /// Which stop string appeared (its index in the list given), when
    /// `stopped`.
    pub stop: Option<usize>,
}

/// See the module's notes. The sampler is owned (`Sampler`) or borrowed
/// (`&mut Sampler`, so that its generator goes on across calls, as a
/// chat's turns do).
pub struct Continuation<'t, S: BorrowMut<Sampler> = Sampler> {
    tokenizer: &'t Tokenizer,
    sampler: S,
    end_tokens: Vec<u32>,
    stop: Vec<String>,
    /// The constraint and where the text is in it.
    json: Option<(Arc<Grammar>, JsonState)>,
    /// A constraint that starts once its trigger appears (see
    /// [`Trigger`]), and the text's last bytes.
    lazy: Option<(Trigger, Arc<Grammar>)>,
    tail: Vec<u8>,
    /// Control tokens whose text is part of the reply (the grammars'
    /// markers: a function call's `<tool_call>`), shown though control
    /// tokens are not.
    shown: Vec<u32>,
    /// The logits after the JSON mask (reused).
    masked: Vec<f32>,
    /// `None` once a stop string ended the text.
    decoder: Option<StreamDecoder<'t>>,
    /// Text not yet released (a possible stop string's start).
    pending: String,
    /// Tokens pushed.
    pub generated: usize,
}

impl<'t, S: BorrowMut<Sampler>> Continuation<'t, S> {
    /// A continuation sampling with `sampler`; `end_tokens` end it besides
    /// the tokenizer's end-of-generation set, `stop` strings cut it, and
    /// `json` constrains it to a JSON value of that grammar.
    pub fn new(
        tokenizer: &'t Tokenizer,
        sampler: S,
        end_tokens: &[u32],
        stop: &[String],
        json: Option<Arc<Grammar>>,
    ) -> Continuation<'t, S> {
        let shown = json
            .as_ref()
            .map_or_else(Vec::new, |g| markers(tokenizer, g));
        Continuation {
            shown,
            tokenizer,
            sampler,
            end_tokens: end_tokens.to_vec(),
            stop: stop.to_vec(),
            json: json.map(|g| {
                let state = JsonState::new(&g);
                (g, state)
            }),
            lazy: None,
            tail: Vec::new(),
            masked: Vec::new(),
            decoder: Some(tokenizer.stream_decoder(true).continuing()),
            pending: String::new(),
            generated: 0,
        }
    }

    /// Constrains the text to `grammar` from the moment of `trigger`
    /// (unconstrained until then): a reply free to answer in text whose
    /// function calls, once opened, follow their schemas.
    pub fn with_trigger(mut self, trigger: Trigger, grammar: Arc<Grammar>) -> Self {
        self.shown.extend(markers(self.tokenizer, &grammar));
        self.lazy = Some((trigger, grammar));
        self
    }

    /// The first token under a [`Trigger::Start`]: tokens that start with
    /// the trigger byte must follow the grammar (then it applies from
    /// there on); others are free (then it never applies).
    fn pick_first(&mut self, first: u8, g: Arc<Grammar>, logits: &[f32]) -> Pick {
        let tok = self.tokenizer;
        self.masked.clear();
        self.masked.extend_from_slice(logits);
        let start = JsonState::new(&g);
        for (id, l) in self.masked.iter_mut().enumerate() {
            let bytes = tok.token_bytes(id as u32);
            if bytes.first() == Some(&first)
                && !tok.is_control(id as u32)
                && !start.clone().feed_all(&g, bytes)
            {
                *l = f32::NEG_INFINITY;
            }
        }
        let token = self.sampler.borrow_mut().sample(&self.masked);
        if self.is_end(token) {
            return Pick::End;
        }
        let bytes = tok.token_bytes(token);
        if bytes.first() == Some(&first) && !tok.is_control(token) {
            let mut state = start;
            state.feed_all(&g, bytes);
            self.json = Some((g, state));
        }
        Pick::Token(token)
    }

    /// Tells the sampler's penalties about a token already in the sequence
    /// (the prompt's).
    pub fn accept_prompt_token(&mut self, token: u32) {
        self.sampler.borrow_mut().accept(token);
    }

    /// Whether `token` ends generation.
    pub fn is_end(&self, token: u32) -> bool {
        self.tokenizer.is_end_of_generation(token) || self.end_tokens.contains(&token)
    }

    /// Picks the next token from the model's `logits`.
    pub fn pick(&mut self, logits: &[f32]) -> Pick {
        if let (None, Some((Trigger::Start(_), _))) = (&self.json, &self.lazy) {
            if let Some((Trigger::Start(first), g)) = self.lazy.take() {
                if self.generated == 0 {
                    return self.pick_first(first, g, logits);
                }
            }
        }
        let (tokenizer, end_tokens) = (self.tokenizer, &self.end_tokens);
        let is_end = |t: u32| tokenizer.is_end_of_generation(t) || end_tokens.contains(&t);
        let token = match &mut self.json {
            Some((g, state)) => {
                self.masked.clear();
                self.masked.extend_from_slice(logits);
                if !mask_logits(g, state, tokenizer, end_tokens, &mut self.masked) {
                    // No token may follow (cannot happen with a real
                    // vocabulary): end rather than break the JSON.
                    return Pick::End;
                }
                let token = self.sampler.borrow_mut().sample(&self.masked);
                if !is_end(token) {
                    state.feed_all(g, tokenizer.token_bytes(token));
                }
                token
            }
            None => self.sampler.borrow_mut().sample(logits),
        };
        if is_end(token) {
            Pick::End
        } else {
            Pick::Token(token)
        }
    }

    /// Adds a picked token to the text; returns what may be shown now.
    pub fn push(&mut self, token: u32) -> Piece {
        self.sampler.borrow_mut().accept(token);
        self.generated += 1;
        if let (None, Some((Trigger::After(trigger), _))) = (&self.json, &self.lazy) {
            let trigger = trigger.as_bytes();
            self.tail
                .extend_from_slice(self.tokenizer.token_bytes(token));
            let keep = self.tail.len().saturating_sub(trigger.len());
            self.tail.drain(..keep);
            if self.tail == *trigger {
                if let Some((_, g)) = self.lazy.take() {
                    let state = JsonState::new(&g);
                    self.json = Some((g, state));
                }
            }
        }
        if let Some(d) = &mut self.decoder {
            let text = d.push(token);
            if text.is_empty() && self.shown.contains(&token) {
                self.pending
                    .push_str(&String::from_utf8_lossy(self.tokenizer.token_bytes(token)));
            } else {
                self.pending.push_str(&text);
            }
        }
        if let Some(cut) = find_stop(&self.pending, &self.stop) {
            let which = self
                .stop
                .iter()
                .position(|s| !s.is_empty() && self.pending[cut..].starts_with(s.as_str()));
            self.pending.truncate(cut);
            self.decoder = None;
            return Piece {
                text: std::mem::take(&mut self.pending),
                stopped: true,
                stop: which,
            };
        }
        let safe = self.pending.len() - held_back(&self.pending, &self.stop);
        Piece {
            text: self.pending.drain(..safe).collect(),
            stopped: false,
            stop: None,
        }
    }

    /// The text still held back, at the end of a continuation that no stop
    /// string ended (empty after one did).
    pub fn finish(&mut self) -> String {
        match self.decoder.take() {
            Some(d) => {
                let mut text = std::mem::take(&mut self.pending);
                text.push_str(&d.finish());
                text
            }
            None => String::new(),
        }
    }
}

/// The control tokens whose texts are `g`'s markers.
fn markers(tok: &Tokenizer, g: &Grammar) -> Vec<u32> {
    g.markers
        .iter()
        .filter_map(|m| tok.token_id(m))
        .filter(|&id| tok.is_control(id))
        .collect()
}

/// Byte offset of the first stop string in `text`, if any.
pub fn find_stop(text: &str, stops: &[String]) -> Option<usize> {
    stops
        .iter()
        .filter(|s| !s.is_empty())
        .filter_map(|s| text.find(s.as_str()))
        .min()
}

/// How many bytes at the end of `text` could be the start of a stop string
/// (and so must not be shown yet). Always on a character boundary.
pub fn held_back(text: &str, stops: &[String]) -> usize {
    let mut held = 0;
    for stop in stops {
        for (i, _) in stop.char_indices().skip(1) {
            if text.ends_with(&stop[..i]) {
                held = held.max(i);
            }
        }
    }
    held
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_string_helpers() {
        let stops = vec!["</s>".to_string(), "User:".to_string()];
        assert_eq!(find_stop("hello User: x", &stops), Some(6));
        assert_eq!(find_stop("hello", &stops), None);
        assert_eq!(held_back("hello Us", &stops), 2);
        assert_eq!(held_back("hello <", &stops), 1);
        assert_eq!(held_back("hello", &stops), 0);
        assert_eq!(held_back("é", &["éa".to_string()]), 2);
    }
}
