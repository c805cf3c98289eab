//! Fuzzes ferrite's safetensors reader: the input is written as a
//! directory's `model.safetensors` (the reader memory-maps files) and
//! opened. Any input must open or fail with an error, never panic; on
//! success every tensor's data slice must have its stated size.

#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use ferrite::formats::safetensors::SafetensorsDir;
use libfuzzer_sys::fuzz_target;

/// A directory of this process's own (in /dev/shm when there is one).
fn dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let base = PathBuf::from("/dev/shm");
        let base = if base.is_dir() { base } else { std::env::temp_dir() };
        let d = base.join(format!("ferrite-fuzz-st-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    })
}

fuzz_target!(|data: &[u8]| {
    let dir = dir();
    std::fs::write(dir.join("model.safetensors"), data).unwrap();
    let Ok(st) = SafetensorsDir::open(dir) else {
        return;
    };
    for t in &st.tensors {
        assert_eq!(st.tensor_data(t).len() as u64, t.size());
    }
});
