//! The tensor data of a quantized file, made by every thread at once.
//!
//! The header fixes where each tensor's bytes go, so the data is cut into
//! pieces (runs of whole rows, about [`PIECE_BYTES`] of input each, in file
//! order, tensors never sharing a piece) that the threads take in turn:
//! each converts its piece's rows and puts them at their place in the
//! output (a positioned write to the file, or its slice of an output
//! buffer). No thread waits for another between tensors, and there is no
//! serial write phase; a row's bytes do not depend on which thread makes
//! them, so the file is the same for any thread count. A tensor's zero
//! padding goes out with its last piece.

use std::fs::File;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

use ferrite_kernels::quant::{dequantize, quantize};
use ferrite_kernels::GgmlType;

use super::{PlannedTensor, Progress};
use crate::formats::gguf::GgufFile;
use crate::Error;

/// Input bytes per piece: big enough that a positioned write per piece
/// costs little, small enough that the threads finish together.
const PIECE_BYTES: usize = 1 << 20;

/// Where the data goes.
pub(super) enum Sink<'a> {
    /// A file whose data section starts at byte `data_start`.
    File { file: &'a File, data_start: u64 },
    /// A buffer holding the data section (zeroed, the right length).
    Memory(&'a mut [u8]),
}

/// A tensor's place in the input and in the output.
struct Layout {
    /// Its bytes in the input file.
    src: Range<usize>,
    row_in: usize,
    row_out: usize,
    /// Where its data starts, from the start of the data section.
    dst: usize,
    /// Its data length, without and with the padding.
    len_out: usize,
    padded_out: usize,
}

/// A run of rows of one tensor.
struct Piece {
    tensor: usize,
    rows: Range<usize>,
}

/// Writes the data section of the output: `planned` tensors of `file`,
/// each padded to `alignment`, into `sink`.
pub(super) fn write_data(
    file: &GgufFile,
    planned: &[PlannedTensor],
    alignment: u64,
    sink: Sink,
    threads: usize,
    shown: &str,
    progress: Progress,
) -> Result<(), Error> {
    let mut layouts = Vec::with_capacity(planned.len());
    let mut dst = 0usize;
    for p in planned {
        let view = file
            .tensor(&p.name)
            .ok_or_else(|| Error::Internal(format!("tensor {} vanished", p.name)))?;
        let start = view.data.as_ptr() as usize - file.bytes().as_ptr() as usize;
        let n_per_row = p.dims[0];
        let (Some(row_in), Some(row_out)) =
            (p.from.bytes_for(n_per_row), p.to.bytes_for(n_per_row))
        else {
            return Err(Error::Internal(format!(
                "tensor {}: rows of {n_per_row} are not whole blocks",
                p.name
            )));
        };
        let rows = view.data.len().checked_div(row_in as usize).unwrap_or(0);
        let len_out = rows * row_out as usize;
        let padded_out = (len_out as u64).next_multiple_of(alignment) as usize;
        layouts.push(Layout {
            src: start..start + view.data.len(),
            row_in: row_in as usize,
            row_out: row_out as usize,
            dst,
            len_out,
            padded_out,
        });
        dst += padded_out;
    }
    let mut pieces = Vec::new();
    for (t, l) in layouts.iter().enumerate() {
        let rows = l.src.len().checked_div(l.row_in).unwrap_or(0);
        let per_piece = (PIECE_BYTES / l.row_in.max(1)).max(1);
        let mut r = 0;
        loop {
            let end = (r + per_piece).min(rows);
            pieces.push(Piece {
                tensor: t,
                rows: r..end,
            });
            r = end;
            if r >= rows {
                break;
            }
        }
    }
    // Each piece's output: its rows, and the padding after the last one.
    let out_range = |pc: &Piece| {
        let l = &layouts[pc.tensor];
        let start = l.dst + pc.rows.start * l.row_out;
        let end = if pc.rows.end * l.row_out == l.len_out {
            l.dst + l.padded_out
        } else {
            l.dst + pc.rows.end * l.row_out
        };
        start..end
    };
    let file_sink = match &sink {
        Sink::File { file, data_start } => Some((*file, *data_start)),
        Sink::Memory(_) => None,
    };
    let jobs: Vec<(usize, Option<&mut [u8]>)> = match sink {
        Sink::File { .. } => (0..pieces.len()).map(|i| (i, None)).collect(),
        Sink::Memory(mut rest) => {
            if rest.len() != dst {
                return Err(Error::Internal(format!(
                    "output buffer of {} bytes for {dst} bytes of data",
                    rest.len()
                )));
            }
            let mut jobs = Vec::with_capacity(pieces.len());
            for (i, pc) in pieces.iter().enumerate() {
                let (mine, tail) = std::mem::take(&mut rest).split_at_mut(out_range(pc).len());
                jobs.push((i, Some(mine)));
                rest = tail;
            }
            jobs
        }
    };
    let queue = Mutex::new(jobs.into_iter());
    let failed = AtomicBool::new(false);
    let failure: Mutex<Option<Error>> = Mutex::new(None);
    // Pieces still to do per tensor; tensors done; the last one done.
    let left: Vec<AtomicUsize> = layouts.iter().map(|_| AtomicUsize::new(0)).collect();
    for pc in &pieces {
        left[pc.tensor].fetch_add(1, Ordering::Relaxed);
    }
    let done = AtomicUsize::new(0);
    let last_done = AtomicUsize::new(0);
    let fail = |e: Error| {
        failed.store(true, Ordering::Relaxed);
        let mut f = failure.lock().unwrap_or_else(|e| e.into_inner());
        f.get_or_insert(e);
    };
    // Returns the count of tensors last reported done.
    let work = |mut progress: Option<Progress>| -> usize {
        let mut f32s = Vec::new();
        let mut buf = Vec::new();
        let mut reported = 0;
        loop {
            if failed.load(Ordering::Relaxed) {
                return reported;
            }
            let next = queue.lock().unwrap_or_else(|e| e.into_inner()).next();
            let Some((i, dst)) = next else {
                return reported;
            };
            let pc = &pieces[i];
            let (p, l) = (&planned[pc.tensor], &layouts[pc.tensor]);
            let range = out_range(pc);
            let out: &mut [u8] = match dst {
                Some(d) => d,
                None => {
                    buf.clear();
                    buf.resize(range.len(), 0);
                    &mut buf
                }
            };
            let src =
                &file.bytes()[l.src.start + pc.rows.start * l.row_in..][..pc.rows.len() * l.row_in];
            if let Err(e) = convert_rows(src, p, l, &mut f32s, out) {
                fail(e);
                return reported;
            }
            if let Some((f, data_start)) = file_sink {
                if let Err(e) = write_at(f, out, data_start + range.start as u64) {
                    fail(Error::io(shown, e));
                    return reported;
                }
            }
            let at = src.as_ptr() as usize - file.bytes().as_ptr() as usize;
            file.release(at..at + src.len());
            if left[pc.tensor].fetch_sub(1, Ordering::AcqRel) == 1 {
                file.release(l.src.clone());
                last_done.store(pc.tensor, Ordering::Relaxed);
                done.fetch_add(1, Ordering::AcqRel);
            }
            if let Some(report) = progress.as_mut() {
                let now = done.load(Ordering::Acquire);
                if now != reported {
                    reported = now;
                    let name = &planned[last_done.load(Ordering::Relaxed)].name;
                    report(now, planned.len(), name);
                }
            }
        }
    };
    let n_threads = threads.clamp(1, pieces.len().max(1));
    let reported = std::thread::scope(|s| {
        for _ in 1..n_threads {
            s.spawn(|| work(None));
        }
        work(Some(&mut *progress))
    });
    if let Some(e) = failure.into_inner().unwrap_or_else(|e| e.into_inner()) {
        return Err(e);
    }
    if reported != planned.len() && !planned.is_empty() {
        let name = &planned[last_done.into_inner()].name;
        progress(planned.len(), planned.len(), name);
    }
    Ok(())
}

/// Converts `src` (whole rows of `p.from`) to `p.to` in `out`, which has
/// room for them and may be longer (padding, left as it is).
fn convert_rows(
    src: &[u8],
    p: &PlannedTensor,
    l: &Layout,
    f32s: &mut Vec<f32>,
    out: &mut [u8],
) -> Result<(), Error> {
    if src.is_empty() {
        return Ok(());
    }
    let rows = src.len() / l.row_in;
    let out = &mut out[..rows * l.row_out];
    if p.from == p.to {
        out.copy_from_slice(src);
        return Ok(());
    }
    let failed = |e| Error::Internal(format!("tensor {}: {e}", p.name));
    let n_per_row = p.dims[0] as usize;
    if p.from == GgmlType::F32 {
        if let Some(values) = as_f32s(src) {
            for (r_in, r_out) in values
                .chunks_exact(n_per_row)
                .zip(out.chunks_exact_mut(l.row_out))
            {
                quantize(p.to, r_in, r_out).map_err(failed)?;
            }
            return Ok(());
        }
    }
    f32s.resize(n_per_row, 0.0);
    for (r_in, r_out) in src
        .chunks_exact(l.row_in)
        .zip(out.chunks_exact_mut(l.row_out))
    {
        dequantize(p.from, r_in, f32s)
            .and_then(|()| quantize(p.to, f32s, r_out))
            .map_err(failed)?;
    }
    Ok(())
}

/// F32 tensor data read in place (no copy) where the CPU is
/// little-endian, as GGUF data is, and the bytes are 4-byte aligned (GGUF
/// aligns tensor data to 32 bytes; a mapped file starts on a page).
fn as_f32s(bytes: &[u8]) -> Option<&[f32]> {
    if cfg!(target_endian = "big") {
        return None;
    }
    // SAFETY: every bit pattern is a valid f32, and `align_to` gives only
    // the correctly aligned middle part; it is used only if it is all of
    // `bytes`.
    let (head, values, tail) = unsafe { bytes.align_to::<f32>() };
    (head.is_empty() && tail.is_empty()).then_some(values)
}

/// Writes all of `buf` at byte `offset` of `f`.
#[cfg(unix)]
fn write_at(f: &File, buf: &[u8], offset: u64) -> std::io::Result<()> {
    std::os::unix::fs::FileExt::write_all_at(f, buf, offset)
}

/// Writes all of `buf` at byte `offset` of `f`.
#[cfg(windows)]
fn write_at(f: &File, mut buf: &[u8], mut offset: u64) -> std::io::Result<()> {
    while !buf.is_empty() {
        match std::os::windows::fs::FileExt::seek_write(f, buf, offset) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => {
                buf = &buf[n..];
                offset += n as u64;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
