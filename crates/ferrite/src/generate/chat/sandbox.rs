//! The sandbox chat templates render in.
//!
//! Templates come from model files (and the conversation from clients), so
//! a render must not be able to take the process down. minijinja's *fuel*
//! is one budget for everything a render does: one fuel per instruction
//! executed and about one fuel per 64 bytes of every string, list and map
//! it creates (intermediate values included, not only the output), so a
//! budget of `n` fuel bounds both the time a render takes and the memory it
//! can allocate (about `n * 64` bytes). The budget grows with the size of
//! the conversation and tools ([`fuel_budget`]): a real template touches
//! each byte of its input a few times, while a hostile one that doubles a
//! string forty times, pads a number to a billion digits or indents every
//! line by a hundred thousand spaces runs out after a few megabytes and
//! fails with [`budget_message`].
//!
//! Fuel is charged once a value exists, so an operation that builds
//! gigabytes in one step would outrun it: `+` and `*` on lists, slices,
//! `chain` and `zip` build lazy views (a view of views doubles forty times
//! for free), and writing a value as text (`{{ x }}`, `~`, `|string`,
//! `|upper`, ...) of a list that shares one big string a thousand times
//! makes a gigabyte. The renders therefore run minijinja's instructions as
//! rewritten by [`super::bounded`]: those operators build lists paid for
//! slot by slot, and text is written through a writer that stops where the
//! fuel left stops paying. The bound: no single operation creates more
//! than the remaining fuel's bytes, and what it creates is then charged,
//! so a render never holds much more than its budget's bytes.
//!
//! The functions and filters ferrite adds pay for what they make too:
//! `tojson` writes at most what the remaining fuel can pay for, and
//! Python's `str.format` (from `minijinja_contrib`'s methods, which charge
//! a result only once it exists) is refused up front when its widths and
//! precisions ask for more than the fuel left. There is also a recursion
//! limit and a cap on the rendered text ([`MAX_OUTPUT`]).

use std::io;

use minijinja::value::{Kwargs, ValueKind};
use minijinja::{Environment, Error as JinjaError, ErrorKind, State, Value};

use super::bounded;

/// Fuel every render gets, whatever its input: about 64 MB of data or a
/// million instructions. Real templates use a few thousand fuel for a short
/// conversation (see the `template_budget` tests, which render the real
/// models' templates with an eighth of the budget).
pub const BASE_FUEL: u64 = 1 << 20;

/// Fuel added per byte of the conversation and tools (as JSON): room to
/// handle each input byte as 64 bytes of data, or one instruction per byte.
pub const FUEL_PER_INPUT_BYTE: u64 = 1;

/// Largest rendered prompt, in bytes.
pub const MAX_OUTPUT: usize = 16 << 20;

/// Deepest recursion (macro calls, nested includes) a template may use.
const RECURSION_LIMIT: usize = 64;

/// Bytes of data one fuel pays for (minijinja's accounting).
const BYTES_PER_FUEL: u64 = 64;

/// The fuel a render of an input of `input_bytes` bytes (its messages and
/// tools as JSON) may use: [`BASE_FUEL`] plus [`FUEL_PER_INPUT_BYTE`] per
/// byte.
pub fn fuel_budget(input_bytes: usize) -> u64 {
    BASE_FUEL.saturating_add((input_bytes as u64).saturating_mul(FUEL_PER_INPUT_BYTE))
}

/// The message of a render that ran out of its budget of `fuel`.
pub(super) fn budget_message(fuel: u64) -> String {
    format!(
        "the template needs more work or memory than this conversation allows (a budget of \
         {fuel} steps, about {} MB of data); the model's chat template is broken or hostile",
        fuel.saturating_mul(BYTES_PER_FUEL) >> 20
    )
}

/// An environment holding `source` as template `chat`, with the functions,
/// filters and Python string methods Hugging Face templates use, each
/// bounded as the module says. Fuel is set per render.
pub(super) fn environment(source: &str) -> Result<Environment<'static>, JinjaError> {
    let mut env = Environment::new();
    env.set_recursion_limit(RECURSION_LIMIT);
    // Python string methods (`.strip()`, `.startswith()`, ...) that
    // Hugging Face templates use, with `str.format` bounded first.
    env.set_unknown_method_callback(|state, value, method, args| {
        if method == "format" && value.kind() == ValueKind::String {
            check_format_padding(state, value.as_str().unwrap_or(""))?;
        }
        // Arguments that are not strings are written as text by some
        // methods (`'{}'.format(x)`, `''.join(x)`): measured first.
        bounded::check_args(state, args, false)?;
        minijinja_contrib::pycompat::unknown_method_callback(state, value, method, args)
    });
    env.add_function(
        "raise_exception",
        |state: &State, msg: Value| -> Result<String, JinjaError> {
            bounded::check_args(state, std::slice::from_ref(&msg), false)?;
            Err(JinjaError::new(ErrorKind::InvalidOperation, msg.to_string()))
        },
    );
    env.add_filter(
        "tojson",
        |state: &State, v: Value, kwargs: Kwargs| -> Result<Value, JinjaError> {
            let indent: Option<usize> = kwargs.get("indent")?;
            let json = python_json(&v, indent, remaining_bytes(state))?;
            // Serializing walks the whole value: a quarter fuel a byte, as
            // minijinja charges its own `tojson` (the engine then charges
            // the returned string's size on top).
            state.consume_fuel(json.len() as u64 / 4)?;
            Ok(Value::from_safe_string(json))
        },
    );
    env.add_function("strftime_now", |_fmt: String| -> String {
        // Deterministic output: templates that stamp today's date get a
        // fixed one instead of the clock.
        "01 Jan 2025".to_string()
    });
    bounded::install(&mut env);
    // Compiled here once to report syntax errors when the template is
    // loaded; renders use `bounded::compile`'s rewritten instructions.
    env.add_template_owned("chat", source.to_string())?;
    Ok(env)
}

/// Bytes of data the fuel left in `state` can pay for (unbounded when fuel
/// is off, as it never is for chat templates).
pub(super) fn remaining_bytes(state: &State) -> usize {
    match state.fuel_levels() {
        Some((_, remaining)) => {
            usize::try_from(remaining.saturating_mul(BYTES_PER_FUEL)).unwrap_or(usize::MAX)
        }
        None => usize::MAX,
    }
}

/// Fails when the widths and precisions in a `str.format` pattern (every
/// number in it, an upper bound of the padding it can ask for) add up to
/// more bytes than the fuel left can pay for: `'{:0999999999d}'.format(1)`
/// would otherwise allocate a gigabyte before the engine charges for it.
fn check_format_padding(state: &State, pattern: &str) -> Result<(), JinjaError> {
    let mut padding = 0usize;
    for run in pattern.split(|c: char| !c.is_ascii_digit()) {
        if !run.is_empty() {
            padding = padding.saturating_add(run.parse().unwrap_or(usize::MAX));
        }
    }
    if padding >= remaining_bytes(state) {
        return Err(JinjaError::from(ErrorKind::OutOfFuel));
    }
    Ok(())
}

/// JSON as Python's `json.dumps` writes it by default (`", "` and `": "`
/// between items, keys in their order, non-ASCII as is; with `indent`, one
/// item a line): what Hugging Face's `tojson` gives the templates models
/// were trained with (minijinja's own escapes `<`, `>`, `&` and `'`).
/// Fails with [`ErrorKind::OutOfFuel`] past `limit` bytes.
fn python_json(v: &Value, indent: Option<usize>, limit: usize) -> Result<String, JinjaError> {
    struct Spaced;
    fn separator<W: ?Sized + io::Write>(w: &mut W, first: bool) -> io::Result<()> {
        if first {
            Ok(())
        } else {
            w.write_all(b", ")
        }
    }
    impl serde_json::ser::Formatter for Spaced {
        fn begin_array_value<W: ?Sized + io::Write>(
            &mut self,
            w: &mut W,
            first: bool,
        ) -> io::Result<()> {
            separator(w, first)
        }
        fn begin_object_key<W: ?Sized + io::Write>(
            &mut self,
            w: &mut W,
            first: bool,
        ) -> io::Result<()> {
            separator(w, first)
        }
        fn begin_object_value<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
            w.write_all(b": ")
        }
    }
    let mut out = LimitedWriter::new(limit);
    let written = match indent {
        None => serde::Serialize::serialize(
            v,
            &mut serde_json::Serializer::with_formatter(&mut out, Spaced),
        ),
        Some(n) => {
            let pad = vec![b' '; n.min(16)];
            let f = serde_json::ser::PrettyFormatter::with_indent(&pad);
            serde::Serialize::serialize(v, &mut serde_json::Serializer::with_formatter(&mut out, f))
        }
    };
    if out.exceeded {
        return Err(JinjaError::from(ErrorKind::OutOfFuel));
    }
    written.map_err(|e| JinjaError::new(ErrorKind::InvalidOperation, e.to_string()))?;
    String::from_utf8(out.buf)
        .map_err(|e| JinjaError::new(ErrorKind::InvalidOperation, e.to_string()))
}

/// A writer that fails once more than `limit` bytes have been written.
pub(super) struct LimitedWriter {
    pub(super) buf: Vec<u8>,
    limit: usize,
    /// Whether a write failed for going past the limit.
    pub(super) exceeded: bool,
}

impl LimitedWriter {
    pub(super) fn new(limit: usize) -> LimitedWriter {
        LimitedWriter {
            buf: Vec::new(),
            limit,
            exceeded: false,
        }
    }
}

impl io::Write for LimitedWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        if self.buf.len().saturating_add(data.len()) > self.limit {
            self.exceeded = true;
            return Err(io::Error::other(format!(
                "output exceeds {} bytes",
                self.limit
            )));
        }
        self.buf.extend_from_slice(data);
        Ok(data.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::{ChatTemplate, Message};

    /// Renders `src` on a one-message conversation.
    fn render(src: &str) -> Result<String, String> {
        let t = ChatTemplate::new(src, "", "").map_err(|e| e.to_string())?;
        t.render(&[Message::new("user", "Hi")], true)
            .map_err(|e| e.to_string())
    }

    /// Templates that ask for gigabytes of intermediate values (issue 44:
    /// 14 GB, 19.5 GB and 2 GB before the budget covered data) fail with
    /// the budget's message.
    #[test]
    fn memory_hungry_templates_run_out_of_budget() {
        let hostile = [
            // A string doubled forty times (a terabyte).
            "{% set ns = namespace(s='a') %}{% for i in range(40) %}\
             {% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}",
            // Every line of 200 KB indented by 100,000 spaces (20 GB).
            "{{ ('a\\n' * 100000)|indent(100000) }}",
            // A number padded to a billion digits, by the filter ...
            "{{ '%0999999999d'|format(1) }}",
            // ... and by Python's str.format (minijinja_contrib's method).
            "{{ '{:0999999999d}'.format(1) }}",
            "{{ '{:.999999999f}'.format(1.5) }}",
            "{{ ('x' * 1000000000)|length }}",
            // tojson of a value whose JSON is far larger than the value.
            "{% set ns = namespace(s='\\x01' * 1000000) %}{% for i in range(100) %}\
             {% set _ = ns.s|tojson %}{% endfor %}",
        ];
        for src in hostile {
            let err = render(src).expect_err(src);
            assert!(err.contains("budget"), "{src}: {err}");
        }
    }

    /// The budget grows with the input: a conversation twice as long gets
    /// twice the room, so long real conversations are not refused.
    #[test]
    fn the_budget_grows_with_the_input() {
        assert_eq!(super::fuel_budget(0), super::BASE_FUEL);
        assert_eq!(
            super::fuel_budget(10 << 20) - super::BASE_FUEL,
            (10 << 20) * super::FUEL_PER_INPUT_BYTE
        );
        // A 4 MB conversation through a template that copies every message
        // a few times renders.
        let big = "x".repeat(1 << 20);
        let messages: Vec<Message> = (0..4).map(|_| Message::new("user", &big)).collect();
        let src = "{% for m in messages %}{{ (m['content'] | trim) ~ (m['content'] | upper) }}\
                   {% endfor %}";
        let t = ChatTemplate::new(src, "", "").unwrap();
        assert_eq!(t.render(&messages, true).unwrap().len(), 8 << 20);
    }

    #[test]
    fn tojson_writes_what_python_writes() {
        let src = "{{ messages|tojson }}|{{ messages[0]|tojson(indent=2) }}";
        assert_eq!(
            render(src).unwrap(),
            "[{\"content\": \"Hi\", \"role\": \"user\"}]|{\n  \"content\": \"Hi\",\n  \"role\": \"user\"\n}"
        );
    }

    #[test]
    fn str_format_still_formats() {
        assert_eq!(
            render("{{ '{:05d}|{}'.format(42, 'a') }}").unwrap(),
            "00042|a"
        );
    }
}
