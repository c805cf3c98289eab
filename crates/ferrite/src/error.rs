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
    /// A request we cannot serve (prompt longer than the context, token id
    /// out of range, bad option).
    Input(String),
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
            Error::Input(msg) => f.write_str(msg),
        }
    }
}

impl std::error::Error for Error {}

impl From<FormatError> for Error {
    fn from(e: FormatError) -> Error {
        Error::Format(e)
    }
}
