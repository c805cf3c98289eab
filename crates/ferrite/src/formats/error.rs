//! The error every file parser returns: which file, which field, what was wrong.

use std::fmt;

/// A model file (or one of its companion files) could not be read.
///
/// `source` names the file, `field` the place in it (`"tensor 'blk.0.attn_q.weight'
/// offset"`, `"metadata key 'general.alignment'"`), `problem` what was wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FormatError {
    /// The file.
    pub source: String,
    /// The place in the file.
    pub field: String,
    /// What was wrong there.
    pub problem: String,
}

impl FormatError {
    /// An error of file `source` at `field`.
    pub fn new(
        source: impl Into<String>,
        field: impl Into<String>,
        problem: impl Into<String>,
    ) -> Self {
        FormatError {
            source: source.into(),
            field: field.into(),
            problem: problem.into(),
        }
    }
}

impl fmt::Display for FormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.field.is_empty() {
            write!(f, "{}: {}", self.source, self.problem)
        } else {
            write!(f, "{}: {}: {}", self.source, self.field, self.problem)
        }
    }
}

impl std::error::Error for FormatError {}
