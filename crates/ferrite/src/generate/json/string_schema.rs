//! A `type: string` schema's keywords: `pattern` (see [`super::regex`]),
//! `format` (`date`, `time`, `date-time`, `uuid`, `email`: each a built-in
//! pattern), and `minLength` / `maxLength` (in Unicode characters, see
//! [`super::string`]).
//!
//! A format's pattern generates a subset of what the format allows, never
//! more: dates stop at the 28th of February (no leap-day check), times at
//! second 59 (no leap second), e-mail addresses are short lowercase ASCII
//! `local@label.tld` forms. A format, or a pattern, together with a
//! length bound is refused (the two would have to be intersected).

use serde_json::{Map, Value};

/// RFC 3339's `full-date`, each month's days (February's up to the 28th).
macro_rules! date {
    () => {
        "\\d{4}-((0[13578]|1[02])-(0[1-9]|[12]\\d|3[01])|(0[469]|11)-(0[1-9]|[12]\\d|30)|02-(0[1-9]|1\\d|2[0-8]))"
    };
}
/// RFC 3339's `full-time`: `HH:MM:SS`, an optional fraction, and `Z` or an
/// offset.
macro_rules! time {
    () => {
        "([01]\\d|2[0-3]):[0-5]\\d:[0-5]\\d(\\.\\d{1,6})?(Z|[+-]([01]\\d|2[0-3]):[0-5]\\d)"
    };
}

/// Each supported `format` and its pattern.
const FORMATS: [(&str, &str); 5] = [
    ("date", concat!("^", date!(), "$")),
    ("time", concat!("^", time!(), "$")),
    ("date-time", concat!("^", date!(), "T", time!(), "$")),
    (
        "uuid",
        "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$",
    ),
    (
        "email",
        "^[a-z0-9]{1,16}([._+-][a-z0-9]{1,16}){0,2}@([a-z0-9]{1,20}\\.){1,3}[a-z]{2,10}$",
    ),
];


/// What a string schema asks for.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum StringKind<'s> {
    /// Any string of `min..=max` characters.
    Sized { min: u32, max: u32 },
    /// A string matching this pattern (the schema's, or a format's).
    Pattern(&'s str),
}

/// The string `obj` describes; `max_bytes` is the longest string ferrite
/// writes. The error says what cannot be enforced.
pub(super) fn string_kind(obj: &Map<String, Value>, max_bytes: usize) -> Result<StringKind<'_>, String> {
    let count = |k: &str| super::check::count(obj, k);
    let min = count("minLength")?;
    let max = count("maxLength")?;
    let pattern = match obj.get("pattern") {
        None => None,
        Some(p) => Some(
            p.as_str()
                .ok_or("the schema keyword 'pattern' must be a string")?,
        ),
    };
    let format = match obj.get("format") {
        None => None,
        Some(Value::String(f)) => Some(
            FORMATS
                .iter()
                .find(|(name, _)| name == f)
                .map(|(_, p)| *p)
                .ok_or_else(|| {
                    let names: Vec<&str> = FORMATS.iter().map(|(n, _)| *n).collect();
                    format!(
                        "the string format '{f}' is not supported (ferrite enforces {})",
                        names.join(", ")
                    )
                })?,
        ),
        Some(other) => return Err(format!("format must be a string, got {other}")),
    };
    let lengths = min.is_some() || max.is_some();
    match (pattern, format) {
        (Some(_), Some(_)) => {
            return Err("the schema keywords 'pattern' and 'format' together are not supported".into())
        }
        (Some(_), None) if lengths => {
            return Err(
                "minLength / maxLength together with 'pattern' are not supported \
                 (bound the length in the pattern instead)"
                    .into(),
            )
        }
        (None, Some(_)) if lengths => {
            return Err("minLength / maxLength together with 'format' are not supported".into())
        }
        (Some(p), None) | (None, Some(p)) => return Ok(StringKind::Pattern(p)),
        (None, None) => {}
    }
    let min = min.unwrap_or(0);
    let max = max.unwrap_or(usize::MAX);
    if min > max {
        return Err(format!(
            "minLength {min} is more than maxLength {max}: no string matches"
        ));
    }
    if min > max_bytes {
        return Err(format!(
            "minLength {min} is more than {max_bytes}, the longest string ferrite writes"
        ));
    }
    // `min` fits in u32 (it is at most `max_bytes`); a larger `max` is
    // no bound beyond the bytes' cap.
    Ok(StringKind::Sized {
        min: min as u32,
        max: u32::try_from(max).unwrap_or(u32::MAX),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generate::json::regex::Dfa;

    /// Every format's pattern compiles, and its strings fit the cap.
    #[test]
    fn formats_compile() {
        for (name, p) in FORMATS {
            let mut budget = super::super::schema::MAX_PATTERN_STATES;
            let d = Dfa::compile(p, &mut budget).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(d.dist(0) > 0 && d.dist(0) < 64, "{name}");
        }
    }
}
