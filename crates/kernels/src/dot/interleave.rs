//! Eight weight rows interleaved block by block: the layout the eight-row
//! kernels ([`super::VecDotKernel::dot8`]) read.
//!
//! A matrix is repacked once, at load time, in groups of [`ROWS`]
//! consecutive rows. Within a group, block `b` of the eight rows is stored
//! together (`8 * block_bytes` bytes), and inside it every *piece* of the
//! block (a 2-byte scale, or a 4-byte run of packed values) is stored for
//! row 0, row 1, ..., row 7 in turn. So a 32-byte vector load of a 4-byte
//! piece holds the same four values of all eight rows, one row per i32
//! lane: an integer dot product against the four matching activation bytes
//! (broadcast to every lane) leaves row `r`'s partial sum in lane `r`, with
//! no horizontal adds; and the eight rows' f16 scales load as one vector.
//!
//! The byte at offset `o` of block `b` of row `r`, in a piece that starts
//! at offset `p` of the block and is `w` bytes wide, moves to
//! `8 * block_bytes * b + 8 * p + w * r + (o - p)`. The group has exactly
//! the bytes of its rows, so a repacked matrix is no bigger than the file's.
//!
//! The layout only moves bytes; the values, and therefore the results of
//! the dot products, are those of the rows it came from (the kernels are
//! tested bit for bit against the scalar reference on the rows).

use crate::GgmlType;

/// Rows per interleaved group.
pub const ROWS: usize = 8;

/// The widths of the pieces of one block of `ty`, in order, or `None` for a
/// type without an interleaved layout.
fn piece_widths(ty: GgmlType) -> Option<&'static [usize]> {
    use GgmlType::*;
    Some(match ty {
        // d, then the 16 bytes of nibbles as four 4-byte pieces.
        Q4_0 => &[2, 4, 4, 4, 4],
        // d, m, nibbles.
        Q4_1 => &[2, 2, 4, 4, 4, 4],
        // d, the 4 bytes of fifth bits, nibbles.
        Q5_0 => &[2, 4, 4, 4, 4, 4],
        // d, the 32 bytes of values as eight 4-byte pieces.
        Q8_0 => &[2, 4, 4, 4, 4, 4, 4, 4, 4],
        // 16 scale bytes, 64 bytes of 2-bit values, d, dmin.
        Q2K => &Q2K_PIECES,
        // 32 bytes of high bits, 64 of 2-bit values, 12 scale bytes, d.
        Q3K => &Q3K_PIECES,
        // d, dmin, the 12 scale bytes, then 128 bytes of nibbles.
        Q4K => &Q4K_PIECES,
        // 128 bytes of low nibbles, 64 of high bits, 16 scales, then d.
        Q6K => &Q6K_PIECES,
        _ => return None,
    })
}

const Q2K_PIECES: [usize; 22] = {
    let mut p = [4; 22];
    p[20] = 2;
    p[21] = 2;
    p
};

const Q3K_PIECES: [usize; 28] = {
    let mut p = [4; 28];
    p[27] = 2;
    p
};

const Q4K_PIECES: [usize; 37] = {
    let mut p = [4; 37];
    p[0] = 2;
    p[1] = 2;
    p
};

const Q6K_PIECES: [usize; 53] = {
    let mut p = [4; 53];
    p[52] = 2;
    p
};

/// Whether `ty` has an interleaved layout.
pub fn has_layout(ty: GgmlType) -> bool {
    piece_widths(ty).is_some()
}

/// The pieces of a block of `ty` as `(start, width)`, and the block size.
fn pieces(ty: GgmlType) -> Option<(Vec<(usize, usize)>, usize)> {
    let widths = piece_widths(ty)?;
    let mut pieces = Vec::with_capacity(widths.len());
    let mut start = 0;
    for &w in widths {
        pieces.push((start, w));
        start += w;
    }
    debug_assert_eq!(start, ty.type_size());
    Some((pieces, start))
}

/// Repacks the eight rows in `rows` (`rows.len() / 8` bytes each, a whole
/// number of blocks) into `out` (the same length). Returns false, leaving
/// `out` unspecified, if `ty` has no layout or the lengths do not fit.
pub fn interleave(ty: GgmlType, rows: &[u8], out: &mut [u8]) -> bool {
    move_bytes(ty, rows, out, true)
}

/// The inverse of [`interleave`]: the eight rows of one group, row after
/// row. Returns false as [`interleave`] does.
pub fn deinterleave(ty: GgmlType, group: &[u8], out: &mut [u8]) -> bool {
    move_bytes(ty, group, out, false)
}

/// Copies block `b` of row `row` (`0..8`) of an interleaved `group` into
/// `out` (one block's bytes), as it was before [`interleave`]. Returns
/// false, leaving `out` unspecified, if `ty` has no layout or the block,
/// row or output size does not fit.
pub fn block_of_row(ty: GgmlType, group: &[u8], row: usize, b: usize, out: &mut [u8]) -> bool {
    let Some((pieces, block)) = pieces(ty) else {
        return false;
    };
    let base = b * ROWS * block;
    if row >= ROWS || out.len() != block || base + ROWS * block > group.len() {
        return false;
    }
    for &(p, w) in &pieces {
        let at = base + ROWS * p + w * row;
        out[p..p + w].copy_from_slice(&group[at..at + w]);
    }
    true
}

fn move_bytes(ty: GgmlType, src: &[u8], dst: &mut [u8], forward: bool) -> bool {
    let Some((pieces, block)) = pieces(ty) else {
        return false;
    };
    let row_bytes = src.len() / ROWS;
    if src.len() != dst.len() || !src.len().is_multiple_of(ROWS) || !row_bytes.is_multiple_of(block)
    {
        return false;
    }
    for b in 0..row_bytes / block {
        let group_block = b * ROWS * block;
        for r in 0..ROWS {
            let row_block = r * row_bytes + b * block;
            for &(p, w) in &pieces {
                let plain = row_block + p..row_block + p + w;
                let packed = group_block + ROWS * p + w * r..group_block + ROWS * p + w * (r + 1);
                if forward {
                    dst[packed].copy_from_slice(&src[plain]);
                } else {
                    dst[plain].copy_from_slice(&src[packed]);
                }
            }
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interleave_round_trips_and_places_pieces() {
        for ty in [
            GgmlType::Q4_0,
            GgmlType::Q4_1,
            GgmlType::Q5_0,
            GgmlType::Q8_0,
        ] {
            let block = ty.bytes_for(32).unwrap() as usize;
            let rows: Vec<u8> = (0..ROWS * 3 * block)
                .map(|i| (i * 7 + i / 5) as u8)
                .collect();
            let mut packed = vec![0u8; rows.len()];
            assert!(interleave(ty, &rows, &mut packed));
            let mut back = vec![0u8; rows.len()];
            assert!(deinterleave(ty, &packed, &mut back));
            assert_eq!(back, rows, "{ty}");
            // Each block of each row comes back on its own.
            let mut one = vec![0u8; block];
            for r in 0..ROWS {
                for b in 0..rows.len() / ROWS / block {
                    assert!(block_of_row(ty, &packed, r, b, &mut one));
                    let at = r * (rows.len() / ROWS) + b * block;
                    assert_eq!(one, rows[at..at + block], "{ty} row {r} block {b}");
                }
            }
            // The first scale of every row comes first, row after row.
            let row_bytes = rows.len() / ROWS;
            for r in 0..ROWS {
                assert_eq!(
                    packed[2 * r..2 * r + 2],
                    rows[r * row_bytes..r * row_bytes + 2]
                );
            }
        }
        let mut out = [0u8; 16];
        assert!(!interleave(GgmlType::Q5_1, &[0u8; 16], &mut out));
        assert!(!interleave(GgmlType::Q8_0, &[0u8; 15], &mut out[..15]));
    }
}
