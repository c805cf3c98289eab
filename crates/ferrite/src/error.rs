//! The library's error type. Every variant carries enough to print one
//! clear line for the user, and [`Error::kind`] sorts them into the few
//! classes a caller acts on (the server maps them to HTTP statuses, the
//! Python binding to exception types).

use crate::formats::FormatError;
use crate::generate::chat::TemplateError;
use crate::tokenize::TokenizerError;

/// The library's one error type ([`Error::kind`] sorts it for callers).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file could not be parsed.
    #[error(transparent)]
    Format(#[from] FormatError),
    /// A file parsed but does not describe a model we can run (wrong
    /// architecture, missing tensor, inconsistent hyper-parameters).
    #[error("{path}: {problem}")]
    Model {
        /// The model file or directory.
        path: String,
        /// What is wrong with it.
        problem: String,
    },
    /// No model file or directory where one was named.
    #[error("{0}")]
    NotFound(String),
    /// A file's tokenizer description is unusable.
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    /// A chat template does not compile or render.
    #[error(transparent)]
    Template(#[from] TemplateError),
    /// `needed` more positions do not fit in a sequence's context, of
    /// which `used` of `n_ctx` are taken.
    #[error("{needed} tokens do not fit in the context: {used} of {n_ctx} positions are used")]
    ContextFull {
        /// Positions asked for.
        needed: usize,
        /// Positions already taken.
        used: usize,
        /// The context size.
        n_ctx: usize,
    },
    /// A token id outside the model's vocabulary.
    #[error("token id {token} is outside the vocabulary of {n_vocab}")]
    TokenOutOfRange {
        /// The token id.
        token: u32,
        /// The vocabulary's size.
        n_vocab: usize,
    },
    /// A model of one kind used where another is needed (an embedding
    /// model asked to generate text); `path` when it is known.
    #[error("{} is {}, not {}", path.as_deref().unwrap_or("this model"), is.describe(), wanted.describe())]
    WrongKind {
        /// The model's path, when known.
        path: Option<String>,
        /// What the model is.
        is: crate::open::ModelKind,
        /// What was asked for.
        wanted: crate::open::ModelKind,
    },
    /// Any other request we cannot serve (bad option, empty input).
    #[error("{0}")]
    Input(String),
    /// The caller asked to stop (see `generate::cancel`).
    #[error("cancelled")]
    Cancelled,
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// Something the library relies on failed (a thread that could not be
    /// started, a worker that went away): not the caller's fault.
    #[error("{0}")]
    Internal(String),
}

/// What kind of failure an [`Error`] is, for callers that act on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// The request or its options are wrong (bad value, too long, out of
    /// the vocabulary): the caller can fix it.
    BadInput,
    /// The named model does not exist.
    NotFound,
    /// The model's files are unreadable or describe something ferrite
    /// does not run.
    BadModel,
    /// The caller cancelled the work.
    Cancelled,
    /// A failure inside ferrite or the system (I/O, threads).
    Internal,
}

impl Error {
    /// A model-level problem in the file or directory `path`.
    pub fn model(path: impl Into<String>, problem: impl Into<String>) -> Error {
        Error::Model {
            path: path.into(),
            problem: problem.into(),
        }
    }

    /// An I/O failure on `path`.
    pub fn io(path: impl Into<String>, source: std::io::Error) -> Error {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    /// The class of this error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Input(_)
            | Error::WrongKind { .. }
            | Error::ContextFull { .. }
            | Error::TokenOutOfRange { .. } => ErrorKind::BadInput,
            Error::NotFound(_) => ErrorKind::NotFound,
            Error::Format(_) | Error::Model { .. } | Error::Tokenizer(_) | Error::Template(_) => {
                ErrorKind::BadModel
            }
            Error::Cancelled => ErrorKind::Cancelled,
            Error::Io { .. } | Error::Internal(_) => ErrorKind::Internal,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_and_messages() {
        let e = Error::model("m.gguf", "no tensor 'x'");
        assert_eq!(e.to_string(), "m.gguf: no tensor 'x'");
        assert_eq!(e.kind(), ErrorKind::BadModel);
        assert_eq!(Error::Cancelled.kind(), ErrorKind::Cancelled);
        assert_eq!(Error::Input("bad".into()).kind(), ErrorKind::BadInput);
        let io = Error::io("out.gguf", std::io::Error::other("disk full"));
        assert_eq!(io.to_string(), "out.gguf: disk full");
        assert_eq!(io.kind(), ErrorKind::Internal);
        let f: Error = FormatError::new("a.gguf", "magic", "not a GGUF file").into();
        assert_eq!(f.to_string(), "a.gguf: magic: not a GGUF file");
    }
}
