//! Shared helpers for the integration tests.
#![allow(dead_code)]

use std::path::PathBuf;

/// Path of a real model fetched by `scripts/fetch-models.sh`. Panics with
/// instructions if it is missing: tests on real models never skip silently.
pub fn real_model(short_name: &str) -> PathBuf {
    ferrite::model_path::resolve(short_name).unwrap_or_else(|e| {
        panic!("{e}\n(the test suite needs the real models: run scripts/fetch-models.sh)")
    })
}

/// The repository's testdata directory.
pub fn testdata() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata")
}
