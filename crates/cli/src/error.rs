//! The CLI's error: what a command can fail with. `main` prints it as one
//! line (`ferrite: ...`) on stderr and exits with status 1 (clap exits
//! with 2 for a command line it cannot parse).

use std::io;

#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The library refused or failed: a bad model file, bad input, a full
    /// context, ... (its message names what is wrong).
    #[error(transparent)]
    Library(#[from] ferrite::Error),
    /// `ferrite serve` could not start.
    #[error(transparent)]
    Serve(#[from] ferrite_server::ServeError),
    /// Options that do not go together, or a value out of range.
    #[error("{0}")]
    Usage(String),
    /// Reading an input (a file, standard input): `what` names it.
    #[error("{what}: {source}")]
    Read { what: String, source: io::Error },
    /// Writing the output (a closed pipe is not an error: see
    /// `commands::output_result`).
    #[error("{what}: {source}")]
    Write { what: String, source: io::Error },
    /// An input that is read but not understood (not UTF-8, not JSON, no
    /// texts): `what` names it.
    #[error("{what}: {problem}")]
    Input { what: String, problem: String },
}

/// A file the library could not parse is the library's error.
impl From<ferrite::tools::FormatError> for CliError {
    fn from(e: ferrite::tools::FormatError) -> Self {
        CliError::Library(e.into())
    }
}

impl CliError {
    pub fn usage(msg: impl Into<String>) -> CliError {
        CliError::Usage(msg.into())
    }

    pub fn read(what: impl std::fmt::Display, source: io::Error) -> CliError {
        CliError::Read {
            what: what.to_string(),
            source,
        }
    }

    pub fn write(what: impl std::fmt::Display, source: io::Error) -> CliError {
        CliError::Write {
            what: what.to_string(),
            source,
        }
    }

    pub fn input(what: impl std::fmt::Display, problem: impl std::fmt::Display) -> CliError {
        CliError::Input {
            what: what.to_string(),
            problem: problem.to_string(),
        }
    }
}

/// What commands return.
pub type CliResult<T = ()> = Result<T, CliError>;
