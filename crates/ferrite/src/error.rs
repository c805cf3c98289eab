//! The library's error type. Every variant carries enough to print one
//! clear line for the user.

use std::fmt;

use crate::formats::FormatError;

#[derive(Debug)]
pub enum Error {
    /// A file could not be parsed.
    Format(FormatError),
    /// A file parsed but does not describe a model we can run (wrong
    /// architecture, missing tensor, inconsistent hyper-parameters).
    Model { source: String, problem: String },
    /// `needed` more positions do not fit in a sequence's context, of
    /// which `used` of `n_ctx` are taken.
    ContextFull {
        needed: usize,
        used: usize,
        n_ctx: usize,
    },
    /// A token id outside the model's vocabulary.
    TokenOutOfRange { token: u32, n_vocab: usize },
    /// Any other request we cannot serve (bad option, empty input).
    Input(String),
    /// The caller asked to stop (see `generate::cancel`).
    Cancelled,
}

impl Error {
    pub fn model(source: impl Into<String>, problem: impl Into<String>) -> Error {
        Error::Model {
            source: source.into(),
            problem: problem.into(),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Format(e) => e.fmt(f),
            Error::Model { source, problem } => write!(f, "{source}: {problem}"),
            Error::ContextFull {
                needed,
                used,
                n_ctx,
            } => write!(
                f,
                "{needed} tokens do not fit in the context: {used} of {n_ctx} positions are used"
            ),
            Error::TokenOutOfRange { token, n_vocab } => {
                write!(f, "token id {token} is outside the vocabulary of {n_vocab}")
            }
            Error::Input(msg) => f.write_str(msg),
            Error::Cancelled => f.write_str("cancelled"),
        }
    }
}

impl std::error::Error for Error {}

impl From<FormatError> for Error {
    fn from(e: FormatError) -> Error {
        Error::Format(e)
    }
}
