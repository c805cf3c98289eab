//! Strings without a pattern, byte by byte: escapes, well-formed UTF-8 and
//! the grammar's length cap.

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
enum Escape {
    #[default]
    None,
    /// After a backslash.
    Start,
    /// `n` hex digits of `\uXXXX` still to come.
    Hex(u8),
    /// Inside a multi-byte UTF-8 character: `left` bytes to come, the
    /// next one in `lo..=hi`.
    Utf8 { left: u8, lo: u8, hi: u8 },
}

/// A UTF-8 lead byte's continuation count and its next byte's range
/// (overlong forms and surrogates excluded), `None` if it leads nothing.
fn utf8_lead(c: u8) -> Option<(u8, u8, u8)> {
    Some(match c {
        0xc2..=0xdf => (1, 0x80, 0xbf),
        0xe0 => (2, 0xa0, 0xbf),
        0xed => (2, 0x80, 0x9f),
        0xe1..=0xef => (2, 0x80, 0xbf),
        0xf0 => (3, 0x90, 0xbf),
        0xf1..=0xf3 => (3, 0x80, 0xbf),
        0xf4 => (3, 0x80, 0x8f),
        _ => return None,
    })
}

/// A string read so far, after its opening quote.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(super) struct FreeStr {
    /// Bytes so far (an escape counts its backslash only).
    len: usize,
    escape: Escape,
}

/// What a byte does to a [`FreeStr`].
pub(super) enum StrStep {
    /// It continues the string.
    Took,
    /// It is the closing quote.
    Closed,
    /// It may not come next.
    Refused,
}

impl FreeStr {
    /// Not after a backslash: how many more bytes the string may take
    /// when at most `max` in all.
    pub(super) fn room(&self, max: usize) -> Option<usize> {
        (self.escape == Escape::None).then(|| max.saturating_sub(self.len))
    }

    /// Feeds byte `c` to a string of at most `max` bytes.
    pub(super) fn step(&mut self, c: u8, max: usize) -> StrStep {
        let (len, escape) = (&mut self.len, &mut self.escape);
        let took = match *escape {
            Escape::Start => {
                *escape = match c {
                    b'u' => Escape::Hex(4),
                    b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => Escape::None,
                    _ => return StrStep::Refused,
                };
                true
            }
            Escape::Hex(n) => {
                if !c.is_ascii_hexdigit() {
                    return StrStep::Refused;
                }
                *escape = if n == 1 {
                    Escape::None
                } else {
                    Escape::Hex(n - 1)
                };
                true
            }
            Escape::Utf8 { left, lo, hi } => {
                if !(lo..=hi).contains(&c) {
                    return StrStep::Refused;
                }
                *len += 1;
                *escape = if left == 1 {
                    Escape::None
                } else {
                    Escape::Utf8 {
                        left: left - 1,
                        lo: 0x80,
                        hi: 0xbf,
                    }
                };
                true
            }
            Escape::None => match c {
                b'"' => return StrStep::Closed,
                _ if *len >= max || c < 0x20 => false,
                0x80.. => match utf8_lead(c) {
                    Some((left, lo, hi)) if *len + 1 + usize::from(left) <= max => {
                        *len += 1;
                        *escape = Escape::Utf8 { left, lo, hi };
                        true
                    }
                    _ => false,
                },
                b'\\' => {
                    *escape = Escape::Start;
                    *len += 1;
                    true
                }
                _ => {
                    *len += 1;
                    true
                }
            },
        };
        if took {
            StrStep::Took
        } else {
            StrStep::Refused
        }
    }
}
