//! Weight rows interleaved block by block, in groups of `R` rows: the
//! layout the group kernels ([`super::VecDotKernel::dot8`], `dot16`) read.
//! `R` (8 or 16) is chosen per weight type by the active kernel set
//! ([`super::VecDotKernel::group_rows`]): the width of its vectors in i32
//! lanes.
//!
//! A matrix is repacked once, at load time, in groups of `R` consecutive
//! rows. Within a group, block `b` of the `R` rows is stored together
//! (`R * block_bytes` bytes), and inside it every *piece* of the block (a
//! 2-byte scale, or a 4-byte run of packed values) is stored for row 0,
//! row 1, ..., row `R - 1` in turn. So a vector load of `4 * R` bytes of a
//! 4-byte piece (32 bytes for eight rows, 64 for sixteen) holds the same
//! four values of all the rows, one row per i32 lane: an integer dot
//! product against the four matching activation bytes (broadcast to every
//! lane) leaves row `r`'s partial sum in lane `r`, with no horizontal adds;
//! and the rows' f16 scales load as one vector.
//!
//! The byte at offset `o` of block `b` of row `r`, in a piece that starts
//! at offset `p` of the block and is `w` bytes wide, moves to
//! `R * block_bytes * b + R * p + w * r + (o - p)`. The group has exactly
//! the bytes of its rows, so a repacked matrix is no bigger than the file's.
//!
//! The layout only moves bytes; the values, and therefore the results of
//! the dot products, are those of the rows it came from (the kernels are
//! tested bit for bit against the scalar reference on the rows).

use crate::GgmlType;

/// The most rows per group any kernel set uses (a bound for buffers).
pub const MAX_GROUP_ROWS: usize = 16;

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
        // d, m, fifth bits, nibbles.
        Q5_1 => &[2, 2, 4, 4, 4, 4, 4],
        // d, the 32 bytes of values as eight 4-byte pieces.
        Q8_0 => &[2, 4, 4, 4, 4, 4, 4, 4, 4],
        // 16 scale bytes, 64 bytes of 2-bit values, d, dmin.
        Q2K => &Q2K_PIECES,
        // 32 bytes of high bits, 64 of 2-bit values, 12 scale bytes, d.
        Q3K => &Q3K_PIECES,
        // d, dmin, the 12 scale bytes, then 128 bytes of nibbles.
        Q4K => &Q4K_PIECES,
        // Q4_K's pieces, with the 32 bytes of fifth bits before the nibbles.
        Q5K => &Q5K_PIECES,
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

const Q5K_PIECES: [usize; 45] = {
    let mut p = [4; 45];
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

/// Repacks the `group_rows` rows (8 or 16) in `rows` (`rows.len() / group_rows`
/// bytes each, a whole number of blocks) into `out` (the same length).
/// Returns false, leaving `out` unspecified, if `ty` has no layout or the
/// lengths do not fit.
pub fn interleave(ty: GgmlType, group_rows: usize, rows: &[u8], out: &mut [u8]) -> bool {
    move_bytes(ty, group_rows, rows, out, true)
}

/// The inverse of [`interleave`]: the `group_rows` rows of one group, row
/// after row. Returns false as [`interleave`] does.
pub fn deinterleave(ty: GgmlType, group_rows: usize, group: &[u8], out: &mut [u8]) -> bool {
    move_bytes(ty, group_rows, group, out, false)
}

/// Where a group's rows are: `rows` rows per group, and which one.
#[derive(Clone, Copy, Debug)]
pub struct RowOf {
    /// Rows per group.
    pub group_rows: usize,
    /// The row, `0..group_rows`.
    pub row: usize,
}

/// Copies block `b` of row `at.row` of an interleaved group of
/// `at.group_rows` rows into `out` (one block's bytes), as it was before
/// [`interleave`]. Returns false, leaving `out` unspecified, if `ty` has
/// no layout or the block, row or output size does not fit.
pub fn block_of_row(ty: GgmlType, group: &[u8], at: RowOf, b: usize, out: &mut [u8]) -> bool {
    let Some((pieces, block)) = pieces(ty) else {
        return false;
    };
    let rows = at.group_rows;
    let base = b * rows * block;
    if at.row >= rows || out.len() != block || base + rows * block > group.len() {
        return false;
    }
    for &(p, w) in &pieces {
        let from = base + rows * p + w * at.row;
        out[p..p + w].copy_from_slice(&group[from..from + w]);
    }
    true
}

/// [`move_rows`] for the group sizes the kernel sets use (a constant row
/// count makes the repacking at load about twice as fast); false for any
/// other.
fn move_bytes(ty: GgmlType, rows: usize, src: &[u8], dst: &mut [u8], forward: bool) -> bool {
    match rows {
        8 => move_rows::<8>(ty, src, dst, forward),
        16 => move_rows::<16>(ty, src, dst, forward),
        _ => false,
    }
}

/// Moves the bytes of a group of `R` rows between the rows' layout and
/// the interleaved one (`forward`: to the interleaved one).
fn move_rows<const R: usize>(ty: GgmlType, src: &[u8], dst: &mut [u8], forward: bool) -> bool {
    let rows = R;
    let Some((pieces, block)) = pieces(ty) else {
        return false;
    };
    let row_bytes = src.len() / rows;
    if src.len() != dst.len() || !src.len().is_multiple_of(rows) || !row_bytes.is_multiple_of(block)
    {
        return false;
    }
    for b in 0..row_bytes / block {
        let group_block = b * rows * block;
        for r in 0..rows {
            let row_block = r * row_bytes + b * block;
            for &(p, w) in &pieces {
                let plain = row_block + p..row_block + p + w;
                let packed = group_block + rows * p + w * r..group_block + rows * p + w * (r + 1);
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
        let types = [
            GgmlType::Q4_0,
            GgmlType::Q4_1,
            GgmlType::Q5_0,
            GgmlType::Q5_1,
            GgmlType::Q8_0,
            GgmlType::Q2K,
            GgmlType::Q3K,
            GgmlType::Q4K,
            GgmlType::Q5K,
            GgmlType::Q6K,
        ];
        for (ty, group_rows) in types.into_iter().flat_map(|ty| [(ty, 8), (ty, 16)]) {
            let block = ty.type_size();
            let src: Vec<u8> = (0..group_rows * 3 * block)
                .map(|i| (i * 7 + i / 5) as u8)
                .collect();
            let mut packed = vec![0u8; src.len()];
            assert!(interleave(ty, group_rows, &src, &mut packed));
            let mut back = vec![0u8; src.len()];
            assert!(deinterleave(ty, group_rows, &packed, &mut back));
            assert_eq!(back, src, "{ty}");
            // Each block of each row comes back on its own.
            let row_bytes = src.len() / group_rows;
            let mut one = vec![0u8; block];
            for row in 0..group_rows {
                for b in 0..row_bytes / block {
                    let at = RowOf { group_rows, row };
                    assert!(block_of_row(ty, &packed, at, b, &mut one));
                    let from = row * row_bytes + b * block;
                    assert_eq!(one, src[from..from + block], "{ty} row {row} block {b}");
                }
                let past = RowOf {
                    group_rows,
                    row: group_rows,
                };
                assert!(!block_of_row(ty, &packed, past, 0, &mut one));
            }
            // Piece 0 of every row comes first, row after row; then, for
            // the 4-byte pieces, a vector of 4 * group_rows bytes holds one
            // piece of every row.
            let w0 = piece_widths(ty).unwrap()[0];
            for r in 0..group_rows {
                assert_eq!(
                    packed[w0 * r..w0 * (r + 1)],
                    src[r * row_bytes..r * row_bytes + w0]
                );
            }
            let (pieces, _) = pieces(ty).unwrap();
            let &(p, _) = pieces.iter().find(|&&(_, w)| w == 4).unwrap();
            for r in 0..group_rows {
                let at = group_rows * p + 4 * r;
                assert_eq!(
                    packed[at..at + 4],
                    src[r * row_bytes + p..r * row_bytes + p + 4],
                    "{ty} rows {group_rows} piece at {p}"
                );
            }
        }
        let mut out = [0u8; 16];
        assert!(!interleave(GgmlType::F16, 8, &[0u8; 16], &mut out));
        assert!(!interleave(GgmlType::Q8_0, 8, &[0u8; 15], &mut out[..15]));
        assert!(!interleave(GgmlType::Q8_0, 0, &[0u8; 16], &mut out));
        assert!(!interleave(GgmlType::Q8_0, 4, &[0u8; 16], &mut out));
    }
}
