//! Bounds on what a single template operation may build.
//!
//! minijinja charges fuel for a value once it exists, and refuses some
//! allocations up front (string `+`, `~` and `*`, `replace`, `indent`, ...).
//! Three kinds of operation escaped that (issue 44):
//!
//! - **Lazy sequences.** `+` on two lists, `*` on a list, slices, `chain`
//!   and `zip` return views over their operands instead of new lists. A
//!   view of views costs nothing to build, so `ns.l = ns.l + ns.l` forty
//!   times makes a "list" of 2^40 items in a few microseconds; minijinja
//!   then copies it out (past 32 nested views), or walks every path of the
//!   view tree, before any fuel is charged.
//! - **Text of shared values.** A list of a thousand references to one
//!   1 MB string takes 16 KB, but its text is a gigabyte; `{{ l }}`,
//!   `l ~ ''`, `l|string`, `l|upper`, `'%s'|format(l)`, `l in 'abc'`, ...
//!   write that text out before the engine charges for it.
//! - **Nested views** that make every later operation slower (a slice of a
//!   slice of ... costs quadratic time).
//!
//! ferrite compiles the template itself (minijinja's `unstable_machinery`)
//! and replaces the instructions of `+`, `*`, `~`, `in` and slicing with
//! calls to the functions here, which build **materialized** lists (each
//! slot paid for before it is made; no view ever wraps another view) and
//! write text through a writer that stops at the bytes the remaining fuel
//! can pay for. Every other case of those operators is evaluated by
//! minijinja's own operator, so results are the engine's. The filters and
//! tests that turn their arguments into text are reached through guards
//! that first measure that text (the same stopping writer) and then call
//! the builtin; `chain` and `zip` materialize their results; the formatter
//! that writes `{{ ... }}` measures non-string values first. Every refusal
//! is [`ErrorKind::OutOfFuel`], reported with the sandbox's budget message.
//!
//! The bound this gives: no single operation creates more bytes (text, or
//! 32 bytes per list slot) than the fuel left can pay for, and what it
//! creates is then charged, so a render's data stays within its fuel budget
//! whatever the template does.

use std::fmt::{self, Write as _};

use minijinja::machinery::{CompiledTemplate, Instruction, Instructions, TemplateConfig};
use minijinja::value::{Rest, ValueKind, ValueOrKwargs};
use minijinja::{AutoEscape, Environment, Error, ErrorKind, Output, State, Value};

use super::sandbox::remaining_bytes;

/// What a list slot costs, in bytes (minijinja's estimate for a `Value`).
const SLOT_BYTES: usize = 32;

/// Names the rewritten instructions call. A colon cannot appear in a Jinja
/// name, so a template can neither call nor shadow them itself.
const ADD: &str = "ferrite:add";
const MUL: &str = "ferrite:mul";
const CONCAT: &str = "ferrite:concat";
const IN: &str = "ferrite:in";
const SLICE: &str = "ferrite:slice";

/// Builtin filters that turn their value or arguments into text (or, for
/// `map`, `select` and the like, call filters and tests that do), each with
/// the name of its guard.
const GUARDED_FILTERS: [(&str, &str); 22] = [
    ("safe", "ferrite:safe"),
    ("escape", "ferrite:escape"),
    ("e", "ferrite:e"),
    ("string", "ferrite:string"),
    ("pprint", "ferrite:pprint"),
    ("lower", "ferrite:lower"),
    ("upper", "ferrite:upper"),
    ("title", "ferrite:title"),
    ("capitalize", "ferrite:capitalize"),
    ("trim", "ferrite:trim"),
    ("replace", "ferrite:replace"),
    ("join", "ferrite:join"),
    ("split", "ferrite:split"),
    ("lines", "ferrite:lines"),
    ("format", "ferrite:format"),
    ("indent", "ferrite:indent"),
    ("sum", "ferrite:sum"),
    ("map", "ferrite:map"),
    ("select", "ferrite:select"),
    ("reject", "ferrite:reject"),
    ("selectattr", "ferrite:selectattr"),
    ("rejectattr", "ferrite:rejectattr"),
];

/// Builtin tests that turn their arguments into text, with their guards.
const GUARDED_TESTS: [(&str, &str); 2] = [
    ("startingwith", "ferrite:startingwith"),
    ("endingwith", "ferrite:endingwith"),
];

/// Compiles `source` as template `name` with `env`'s syntax and rewrites
/// its instructions as the module describes.
pub(super) fn compile<'s>(
    env: &Environment<'_>,
    name: &'s str,
    source: &'s str,
) -> Result<CompiledTemplate<'s>, Error> {
    let config = TemplateConfig {
        syntax_config: env.syntax().clone(),
        default_auto_escape: std::sync::Arc::new(|_: &str| AutoEscape::None),
    };
    let mut compiled = CompiledTemplate::new(name, source, &config)?;
    rewrite(&mut compiled.instructions);
    for block in compiled.blocks.values_mut() {
        rewrite(block);
    }
    Ok(compiled)
}

/// Replaces, in place (jump targets stay valid), every instruction the
/// module bounds with a call to its bounded version. A call of `n`
/// arguments takes the same stack slots, in the same order, as the
/// instruction it replaces.
fn rewrite(instructions: &mut Instructions<'_>) {
    let mut pc = 0;
    while let Some(instruction) = instructions.get_mut(pc) {
        let replacement = match instruction {
            Instruction::Add => Some(Instruction::CallFunction(ADD, Some(2))),
            Instruction::Mul => Some(Instruction::CallFunction(MUL, Some(2))),
            // `~` pushes its left side first, as a call's arguments are.
            Instruction::StringConcat => Some(Instruction::CallFunction(CONCAT, Some(2))),
            // `x in y` pushes the needle, then the container.
            Instruction::In => Some(Instruction::CallFunction(IN, Some(2))),
            // value, start, stop, step
            Instruction::Slice => Some(Instruction::CallFunction(SLICE, Some(4))),
            Instruction::ApplyFilter(name, args, local) => guard_name(&GUARDED_FILTERS, name)
                .map(|guard| Instruction::ApplyFilter(guard, *args, *local)),
            Instruction::PerformTest(name, args, local) => guard_name(&GUARDED_TESTS, name)
                .map(|guard| Instruction::PerformTest(guard, *args, *local)),
            _ => None,
        };
        if let Some(replacement) = replacement {
            *instruction = replacement;
        }
        pc += 1;
    }
}

/// The guard registered for builtin `name`, if it has one.
fn guard_name(table: &[(&str, &'static str)], name: &str) -> Option<&'static str> {
    table.iter().find(|(n, _)| *n == name).map(|(_, g)| *g)
}

/// Adds the bounded operators, the filter and test guards, the
/// materializing `chain` and `zip`, and the measuring formatter to `env`.
pub(super) fn install(env: &mut Environment<'static>) {
    env.add_function(ADD, add);
    env.add_function(MUL, mul);
    env.add_function(CONCAT, concat);
    env.add_function(IN, contains);
    env.add_function(SLICE, slice);
    for (builtin, guard) in GUARDED_FILTERS {
        env.add_filter(guard, move |state: &mut State, args: Rest<ValueOrKwargs>| {
            let args = args.into_values();
            check_args(state, &args, builtin == "pprint")?;
            state.apply_filter(builtin, &args)
        });
    }
    for (builtin, guard) in GUARDED_TESTS {
        env.add_test(guard, move |state: &mut State, args: Rest<ValueOrKwargs>| {
            let args = args.into_values();
            check_args(state, &args, false)?;
            state.perform_test(builtin, &args)
        });
    }
    env.add_filter("chain", |state: &State, value: Value, others: Rest<Value>| {
        let chained = minijinja::filters::chain(state, value, others)?;
        materialize(state, chained)
    });
    env.add_filter("zip", |state: &State, value: Value, others: Rest<Value>| {
        let zipped = minijinja::filters::zip(state, value, others)?;
        materialize(state, zipped)
    });
    env.set_formatter(|out: &mut Output, state: &mut State, value: &Value| {
        if value.kind() != ValueKind::String {
            text_within(state, value, usize::MAX, false)?;
        }
        minijinja::escape_formatter(out, state, value)
    });
}

/// Fails with [`ErrorKind::OutOfFuel`] when the text of an argument (its
/// pretty-printed form for `pprint`) is longer than the remaining fuel can
/// pay for. Strings are skipped: they exist, so they were paid for, and a
/// builtin that grows one (`replace`, `indent`, `format`) checks its result
/// itself.
pub(super) fn check_args(state: &State, args: &[Value], pretty: bool) -> Result<(), Error> {
    for arg in args {
        if arg.kind() != ValueKind::String {
            text_within(state, arg, usize::MAX, pretty)?;
        }
    }
    Ok(())
}

/// Pieces of text one fuel pays for when a value is written out: writing
/// a deeply shared value is many tiny writes, each a step of work.
const WRITES_PER_FUEL: u64 = 8;

/// A `fmt::Write` that keeps at most `limit` bytes in at most `max_writes`
/// pieces, and fails past either.
struct Bounded {
    text: String,
    limit: usize,
    writes: u64,
    max_writes: u64,
    exceeded: bool,
}

impl fmt::Write for Bounded {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.writes += 1;
        if self.text.len().saturating_add(s.len()) > self.limit || self.writes > self.max_writes {
            self.exceeded = true;
            return Err(fmt::Error);
        }
        self.text.push_str(s);
        Ok(())
    }
}

/// The text of `value` (its `Debug` pretty-print when `pretty`), written
/// within what the fuel left in `state` pays for: at most `limit` bytes
/// (and no more than the fuel's bytes), one fuel per [`WRITES_PER_FUEL`]
/// pieces, charged. Past either bound, [`ErrorKind::OutOfFuel`]: the work
/// and memory stay bounded whatever the value shares.
fn text_within(state: &State, value: &Value, limit: usize, pretty: bool) -> Result<String, Error> {
    let fuel = state.fuel_levels().map_or(u64::MAX, |(_, left)| left);
    let mut out = Bounded {
        text: String::new(),
        limit: limit.min(remaining_bytes(state)),
        writes: 0,
        max_writes: fuel.saturating_mul(WRITES_PER_FUEL),
        exceeded: false,
    };
    let written = if pretty {
        write!(out, "{value:#?}")
    } else {
        write!(out, "{value}")
    };
    match written {
        Ok(()) => {
            state.consume_fuel(out.writes / WRITES_PER_FUEL)?;
            Ok(out.text)
        }
        Err(_) if out.exceeded => Err(Error::from(ErrorKind::OutOfFuel)),
        Err(_) => Err(Error::new(
            ErrorKind::InvalidOperation,
            "a value could not be written as text",
        )),
    }
}

/// Fails unless the remaining fuel can pay for `bytes` more bytes.
fn ensure_bytes(state: &State, bytes: usize) -> Result<(), Error> {
    if bytes > remaining_bytes(state) {
        return Err(Error::from(ErrorKind::OutOfFuel));
    }
    Ok(())
}

/// `v`'s text if it is a string.
fn string(v: &Value) -> Option<&str> {
    if v.kind() == ValueKind::String {
        v.as_str()
    } else {
        None
    }
}

/// Whether `v` is a list or a lazy sequence (not a tuple, not a string).
fn is_list(v: &Value) -> bool {
    matches!(v.kind(), ValueKind::Seq | ValueKind::Iterable) && !v.is_tuple()
}

/// minijinja's own operator: `expr` (over `a`, `b`, `c`, `d`) evaluated by
/// the engine, for the operands this module leaves to it.
fn engine(state: &State, expr: &str, operands: &[&Value]) -> Result<Value, Error> {
    let names = ["a", "b", "c", "d"];
    let ctx: std::collections::BTreeMap<&str, Value> = names
        .iter()
        .zip(operands)
        .map(|(n, v)| (*n, (*v).clone()))
        .collect();
    state.env().compile_expression(expr)?.eval(ctx)
}

/// The items of `value` as a new list, each slot paid for before it is
/// made.
fn materialize(state: &State, value: Value) -> Result<Value, Error> {
    if value.kind() == ValueKind::Map {
        // `chain` of mappings: the merged keys and their last values.
        let mut map = std::collections::BTreeMap::new();
        for key in value.try_iter()? {
            ensure_bytes(state, (map.len() + 1) * 2 * SLOT_BYTES)?;
            let item = value.get_item(&key)?;
            map.insert(key, item);
        }
        return Ok(Value::from(map));
    }
    if !is_list(&value) {
        return Ok(value);
    }
    let mut items = Vec::new();
    for item in value.try_iter()? {
        if items.len() % 1024 == 0 {
            ensure_bytes(state, (items.len() + 1024) * SLOT_BYTES)?;
        }
        items.push(item);
    }
    Ok(Value::from(items))
}

/// `a + b`: two lists make a new list; two strings are checked against the
/// fuel before they are joined; anything else is the engine's `+`.
fn add(state: &State, a: &Value, b: &Value) -> Result<Value, Error> {
    if is_list(a) && is_list(b) {
        if let (Some(x), Some(y)) = (a.len(), b.len()) {
            ensure_bytes(state, x.saturating_add(y).saturating_mul(SLOT_BYTES))?;
        }
        let mut items = Vec::new();
        for side in [a, b] {
            for item in side.try_iter()? {
                if items.len() % 1024 == 0 {
                    ensure_bytes(state, (items.len() + 1024) * SLOT_BYTES)?;
                }
                items.push(item);
            }
        }
        return Ok(Value::from(items));
    }
    if let (Some(x), Some(y)) = (string(a), string(b)) {
        ensure_bytes(state, x.len().saturating_add(y.len()))?;
        let joined = [x, y].concat();
        return Ok(if a.is_safe() && b.is_safe() {
            Value::from_safe_string(joined)
        } else {
            Value::from(joined)
        });
    }
    engine(state, "a + b", &[a, b])
}

/// `a * b`: a list repeated a whole number of times is a new list, paid
/// for first; anything else is the engine's `*` (which checks repeated
/// strings itself).
fn mul(state: &State, a: &Value, b: &Value) -> Result<Value, Error> {
    let (list, count) = if is_list(a) { (a, b) } else { (b, a) };
    let (true, Some(len), Some(n)) = (
        is_list(list) && count.is_integer(),
        list.len(),
        count.as_i64(),
    ) else {
        return engine(state, "a * b", &[a, b]);
    };
    let n = usize::try_from(n.max(0)).unwrap_or(usize::MAX);
    ensure_bytes(state, len.saturating_mul(n).saturating_mul(SLOT_BYTES))?;
    let once: Vec<Value> = list.try_iter()?.collect();
    let mut items = Vec::with_capacity(once.len() * n);
    for _ in 0..n {
        items.extend(once.iter().cloned());
    }
    Ok(Value::from(items))
}

/// `a ~ b`: both sides' text, written through the fuel-bounded writer.
fn concat(state: &State, a: &Value, b: &Value) -> Result<Value, Error> {
    if let (Some(x), Some(y)) = (string(a), string(b)) {
        ensure_bytes(state, x.len().saturating_add(y.len()))?;
        let joined = [x, y].concat();
        return Ok(if a.is_safe() && b.is_safe() {
            Value::from_safe_string(joined)
        } else {
            Value::from(joined)
        });
    }
    let left = text_within(state, a, usize::MAX, false)?;
    let right = text_within(state, b, remaining_bytes(state).saturating_sub(left.len()), false)?;
    Ok(Value::from(left + &right))
}

/// `needle in container`. A needle that is not a string is compared by its
/// text when the container is a string; a text longer than the container
/// cannot be in it, so it is written only up to that length.
fn contains(state: &State, needle: &Value, container: &Value) -> Result<Value, Error> {
    if let (Some(hay), None) = (string(container), string(needle)) {
        if needle.is_undefined() {
            return engine(state, "a in b", &[needle, container]);
        }
        state.consume_fuel(hay.len() as u64 / 64)?;
        return Ok(Value::from(match text_within(state, needle, hay.len(), false) {
            Ok(text) => hay.contains(&text),
            Err(_) => false,
        }));
    }
    engine(state, "a in b", &[needle, container])
}

/// `value[start:stop:step]`, the engine's slice, made a new list when it
/// is a view of a list (so slices of slices do not nest).
fn slice(
    state: &State,
    value: &Value,
    start: &Value,
    stop: &Value,
    step: &Value,
) -> Result<Value, Error> {
    let sliced = engine(state, "a[b:c:d]", &[value, start, stop, step])?;
    if sliced.kind() == ValueKind::Iterable {
        return materialize(state, sliced);
    }
    Ok(sliced)
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::super::{ChatTemplate, Message};

    /// Renders `src` on a one-message conversation, and how long it took.
    fn render(src: &str) -> (Result<String, String>, Duration) {
        let start = Instant::now();
        let t = ChatTemplate::new(src, "", "").unwrap();
        let r = t
            .render(&[Message::new("user", "Hi")], true)
            .map_err(|e| e.to_string());
        (r, start.elapsed())
    }

    /// A 1 MB string and a list of a thousand references to it: 32 KB of
    /// list, a gigabyte of text.
    const SHARED: &str = "{% set s = 'x' * 1000000 %}{% set D = [s] * 1000 %}";

    /// Templates whose values grow geometrically, or whose text is far
    /// larger than their memory, fail with the budget's message within a
    /// second instead of building gigabytes (on main, the list doubling
    /// materializes 2^33 items, `chain` of itself 2^33 references, `zip` of
    /// itself a tuple tree of 2^40 leaves, and every text of `D` below a
    /// gigabyte, before any fuel is charged).
    #[test]
    fn growth_and_shared_text_run_out_of_budget() {
        let doubling = |step: &str| {
            format!(
                "{{% set ns = namespace(l=[1], d={{'a': 1}}) %}}{{% for i in range(40) %}}\
                 {{% set ns.l = {step} %}}{{% endfor %}}{{{{ ns.l|length }}}}{{{{ ns.l|first }}}}"
            )
        };
        let mut hostile: Vec<String> = [
            "ns.l + ns.l",
            "ns.l * 2",
            "ns.l|chain(ns.l)",
            "ns.l|zip(ns.l)",
            "[ns.l, ns.l]",
        ]
        .iter()
        .map(|step| doubling(step))
        .collect();
        hostile.push(
            "{% set ns = namespace(l=[1]) %}{% for i in range(60) %}\
             {% set ns.l = [ns.l, ns.l] %}{% endfor %}{{ ns.l }}"
                .into(),
        );
        for text in [
            "{{ D }}",
            "{% set c %}{{ D }}{% endset %}{{ c|length }}",
            "{% filter upper %}{{ D }}{% endfilter %}",
            "{% macro m(x) %}{{ x }}{% endmacro %}{{ m(D)|length }}",
            "{{ (D ~ '')|length }}",
            "{{ D|string|length }}",
            "{{ D|safe|length }}",
            "{{ D|e|length }}",
            "{{ D|pprint|length }}",
            "{{ D|join|length }}",
            "{{ D|upper|length }}",
            "{{ D|trim|length }}",
            "{{ D|title|length }}",
            "{{ D|capitalize|length }}",
            "{{ D|replace('x', 'y')|length }}",
            "{{ D|indent(2)|length }}",
            "{{ D|sum(start='')|length }}",
            "{{ D|split|length }}",
            "{{ '%s'|format(D)|length }}",
            "{{ '{}'.format(D)|length }}",
            "{{ ''.join(D)|length }}",
            "{{ [D]|map('string')|list|length }}",
            "{{ [D]|select('startingwith', 'x')|list|length }}",
            "{{ D is startingwith('x') }}",
            "{{ [D, D]|tojson|length }}",
            "{{ dict(a=D)|string|length }}",
            "{{ raise_exception(D) }}",
        ] {
            hostile.push(format!("{SHARED}{text}"));
        }
        for src in &hostile {
            let (r, took) = render(src);
            let err = r.expect_err(src);
            assert!(err.contains("budget"), "{src}: {err}");
            assert!(took < Duration::from_secs(2), "{src}: {took:?}");
        }
    }

    /// What the bounded operators build is what minijinja's operators
    /// build, made into lists: same text, same lengths, same errors.
    #[test]
    fn bounded_operators_keep_their_results() {
        let cases = [
            ("{{ [1, 2] + [3] }}", "[1, 2, 3]"),
            ("{% set a = [1] %}{{ (a + [2])[1] }}|{{ (a + [2]) is sequence }}", "2|True"),
            ("{{ [1, 'a'] * 2 }}|{{ [1] * 0 }}|{{ [1] * -1 }}", "[1, 'a', 1, 'a']|[]|[]"),
            ("{{ 'ab' * 2 }}|{{ 2 * 'c' }}|{{ 3 * 4 }}|{{ 1.5 * 2 }}", "abab|cc|12|3.0"),
            ("{{ 1 + 2 }}|{{ 1 + 2.5 }}|{{ 'a' + 'b' }}|{{ true + 1 }}", "3|3.5|ab|2"),
            ("{{ 9223372036854775807 + 1 }}", "9223372036854775808"),
            ("{{ 'a' ~ 1 ~ [2] ~ none ~ {'k': 'v'} }}", "a1[2]None{'k': 'v'}"),
            ("{{ 1 in [1, 2] }}|{{ 'b' in 'abc' }}|{{ 1 in '1' }}|{{ 'k' in {'k': 1} }}", "True|True|True|True"),
            ("{{ [1] in '[1]' }}|{{ [1, 2] in 'x' }}|{{ 3 not in [1] }}", "True|False|True"),
            ("{{ [1, 2, 3][1:] }}|{{ [1, 2, 3][::-1] }}|{{ 'abc'[1:] }}|{{ [1, 2, 3][:-1][1:] }}", "[2, 3]|[3, 2, 1]|bc|[2]"),
            ("{{ [1]|chain([2], [3]) }}|{{ ({'a': 1}|chain({'a': 2, 'b': 3}))|dictsort }}", "[1, 2, 3]|[('a', 2), ('b', 3)]"),
            ("{{ [1, 2]|zip('ab')|list }}", "[(1, 'a'), (2, 'b')]"),
            ("{{ ['a', 'b']|join('-')|upper }}|{{ ' x '|trim }}|{{ 'abc'|replace('b', 'x') }}", "A-B|x|axc"),
            ("{{ ['a', 'b']|map('upper')|list }}|{{ 'ab' is startingwith('a') }}", "['A', 'B']|True"),
            ("{{ [1, 2]|sum }}|{{ [[1], [2]]|sum(start=[]) }}|{{ {'a': [1]}|pprint }}", "3|[1, 2]|{\n    'a': [\n        1,\n    ],\n}"),
        ];
        for (src, want) in cases {
            let (got, _) = render(src);
            assert_eq!(got.as_deref(), Ok(want), "{src}");
        }
        for (src, err) in [
            ("{{ 'a' + 1 }}", "unsupported types string and number"),
            ("{{ [1] * 'x' }}", "can only be multiplied with integers"),
            ("{{ 1 in 2 }}", "cannot perform a containment check"),
        ] {
            let (got, _) = render(src);
            let got = got.expect_err(src);
            assert!(got.contains(err), "{src}: {got}");
        }
    }

    /// A mapping chained with itself forty times is one mapping (on main, a
    /// tree of 2^40 views that a missing key's lookup walks for hours).
    #[test]
    fn chained_mappings_stay_flat() {
        let src = "{% set ns = namespace(d={'a': 1}) %}{% for i in range(40) %}\
                   {% set ns.d = ns.d|chain(ns.d) %}{% endfor %}{{ ns.d.b }}|{{ ns.d }}";
        let (r, took) = render(src);
        assert_eq!(r.as_deref(), Ok("|{'a': 1}"));
        assert!(took < Duration::from_secs(2), "{took:?}");
    }

    /// Slices of slices are new lists, not views of views: 30,000 nested
    /// slices render at once (on main, quadratic time: over a minute).
    #[test]
    fn nested_slices_stay_flat() {
        let src = "{% set ns = namespace(l=[1, 2]) %}{% for i in range(30000) %}\
                   {% set ns.l = ns.l[1:] + [i] %}{% endfor %}{{ ns.l }}";
        let (r, took) = render(src);
        assert_eq!(r.as_deref(), Ok("[29998, 29999]"));
        assert!(took < Duration::from_secs(5), "{took:?}");
    }
}
