//! Strings without a pattern, byte by byte: escapes, well-formed UTF-8,
//! the grammar's length cap and a schema's `minLength` / `maxLength`
//! (counted in Unicode characters: an escape is one, a surrogate pair's
//! two escapes are one).

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
enum Escape {
    #[default]
    None,
    /// After a backslash.
    Start,
    /// `left` hex digits of `\uXXXX` still to come, `value` those read;
    /// `low`: it must be a low surrogate (it follows a high one).
    Hex { left: u8, value: u16, low: bool },
    /// After a high surrogate's escape: the `\` of its low one.
    LowStart,
    /// The `u` of the low surrogate's escape.
    LowU,
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
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct FreeStr {
    /// Bytes so far (an escape counts its backslash only).
    len: usize,
    escape: Escape,
    /// Characters so far.
    chars: u32,
    /// Fewest characters before the closing quote (`minLength`).
    min: u32,
    /// Most characters (`maxLength`).
    max_chars: u32,
}

impl Default for FreeStr {
    /// Any length (up to the grammar's cap in bytes).
    fn default() -> FreeStr {
        FreeStr::sized(0, u32::MAX)
    }
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
    /// A string of `min..=max_chars` characters.
    pub(super) fn sized(min: u32, max_chars: u32) -> FreeStr {
        FreeStr {
            len: 0,
            escape: Escape::None,
            chars: 0,
            min,
            max_chars,
        }
    }

    /// Not after a backslash, and past `minLength`: how many more bytes
    /// the string may take when at most `max` in all. Any plain text
    /// (whole characters, none of them a quote, backslash or control
    /// character) of at most that many bytes may come next. Below
    /// `minLength`, `None`: whether text fits then depends on its
    /// characters, not only on its bytes (each byte must be fed).
    pub(super) fn room(&self, max: usize) -> Option<usize> {
        (self.escape == Escape::None && self.chars >= self.min).then(|| {
            let chars = (self.max_chars - self.chars) as usize;
            max.saturating_sub(self.len).min(chars)
        })
    }

    /// Whether a character that adds `cost` to the length may start
    /// here: under `maxLength`, and leaving room (in the cap of `max`
    /// bytes) for the characters `minLength` still needs, as ASCII.
    fn may_start(&self, cost: usize, max: usize) -> bool {
        let needed = self.min.saturating_sub(self.chars + 1) as usize;
        self.chars < self.max_chars && self.len + cost + needed <= max
    }

    /// Feeds byte `c` to a string of at most `max` bytes.
    pub(super) fn step(&mut self, c: u8, max: usize) -> StrStep {
        let (len, escape) = (&mut self.len, &mut self.escape);
        let took = match *escape {
            Escape::Start => {
                *escape = match c {
                    b'u' => Escape::Hex {
                        left: 4,
                        value: 0,
                        low: false,
                    },
                    b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => Escape::None,
                    _ => return StrStep::Refused,
                };
                true
            }
            Escape::Hex { left, value, low } => {
                let Some(d) = (c as char).to_digit(16) else {
                    return StrStep::Refused;
                };
                let value = value * 16 + d as u16;
                let left = left - 1;
                // The code units this escape can still become: a lone
                // surrogate does not parse (serde_json, Python refuse it or
                // cannot encode it), so a low one only after a high one.
                let first = u32::from(value) << (4 * left);
                let last = first + (1 << (4 * left)) - 1;
                let (lo, hi) = (0xdc00, 0xdfff);
                let ok = if low {
                    first <= hi && last >= lo
                } else {
                    !(first >= lo && last <= hi)
                };
                if !ok {
                    return StrStep::Refused;
                }
                *escape = match left {
                    0 if (0xd800..0xdc00).contains(&value) => Escape::LowStart,
                    0 => Escape::None,
                    _ => Escape::Hex { left, value, low },
                };
                true
            }
            // The low surrogate's escape (not counted against the length:
            // the high one's was).
            Escape::LowStart if c == b'\\' => {
                *escape = Escape::LowU;
                true
            }
            Escape::LowU if c == b'u' => {
                *escape = Escape::Hex {
                    left: 4,
                    value: 0,
                    low: true,
                };
                true
            }
            Escape::LowStart | Escape::LowU => false,
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
            Escape::None => {
                if c == b'"' {
                    return if self.chars >= self.min {
                        StrStep::Closed
                    } else {
                        StrStep::Refused
                    };
                }
                let lead = match c {
                    ..0x20 => return StrStep::Refused,
                    0x80.. => match utf8_lead(c) {
                        Some(lead) => Some(lead),
                        None => return StrStep::Refused,
                    },
                    _ => None,
                };
                let cost = 1 + lead.map_or(0, |(left, _, _)| usize::from(left));
                if !self.may_start(cost, max) {
                    return StrStep::Refused;
                }
                self.len += 1;
                self.chars += 1;
                if let Some((left, lo, hi)) = lead {
                    self.escape = Escape::Utf8 { left, lo, hi };
                } else if c == b'\\' {
                    self.escape = Escape::Start;
                }
                true
            }
        };
        if took {
            StrStep::Took
        } else {
            StrStep::Refused
        }
    }
}
