//! An output file written under a temporary name beside its target and
//! renamed into place at the end, so that a failed write (an error, a full
//! disk, a panic) leaves no half-written file under the target's name.

use std::path::{Path, PathBuf};

use crate::Error;

/// A temporary file beside a target, removed unless [`TempOutput::commit`]
/// renames it into place.
pub(crate) struct TempOutput {
    pub(crate) path: PathBuf,
    committed: bool,
}

impl TempOutput {
    /// The temporary path for `target` (`.NAME.TAG.PID.tmp` in its
    /// directory); nothing is created yet.
    pub(crate) fn beside(target: &Path, tag: &str) -> Result<TempOutput, Error> {
        let name = target
            .file_name()
            .ok_or_else(|| Error::Input(format!("{}: not a file name", target.display())))?;
        let tmp = format!(
            ".{}.{tag}.{}.tmp",
            name.to_string_lossy(),
            std::process::id()
        );
        let dir = target.parent().filter(|p| !p.as_os_str().is_empty());
        let path = dir.map_or_else(|| PathBuf::from(&tmp), |d| d.join(&tmp));
        Ok(TempOutput {
            path,
            committed: false,
        })
    }

    /// Renames the file onto `target`.
    pub(crate) fn commit(mut self, target: &Path) -> Result<(), Error> {
        std::fs::rename(&self.path, target)
            .map_err(|e| Error::io(target.display().to_string(), e))?;
        self.committed = true;
        Ok(())
    }
}

impl Drop for TempOutput {
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}
