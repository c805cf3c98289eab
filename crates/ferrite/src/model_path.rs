//! Finding model files: by path, or by short name in the models directory
//! that `scripts/fetch-models.sh` fills.

use std::path::{Path, PathBuf};

use crate::Error;

/// A model ferrite knows by a short name.
#[derive(Clone, Copy, Debug)]
pub struct KnownModel {
    /// What a user types: `ferrite inspect smollm2`.
    pub short_name: &'static str,
    /// Path inside the models directory (a file or a directory).
    pub file: &'static str,
}

/// The models `scripts/fetch-models.sh` fetches (the CLI's default chat
/// model is `qwen2.5-0.5b`; the last two only when named).
pub const KNOWN_MODELS: [KnownModel; 6] = [
    KnownModel {
        short_name: "smollm2",
        file: "SmolLM2-135M-Instruct.Q4_1.gguf",
    },
    KnownModel {
        short_name: "gemma3-270m",
        file: "gemma-3-270m-q4_k_m.gguf",
    },
    KnownModel {
        short_name: "minilm",
        file: "all-MiniLM-L6-v2",
    },
    KnownModel {
        short_name: "qwen2.5-0.5b",
        file: "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    },
    KnownModel {
        short_name: "nomic-embed-v1.5",
        file: "nomic-embed-text-v1.5.f16.gguf",
    },
    KnownModel {
        short_name: "mpnet",
        file: "all-mpnet-base-v2",
    },
];

/// Environment variable naming the models directory.
pub const MODELS_ENV: &str = "FERRITE_MODELS";

/// The models directory: `$FERRITE_MODELS`, else `./models` if it exists,
/// else `models/` at the root of the source tree this binary was built from
/// (found from the executable's path: `target/<profile>/ferrite`, or a test
/// binary as deep as `target/<triple>/<profile>/deps/`), else `./models`.
pub fn models_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os(MODELS_ENV) {
        return PathBuf::from(dir);
    }
    let local = PathBuf::from("models");
    if local.is_dir() {
        return local;
    }
    if let Ok(exe) = std::env::current_exe() {
        for dir in exe.ancestors().skip(1).take(5) {
            let candidate = dir.join("models");
            if candidate.is_dir() {
                return candidate;
            }
        }
    }
    local
}

/// Resolves what a user typed: an existing path is taken as is; otherwise a
/// known short name (or a file name) is looked up in [`models_dir`].
pub fn resolve(name_or_path: &str) -> Result<PathBuf, Error> {
    let as_path = Path::new(name_or_path);
    if as_path.exists() {
        return Ok(as_path.to_path_buf());
    }
    let dir = models_dir();
    let known = KNOWN_MODELS.iter().find(|m| m.short_name == name_or_path);
    let candidate = match known {
        Some(m) => dir.join(m.file),
        None => dir.join(name_or_path),
    };
    if candidate.exists() {
        return Ok(candidate);
    }
    match known {
        Some(m) => Err(Error::NotFound(format!(
            "model '{}' is not in {} (expected {}); run scripts/fetch-models.sh {} or set {MODELS_ENV}",
            m.short_name,
            dir.display(),
            candidate.display(),
            m.short_name
        ))),
        None => {
            let names: Vec<&str> = KNOWN_MODELS.iter().map(|m| m.short_name).collect();
            Err(Error::NotFound(format!(
                "no such file or model: '{name_or_path}' (known short names: {})",
                names.join(", ")
            )))
        }
    }
}
