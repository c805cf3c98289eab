//! Checks of a schema that its compiler (`schema.rs`) runs: the values of
//! keywords (`type` names, counts, `enum` / `const` against `type`), and,
//! once the whole [`Grammar`](super::Grammar) tree is built, the checks no
//! single node shows:
//!
//! - **left recursion**: a `$ref` / `anyOf` / `oneOf` cycle that comes back
//!   to where it started without a byte of JSON in between (`a: anyOf
//!   [integer, $ref a]`). The machine would follow it forever; it is
//!   refused. Recursion through an object property or an array item (a
//!   tree) is fine: each turn nests one container deeper, and the machine
//!   stops nesting at [`MAX_REF_DEPTH`].
//! - **chains**: `anyOf` / `$ref` nodes the machine passes through before
//!   the first byte of a value, at most [`MAX_CHAIN`] in a row (the
//!   machine recurses once per link).
//! - **satisfiable within the nesting bound**: every node has a value
//!   nested at most [`MAX_REF_DEPTH`] containers deep; a required
//!   self-reference with no way out (`{"properties": {"a": {"$ref": "#"}},
//!   "required": ["a"]}`) has none at all, and is refused.
//!
//! Everything here is iterative (explicit stacks), so a hostile schema
//! cannot exhaust the stack.

use serde_json::{Map, Value};

use super::grammar::{Node, NodeId, MAX_REF_DEPTH};
use crate::Error;

/// Most nesting of an `enum` / `const` value (serde_json parses at most
/// 128 levels; a library caller's own `Value` could be deeper, and
/// printing one recurses).
pub(super) const MAX_VALUE_DEPTH: usize = 128;

/// Most `anyOf` / `oneOf` / `$ref` nodes in a row before a value's first
/// byte.
pub const MAX_CHAIN: usize = 64;

/// Keywords that would constrain values beyond what is enforced.
pub(super) const REFUSED: [&str; 19] = [
    "multipleOf",
    "allOf",
    "not",
    "if",
    "patternProperties",
    "uniqueItems",
    "contains",
    "prefixItems",
    "minProperties",
    "maxProperties",
    "propertyNames",
    "dependentRequired",
    "dependentSchemas",
    "dependencies",
    "unevaluatedProperties",
    "unevaluatedItems",
    "additionalItems",
    "minContains",
    "maxContains",
];

/// Bounds of numbers.
pub(super) const BOUNDS: [&str; 4] = ["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"];

/// Keywords that constrain a value (beyond [`REFUSED`]): `$ref`, `enum`,
/// `const`, `anyOf` and `oneOf` take no others beside them (only `type`
/// beside `enum` / `const`), since the compiler follows one of them alone.
pub(super) const CONSTRAINING: [&str; 20] = [
    "$ref",
    "enum",
    "const",
    "anyOf",
    "oneOf",
    "type",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "minItems",
    "maxItems",
    "pattern",
    "minLength",
    "maxLength",
    "format",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
];

/// The JSON schema type names.
const TYPES: [&str; 7] = [
    "object", "array", "string", "number", "integer", "boolean", "null",
];

/// Whether `v` nests at most `limit` arrays / objects deep.
pub(super) fn depth_within(v: &Value, limit: usize) -> bool {
    let mut stack = vec![(v, 0usize)];
    while let Some((v, d)) = stack.pop() {
        let kids: Box<dyn Iterator<Item = &Value>> = match v {
            Value::Array(a) => Box::new(a.iter()),
            Value::Object(o) => Box::new(o.values()),
            _ => continue,
        };
        if d + 1 > limit {
            return false;
        }
        stack.extend(kids.map(|k| (k, d + 1)));
    }
    true
}

/// The names of a `type` keyword (a name or a non-empty list of them),
/// each a JSON schema type.
pub(super) fn type_names(t: &Value) -> Result<Vec<&str>, String> {
    let names: Vec<&Value> = match t {
        Value::String(_) => vec![t],
        Value::Array(a) if !a.is_empty() => a.iter().collect(),
        Value::Array(_) => return Err("type must not be an empty list".into()),
        other => return Err(format!("type must be a string or a list, got {other}")),
    };
    names
        .into_iter()
        .map(|n| match n.as_str() {
            Some(n) if TYPES.contains(&n) => Ok(n),
            Some(n) => Err(format!("type '{n}' is not a JSON schema type")),
            None => Err(format!("type lists names, got {n}")),
        })
        .collect()
}

/// Whether `v` is of JSON schema type `t` (an integer is a number without
/// a fraction, `1.0` included).
pub(super) fn has_type(v: &Value, t: &str) -> bool {
    match (t, v) {
        ("object", Value::Object(_))
        | ("array", Value::Array(_))
        | ("string", Value::String(_))
        | ("number", Value::Number(_))
        | ("boolean", Value::Bool(_))
        | ("null", Value::Null) => true,
        ("integer", Value::Number(n)) => {
            n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0)
        }
        _ => false,
    }
}

/// The count keyword `k` (`minItems`, `maxItems`): a non-negative integer
/// (`2.0` is one), if present.
pub(super) fn count(obj: &Map<String, Value>, k: &str) -> Result<Option<usize>, String> {
    let Some(v) = obj.get(k) else {
        return Ok(None);
    };
    let n = match v.as_u64() {
        Some(n) => Some(n),
        None => v
            .as_f64()
            .filter(|f| *f >= 0.0 && f.fract() == 0.0 && *f < 9.0e15)
            .map(|f| f as u64),
    };
    match n {
        Some(n) => Ok(Some(usize::try_from(n).unwrap_or(usize::MAX))),
        None => Err(format!("{k} must be a non-negative integer, got {v}")),
    }
}

/// The nodes a value of `n` is a value of too, with no byte in between.
fn passes_to(n: &Node) -> &[NodeId] {
    match n {
        Node::Union(members) => members,
        Node::Ref(to) => std::slice::from_ref(to),
        _ => &[],
    }
}

/// The whole-tree checks (see the module notes) on `nodes`, of which
/// `paths[i]` names where node `i` comes from in the schema.
pub(super) fn grammar(nodes: &[Node], paths: &[String]) -> Result<(), Error> {
    let order = chains(nodes, paths)?;
    // ok[i]: node i has a value at most k containers deep, for k = 0, 1,
    // ... MAX_REF_DEPTH in turn (`order` has each node after the nodes it
    // passes to, which are judged at the same k).
    let mut ok = vec![false; nodes.len()];
    for k in 0..=MAX_REF_DEPTH {
        let inner = ok.clone();
        for &id in &order {
            ok[id] = match &nodes[id] {
                Node::Object(o) => k >= 1 && o.props.iter().all(|p| !p.required || inner[p.node]),
                Node::AnyObject => k >= 1,
                // At the bound, an array may still open if it may be empty.
                Node::Array { item, min, .. } => *min == 0 || (k >= 1 && inner[*item]),
                Node::Union(members) => members.iter().any(|&m| ok[m]),
                Node::Ref(to) => ok[*to],
                Node::Calls(c) => k >= 1 && c.args.iter().all(|&a| inner[a]),
                _ => true,
            };
        }
    }
    // The first node refused is the innermost (`order` has inner nodes
    // first), which names the culprit best.
    match order.iter().find(|&&id| !ok[id]) {
        Some(&id) => Err(Error::Input(format!(
            "no value of the schema at {} fits within {MAX_REF_DEPTH} levels of nesting \
             (a $ref cycle through required properties or non-empty arrays with no way \
             out has none at all)",
            paths[id]
        ))),
        None => Ok(()),
    }
}

/// Refuses left recursion and chains longer than [`MAX_CHAIN`]; the
/// nodes, each after the nodes it passes to (a depth-first post-order).
fn chains(nodes: &[Node], paths: &[String]) -> Result<Vec<NodeId>, Error> {
    const NEW: u8 = 0;
    const OPEN: u8 = 1;
    const DONE: u8 = 2;
    let mut state = vec![NEW; nodes.len()];
    let mut chain = vec![0usize; nodes.len()];
    let mut order = Vec::with_capacity(nodes.len());
    for start in 0..nodes.len() {
        if state[start] != NEW {
            continue;
        }
        state[start] = OPEN;
        // Each node on the path with the index of its next member.
        let mut stack = vec![(start, 0usize)];
        while let Some((id, next)) = stack.last_mut() {
            let id = *id;
            let to = passes_to(&nodes[id]);
            if let Some(&m) = to.get(*next) {
                *next += 1;
                let Some(s) = state.get(m) else {
                    return Err(Error::Input(format!(
                        "an unresolved $ref (at {})",
                        paths[id]
                    )));
                };
                match *s {
                    NEW => {
                        state[m] = OPEN;
                        stack.push((m, 0));
                    }
                    OPEN => {
                        return Err(Error::Input(format!(
                            "the schema at {} comes back to itself through $ref / anyOf / \
                             oneOf alone, with no JSON value in between (left recursion: \
                             its values would never start)",
                            paths[m]
                        )))
                    }
                    _ => {}
                }
                continue;
            }
            chain[id] = 1 + to.iter().map(|&m| chain[m]).max().unwrap_or(0);
            if chain[id] > MAX_CHAIN {
                return Err(Error::Input(format!(
                    "anyOf / oneOf / $ref nest more than {MAX_CHAIN} deep before a value \
                     (at {})",
                    paths[id]
                )));
            }
            state[id] = DONE;
            order.push(id);
            stack.pop();
        }
    }
    Ok(order)
}
