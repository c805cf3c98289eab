//! One module per subcommand.
pub mod bench;
pub mod bench_embed;
pub mod bench_spec;
pub mod chat;
pub mod common;
pub mod convert;
pub mod embed;
pub mod input;
pub mod inspect;
pub mod perplexity;
pub mod quantize;
pub mod run;
pub mod serve;
pub mod speculate;
pub mod tokenize;
pub mod translate;

use crate::error::{CliError, CliResult};
use std::io;

/// The outcome of writing to stdout: a closed pipe (`ferrite ... | head`)
/// is a normal way for a reader to stop, not an error.
pub fn output_result(r: io::Result<()>) -> CliResult {
    match r {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        other => other.map_err(|e| CliError::write("writing output", e)),
    }
}
