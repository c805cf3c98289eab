//! Every path ARCHITECTURE.md names must exist, so the document cannot go
//! on describing files the tree no longer has.
//!
//! What counts as a path: an inline code span (`` `...` ``) with no space
//! in it that contains a `/` or ends in one of the repository's source
//! extensions (`.rs`, `.py`, `.sh`, `.md`, `.tsv`; not `.json`, since a bare
//! `config.json` or `tokenizer.json` is a model directory's file). Spans
//! starting with `../` name something outside the repository and are
//! skipped; a span that looks like a Rust path (`a::b`), a URL or an
//! environment variable is not a path, and neither are the names in
//! [`NOT_OURS`] (llama.cpp's files, named when the text says what ferrite
//! matches).
//!
//! How a path is resolved: the document names files the way a reader in
//! the surrounding section would, relative to the module they are reading
//! about. So a path exists when it is found, in this order:
//! 1. relative to the repository root (`crates/cli/src/error.rs`,
//!    `python/src/lib.rs`, `scripts/...`);
//! 2. relative to `crates/` (`ferrite/src/kv_cache/`, `server/src/api/`);
//! 3. relative to a crate's directory, `crates/*/` (`tests/same_bits.rs`);
//! 4. relative to a crate's source directory, `crates/*/src/`
//!    (`models/transformer/forward.rs`, `generate/prefix.rs`);
//! 5. for a bare file or directory name without a `/` (`forward.rs`,
//!    `table.rs`): anywhere below `crates/*/src/` or `python/`, since the
//!    text names it right after its directory.
//!
//! A path component written `NAME` is a placeholder
//! (`crates/cli/src/commands/NAME.rs`): it matches any one entry.

use std::path::{Path, PathBuf};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// File names ARCHITECTURE.md uses for files that are not in the
/// repository: a model directory's and llama.cpp's.
const NOT_OURS: [&str; 1] = ["convert_hf_to_gguf.py"];

/// The inline code spans of `text` that name a path (see the module docs).
fn path_spans(text: &str) -> Vec<String> {
    const EXTENSIONS: [&str; 5] = [".rs", ".py", ".sh", ".md", ".tsv"];
    let mut out = Vec::new();
    // Fenced blocks hold a diagram and commands, not path references.
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        for (i, span) in line.split('`').enumerate() {
            if i % 2 == 0 || span.is_empty() || span.contains(char::is_whitespace) {
                continue;
            }
            if NOT_OURS.contains(&span)
                || span.starts_with("../")
                || span.contains("::")
                || span.contains("://")
                || span.starts_with('$')
                || span.starts_with('-')
                || span.contains('<')
            {
                continue;
            }
            if span.contains('/') || EXTENSIONS.iter().any(|e| span.ends_with(e)) {
                out.push(span.to_string());
            }
        }
    }
    out
}

/// The directories every crate contributes to the search (`crates/*/` and
/// `crates/*/src/`).
fn crate_dirs(root: &Path) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let mut crates = Vec::new();
    let mut srcs = Vec::new();
    for entry in std::fs::read_dir(root.join("crates")).unwrap() {
        let dir = entry.unwrap().path();
        if dir.is_dir() {
            if dir.join("src").is_dir() {
                srcs.push(dir.join("src"));
            }
            crates.push(dir);
        }
    }
    crates.sort();
    srcs.sort();
    (crates, srcs)
}

/// Whether `rel` (components, `NAME` a wildcard) exists below `base`.
fn exists_below(base: &Path, rel: &[&str]) -> bool {
    let Some((first, rest)) = rel.split_first() else {
        return base.exists();
    };
    if first.contains("NAME") {
        let (pre, post) = first.split_once("NAME").unwrap();
        let Ok(entries) = std::fs::read_dir(base) else {
            return false;
        };
        return entries.flatten().any(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.len() > pre.len() + post.len()
                && name.starts_with(pre)
                && name.ends_with(post)
                && exists_below(&e.path(), rest)
        });
    }
    exists_below(&base.join(first), rest)
}

/// Whether an entry called `name` exists anywhere below `dir`.
fn found_anywhere(dir: &Path, name: &str) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    entries.flatten().any(|e| {
        e.file_name() == name
            || (e.file_type().map(|t| t.is_dir()).unwrap_or(false)
                && found_anywhere(&e.path(), name))
    })
}

/// Whether the path a span names exists, by the rules in the module docs.
fn resolves(root: &Path, span: &str) -> bool {
    let rel: Vec<&str> = span.split('/').filter(|c| !c.is_empty()).collect();
    let (crates, srcs) = crate_dirs(root);
    let mut bases = vec![root.to_path_buf(), root.join("crates")];
    bases.extend(crates);
    bases.extend(srcs.iter().cloned());
    if bases.iter().any(|b| exists_below(b, &rel)) {
        return true;
    }
    if rel.len() == 1 {
        let mut dirs = srcs;
        dirs.push(root.join("python"));
        return dirs.iter().any(|d| found_anywhere(d, rel[0]));
    }
    false
}

#[test]
fn every_path_architecture_md_names_exists() {
    let root = repo_root();
    let text = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    let spans = path_spans(&text);
    assert!(
        spans.len() > 50,
        "ARCHITECTURE.md names only {} paths: is the extraction broken?",
        spans.len()
    );
    let missing: Vec<&String> = spans.iter().filter(|s| !resolves(&root, s)).collect();
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md names paths that do not exist (rules in tests/architecture.rs): {missing:?}"
    );
}

/// The checker itself: it finds a path that exists and rejects one that
/// does not, so a passing test means something.
#[test]
fn the_path_checker_tells_present_from_missing() {
    let root = repo_root();
    let spans = path_spans("see `models/transformer/forward.rs`, `a::b`, `../x.md` and `no such`");
    assert_eq!(spans, ["models/transformer/forward.rs"]);
    assert!(resolves(&root, "models/transformer/forward.rs"));
    assert!(resolves(&root, "crates/cli/src/commands/NAME.rs"));
    assert!(resolves(&root, "table.rs"));
    assert!(!resolves(&root, "generate/kv_cache/"));
    assert!(!resolves(&root, "models/transformer/no_such_file.rs"));
    assert!(!resolves(&root, "no_such_file.rs"));
}

/// The scripts find the reference venv and llama.cpp through
/// `scripts/env.sh` (read by `scripts/common.py` and `scripts/refenv`), the
/// one file that writes their default locations: no other file under
/// `scripts/` names a machine path (a home or cache directory, `/tmp`, the
/// workplace's folders), so anyone can rerun them from a clone.
#[test]
fn scripts_name_no_machine_path() {
    const MACHINE: [&str; 8] = [
        "/root",
        "/home/",
        "/work/",
        "/tmp/",
        "~/",
        ".cache",
        "$HOME",
        "Path.home",
    ];
    fn visit(dir: &Path, found: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                if entry.file_name() != "__pycache__" {
                    visit(&path, found);
                }
                continue;
            }
            if entry.file_name() == "env.sh" && path.parent().unwrap().ends_with("scripts") {
                continue;
            }
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue;
            };
            for (n, line) in text.lines().enumerate() {
                if let Some(m) = MACHINE.iter().find(|m| line.contains(*m)) {
                    found.push(format!("{}:{}: {m}", path.display(), n + 1));
                }
            }
        }
    }
    let mut found = Vec::new();
    visit(&repo_root().join("scripts"), &mut found);
    assert!(
        found.is_empty(),
        "machine paths in scripts/ (use scripts/env.sh's settings): {found:#?}"
    );
}
