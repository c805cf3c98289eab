//! Tensor dumps for debugging: every named intermediate of every forward
//! pass written as a NumPy `.npy` file, so that two runs (ferrite against
//! ferrite, or against llama.cpp or a numpy re-implementation) can be
//! diffed tensor by tensor and the first divergence found
//! (`scripts/compare-dumps.py`).
//!
//! A forward pass holds an `Option<&TensorDump>`; each named point is one
//! `if let Some(..)` on it ([`dump_rows`]), so a pass without a dump does
//! no other work. The names are llama.cpp's (its graph callback's `cb(cur,
//! NAME, il)`, printed by its eval-callback tool as `NAME-il`):
//! `inp_embd`, `attn_norm-3`, `Qcur-3`, `ffn_out-3`, `l_out-3`,
//! `result_norm`, `result_output`, ... Each is written as
//! `DIR/NAME.stepN.npy`: `N` counts the forward passes the dump has seen
//! (a prompt chunk, a generated token, an encoder pass, a decoder step of
//! every hypothesis), from 0. The values are little-endian f32 in C order,
//! shape `(rows, cols)`: one row per token of the pass (per hypothesis
//! for an encoder-decoder's decoder step).
//!
//! Dumping reads the buffers the pass computes and changes no value.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::Error;

/// Where and which intermediate tensors of forward passes are written
/// (see the book, `docs/src/commands/dump.md`). Give one to
/// [`crate::serving::Session::set_dump`],
/// [`TranslateOptions::dump`](crate::TranslateOptions::dump) or
/// [`Embedder::embed_dumped`](crate::Embedder::embed_dumped); the files
/// are `DIR/NAME.stepN.npy`.
#[derive(Debug)]
pub struct TensorDump {
    dir: PathBuf,
    filter: Option<Filter>,
    /// Forward passes begun; the current one is `passes - 1`.
    passes: AtomicUsize,
    /// Files written so far.
    written: AtomicUsize,
}

/// Which names are written: a glob (`*` any run of characters, `?` one)
/// when the pattern has a wildcard, else a substring.
#[derive(Debug)]
struct Filter {
    pattern: Vec<char>,
    glob: bool,
}

impl Filter {
    fn new(pattern: &str) -> Filter {
        Filter {
            pattern: pattern.chars().collect(),
            glob: pattern.contains(['*', '?']),
        }
    }

    fn matches(&self, name: &str) -> bool {
        if self.glob {
            let name: Vec<char> = name.chars().collect();
            glob_match(&self.pattern, &name)
        } else {
            name.contains(&self.pattern.iter().collect::<String>())
        }
    }
}

/// Whether `name` matches the whole of `pattern` (`*`: any run, `?`: one
/// character), by the usual backtracking over the last `*`.
fn glob_match(pattern: &[char], name: &[char]) -> bool {
    let (mut p, mut n) = (0, 0);
    // The last `*` seen and the name position it was tried at.
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        if p < pattern.len() && (pattern[p] == '?' || pattern[p] == name[n]) {
            p += 1;
            n += 1;
        } else if p < pattern.len() && pattern[p] == '*' {
            star = Some((p, n));
            p += 1;
        } else if let Some((sp, sn)) = star {
            // Let the `*` take one more character.
            p = sp + 1;
            n = sn + 1;
            star = Some((sp, sn + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|&c| c == '*')
}

impl TensorDump {
    /// A dump into directory `dir` (created if missing), of every tensor,
    /// or with `filter` only of those whose name (`attn_norm-3`, without
    /// the step) matches it: a glob when it holds `*` or `?`
    /// (`attn_norm-*`, `*-3`), else a substring (`ffn`).
    pub fn new(dir: impl Into<PathBuf>, filter: Option<&str>) -> Result<TensorDump, Error> {
        let dir = dir.into();
        std::fs::create_dir_all(&dir).map_err(|source| Error::Io {
            path: dir.display().to_string(),
            source,
        })?;
        Ok(TensorDump {
            dir,
            filter: filter.map(Filter::new),
            passes: AtomicUsize::new(0),
            written: AtomicUsize::new(0),
        })
    }

    /// The directory the files go to.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Forward passes seen so far (the next one's files are
    /// `NAME.step{passes}.npy`).
    pub fn passes(&self) -> usize {
        self.passes.load(Ordering::Relaxed)
    }

    /// Files written so far.
    pub fn files_written(&self) -> usize {
        self.written.load(Ordering::Relaxed)
    }

    /// Starts the next forward pass: the tensors written from now on carry
    /// its step number.
    pub(crate) fn begin_pass(&self) {
        self.passes.fetch_add(1, Ordering::Relaxed);
    }

    /// Whether the tensor `name` (with its layer, `attn_norm-3`) is
    /// written: for points that cost work of their own.
    pub(crate) fn wants(&self, name: &str) -> bool {
        self.filter.as_ref().is_none_or(|f| f.matches(name))
    }

    /// Writes `data`, `rows` rows, as `NAME.stepN.npy` with `NAME` =
    /// `name-layer` (or `name` without a layer), if the filter takes it.
    pub(crate) fn write(
        &self,
        name: &str,
        layer: Option<usize>,
        data: &[f32],
        rows: usize,
    ) -> Result<(), Error> {
        let full = match layer {
            Some(l) => format!("{name}-{l}"),
            None => name.to_string(),
        };
        if !self.wants(&full) {
            return Ok(());
        }
        let step = self.passes().saturating_sub(1);
        let path = self.dir.join(format!("{full}.step{step}.npy"));
        let cols = data.len().checked_div(rows).unwrap_or(0);
        let written = std::fs::File::create(&path).and_then(|f| {
            let mut w = std::io::BufWriter::new(f);
            write_npy(&mut w, &data[..rows * cols], rows, cols)?;
            w.flush()
        });
        written.map_err(|source| Error::Io {
            path: path.display().to_string(),
            source,
        })?;
        self.written.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

/// Writes `rows` rows of `data` (all of it) as the tensor `name` of
/// `layer`, when there is a dump; nothing else when there is none.
#[inline]
pub(crate) fn dump_rows(
    dump: Option<&TensorDump>,
    name: &str,
    layer: Option<usize>,
    data: &[f32],
    rows: usize,
) -> Result<(), Error> {
    match dump {
        None => Ok(()),
        Some(d) => d.write(name, layer, data, rows),
    }
}

/// Starts a forward pass of `dump`, if there is one.
#[inline]
pub(crate) fn begin_pass(dump: Option<&TensorDump>) {
    if let Some(d) = dump {
        d.begin_pass();
    }
}

/// Writes `data` (`rows` x `cols` f32, row after row) as NumPy `.npy`
/// format 1.0: magic, version, a little-endian u16 header length, a
/// Python dict literal padded with spaces and ended by a newline so that
/// the data starts at a multiple of 64, then the values (little-endian).
/// The dump's files and `ferrite embed --format npy` both use it.
pub fn write_npy(
    w: &mut impl Write,
    data: &[f32],
    rows: usize,
    cols: usize,
) -> std::io::Result<()> {
    let mut header =
        format!("{{'descr': '<f4', 'fortran_order': False, 'shape': ({rows}, {cols}), }}");
    // Magic (6) + version (2) + length (2) + header + '\n', padded to 64.
    let unpadded = 10 + header.len() + 1;
    header.push_str(&" ".repeat(unpadded.next_multiple_of(64) - unpadded));
    header.push('\n');
    w.write_all(b"\x93NUMPY\x01\x00")?;
    w.write_all(&(header.len() as u16).to_le_bytes())?;
    w.write_all(header.as_bytes())?;
    let mut bytes = Vec::with_capacity(data.len() * 4);
    for v in data {
        bytes.extend_from_slice(&v.to_le_bytes());
    }
    w.write_all(&bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_by_glob_or_substring() {
        let glob = Filter::new("attn_norm-*");
        assert!(glob.matches("attn_norm-3"));
        assert!(!glob.matches("ffn_norm-3"));
        assert!(!glob.matches("attn_norm"));
        let layer = Filter::new("*-1?");
        assert!(layer.matches("l_out-12"));
        assert!(!layer.matches("l_out-1"));
        assert!(!layer.matches("l_out-2"));
        let sub = Filter::new("norm");
        assert!(sub.matches("attn_norm-0"));
        assert!(sub.matches("result_norm"));
        assert!(!sub.matches("result_output"));
        assert!(Filter::new("*").matches("anything"));
        assert!(Filter::new("a*b*c").matches("aXbYbZc"));
        assert!(!Filter::new("a*b*c").matches("aXbYbZ"));
    }

    #[test]
    fn writes_npy_files_numpy_reads() {
        let dir = std::env::temp_dir().join(format!("ferrite-dump-unit-{}", std::process::id()));
        let dump = TensorDump::new(&dir, Some("keep")).unwrap();
        dump.begin_pass();
        let data = [1.0f32, -2.5, 3.25, 4.0, 5.0, 6.0];
        dump.write("keep", Some(2), &data, 2).unwrap();
        dump.write("drop", None, &data, 2).unwrap();
        dump.begin_pass();
        dump.write("keep", None, &data[..3], 1).unwrap();
        assert_eq!(dump.files_written(), 2);
        let bytes = std::fs::read(dir.join("keep-2.step0.npy")).unwrap();
        assert_eq!(&bytes[..8], b"\x93NUMPY\x01\x00");
        let hlen = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
        assert_eq!((10 + hlen) % 64, 0);
        let header = std::str::from_utf8(&bytes[10..10 + hlen]).unwrap();
        assert!(header.contains("'shape': (2, 3)"), "{header}");
        assert!(header.ends_with('\n'));
        let values: Vec<f32> = bytes[10 + hlen..]
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(values, data);
        assert!(dir.join("keep.step1.npy").exists());
        assert!(!dir.join("drop.step0.npy").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
