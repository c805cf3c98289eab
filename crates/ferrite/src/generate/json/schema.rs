//! The JSON a constrained reply must be: `response_format` `json_object`
//! (any object) or a `json_schema` compiled into a small tree of [`Node`]s.
//!
//! The supported subset: `type` object (with `properties`, emitted in the
//! schema's key order; those not in `required` may be left out;
//! `additionalProperties` `false` (the default here: only declared keys
//! are written), `true` or a schema (further keys after the declared
//! ones, never one of theirs); without `properties`, any object, or with
//! `additionalProperties` a schema, a map of such values), array
//! (`items`, `minItems`, `maxItems`), string (with `pattern`: a simple
//! regular expression, see [`super::regex`]), number and integer (with
//! `minimum` / `maximum` / `exclusiveMinimum` / `exclusiveMaximum`, see
//! [`super::number`]), boolean, null, a list of types, `anyOf` / `oneOf`
//! (the first member that may start with the reply's next character is
//! followed), `enum` and `const` of any size (one byte trie per grammar,
//! within [`MAX_TRIE_NODES`]), and `$ref` into the schema itself
//! (`#/$defs/...`, `#/definitions/...`, `#`; recursion is bounded by the
//! nesting limit). Keywords that constrain further (`format`,
//! `minLength`, `multipleOf`, ...) are refused with a clear error rather
//! than ignored, so an accepted schema is always met.
//!
//! Everything is compiled once per request within budgets (trie nodes,
//! automaton states); a step of the reply then costs the same whatever the
//! schema's size.

use std::collections::HashMap;

use serde_json::{Map, Value};

use super::grammar::{
    base_tries, CallSyntax, Calls, Grammar, Node, NodeId, Obj, Prop, MAX_ITEMS, MAX_REF_DEPTH,
    MAX_STRING,
};
use super::number::NumRange;
use super::regex::Dfa;
use super::trie::Trie;
use crate::Error;

/// A schema ferrite cannot enforce: a bad input, with the reason.
fn bad(reason: impl Into<String>) -> Error {
    Error::Input(reason.into())
}

/// Most trie nodes (about 20 bytes each) a schema's `enum`s, `const`s
/// and keys may take together: a larger schema is refused rather than
/// held in memory.
pub const MAX_TRIE_NODES: usize = 1 << 20;

/// Most DFA states a schema's `pattern`s may take together (each state is
/// one row of a byte-class table; building one costs up to a few
/// microseconds).
pub const MAX_PATTERN_STATES: usize = 8192;

/// Keywords that would constrain values beyond what is enforced.
const REFUSED: [&str; 22] = [
    "format",
    "minLength",
    "maxLength",
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
const BOUNDS: [&str; 4] = ["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"];

impl Grammar {
    fn compiled(c: Compiler, root: NodeId) -> Grammar {
        let mut g = Grammar::with_root(c.nodes, root, c.tries);
        g.ranges = c.ranges;
        g.patterns = c.patterns;
        g
    }

    /// A JSON schema; the error names what is not supported.
    pub fn from_schema(schema: &Value) -> Result<Grammar, Error> {
        let mut c = Compiler::new(schema);
        let root = c.compile(schema, 0)?;
        let g = Grammar::compiled(c, root);
        if !matches!(g.node(root), Node::Object(_) | Node::AnyObject) {
            return Err(bad("the schema's root must be an object (type: object)"));
        }
        if let Some(path) = g.dead_path(root, 0) {
            return Err(unfinishable(&path));
        }
        Ok(g)
    }

    /// Function calls as `syntax` writes them (Qwen2.5 / Hermes
    /// `<tool_call>` blocks, Llama 3's bare JSON): `functions` are each
    /// name with the JSON schema of its arguments (an object), the
    /// arguments following the named function's schema; up to `more`
    /// further calls may follow the first, each after `syntax.next`.
    pub fn tool_calls(
        functions: &[(String, Value)],
        syntax: &CallSyntax,
        more: usize,
    ) -> Result<Grammar, Error> {
        if functions.is_empty() {
            return Err(bad("no function to call"));
        }
        let empty = Value::Null;
        let mut c = Compiler::new(&empty);
        let mut args = Vec::with_capacity(functions.len());
        let mut names = Vec::with_capacity(functions.len());
        for (name, schema) in functions {
            // Each function's schema is its own document for `$ref`s.
            c.root = schema;
            c.refs.clear();
            let node = c.compile(schema, 0)?;
            let (is_object, dead) = {
                let g = Grammar::with_root(c.nodes.clone(), node, Vec::new());
                let is_object = matches!(g.node(node), Node::Object(_) | Node::AnyObject);
                (is_object, g.dead_path(node, 1))
            };
            if !is_object {
                return Err(bad(format!(
                    "the parameters of function '{name}' must be an object schema"
                )));
            }
            if let Some(path) = dead {
                return Err(bad(format!(
                    "the parameters of function '{name}': {}",
                    unfinishable(&path)
                )));
            }
            args.push(node);
            let quoted = serde_json::to_string(name).unwrap_or_default();
            names.push(quoted[1..].to_string());
        }
        let calls = Calls {
            open: match &syntax.open {
                Some(t) => Some(c.trie(&[t])?),
                None => None,
            },
            head: c.trie(&[&syntax.head])?,
            names: c.trie(&names)?,
            middle: c.trie(&[&syntax.middle])?,
            tail: c.trie(&[&syntax.tail])?,
            next: c.trie(&[&syntax.next])?,
            args,
            more,
        };
        let root = c.push(Node::Calls(calls));
        let mut g = Grammar::compiled(c, root);
        g.markers = syntax.markers.clone();
        Ok(g)
    }


}

/// Nesting of schemas we follow at most (a hostile schema could be deep).
const MAX_SCHEMA_DEPTH: usize = 32;

struct Compiler<'s> {
    /// The whole schema (what `$ref`s point into).
    root: &'s Value,
    nodes: Vec<Node>,
    tries: Vec<Trie>,
    trie_nodes: usize,
    /// The node of each `$ref` compiled so far (a recursive one finds it).
    refs: HashMap<String, NodeId>,
    ranges: Vec<NumRange>,
    patterns: Vec<Dfa>,
    /// DFA states the patterns may still take.
    pattern_budget: usize,
}

impl<'s> Compiler<'s> {
    fn new(root: &'s Value) -> Compiler<'s> {
        Compiler {
            root,
            nodes: Vec::new(),
            tries: base_tries(),
            trie_nodes: 0,
            refs: HashMap::new(),
            ranges: Vec::new(),
            patterns: Vec::new(),
            pattern_budget: MAX_PATTERN_STATES,
        }
    }

    fn push(&mut self, n: Node) -> NodeId {
        self.nodes.push(n);
        self.nodes.len() - 1
    }

    /// A trie of `texts`, counted against [`MAX_TRIE_NODES`].
    fn trie<S: AsRef<[u8]>>(&mut self, texts: &[S]) -> Result<usize, Error> {
        self.make_trie(texts, false)
    }

    fn make_trie<S: AsRef<[u8]>>(&mut self, texts: &[S], indexed: bool) -> Result<usize, Error> {
        // A trie has at most one node per byte, plus the root: refuse
        // what is surely too big before building it.
        let bytes: usize = texts.iter().map(|t| t.as_ref().len()).sum();
        if texts.len() > MAX_TRIE_NODES || (bytes > 2 * MAX_TRIE_NODES) {
            return Err(too_big());
        }
        let t = if indexed {
            Trie::indexed(texts)
        } else {
            Trie::new(texts)
        };
        self.trie_nodes += t.size();
        if self.trie_nodes > MAX_TRIE_NODES {
            return Err(too_big());
        }
        self.tries.push(t);
        Ok(self.tries.len() - 1)
    }

    fn literal(&mut self, values: &[Value]) -> Result<NodeId, Error> {
        let texts: Vec<String> = values.iter().map(Value::to_string).collect();
        let t = self.trie(&texts)?;
        Ok(self.push(Node::Literal(t)))
    }

    /// The node of `$ref` `r` (a JSON pointer into this schema).
    fn reference(&mut self, r: &str, depth: usize) -> Result<NodeId, Error> {
        if let Some(&id) = self.refs.get(r) {
            return Ok(id);
        }
        let target = r
            .strip_prefix('#')
            .and_then(|p| self.root.pointer(p))
            .ok_or_else(|| {
                bad(format!(
                    "$ref '{r}' does not point into this schema (only '#/...' references do)"
                ))
            })?;
        // A placeholder first, so that a recursive reference finds it.
        let id = self.push(Node::Ref(NodeId::MAX));
        self.refs.insert(r.to_string(), id);
        let to = self.compile(target, depth + 1)?;
        self.nodes[id] = Node::Ref(to);
        Ok(id)
    }

    fn compile(&mut self, s: &Value, depth: usize) -> Result<NodeId, Error> {
        if depth > MAX_SCHEMA_DEPTH {
            return Err(bad(format!(
                "the schema nests deeper than {MAX_SCHEMA_DEPTH} levels"
            )));
        }
        let obj = match s {
            Value::Bool(true) => return Ok(self.push(Node::Any)),
            Value::Object(o) => o,
            _ => return Err(bad(format!("a schema must be an object, got {s}"))),
        };
        if let Some(k) = REFUSED.iter().find(|k| obj.contains_key(**k)) {
            return Err(bad(format!("the schema keyword '{k}' is not supported")));
        }
        if let Some(k) = BOUNDS.iter().find(|k| obj.contains_key(**k)) {
            if !obj.contains_key("type") && !obj.contains_key("$ref") {
                return Err(bad(format!(
                    "the schema keyword '{k}' needs a type (number or integer)"
                )));
            }
        }
        if obj.contains_key("pattern") && !obj.contains_key("type") {
            return Err(bad("the schema keyword 'pattern' needs type string"));
        }
        if let Some(r) = obj.get("$ref") {
            let r = r.as_str().ok_or_else(|| bad("$ref must be a string"))?;
            return self.reference(r, depth);
        }
        if let Some(v) = obj.get("const") {
            return self.literal(std::slice::from_ref(v));
        }
        if let Some(e) = obj.get("enum") {
            let values = e
                .as_array()
                .filter(|a| !a.is_empty())
                .ok_or_else(|| bad("enum must be a non-empty list"))?;
            return self.literal(values);
        }
        for key in ["anyOf", "oneOf"] {
            if let Some(v) = obj.get(key) {
                let list = v
                    .as_array()
                    .filter(|a| !a.is_empty())
                    .ok_or_else(|| bad(format!("{key} must be a non-empty list")))?;
                let members = list
                    .iter()
                    .map(|m| self.compile(m, depth + 1))
                    .collect::<Result<Vec<_>, _>>()?;
                return Ok(self.push(Node::Union(members)));
            }
        }
        match obj.get("type") {
            Some(Value::Array(types)) => {
                let members = types
                    .iter()
                    .map(|t| {
                        let mut one = obj.clone();
                        one.insert("type".into(), t.clone());
                        self.compile(&Value::Object(one), depth + 1)
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(self.push(Node::Union(members)))
            }
            Some(Value::String(t)) => self.compile_type(t, obj, depth),
            None if obj.contains_key("properties") => self.compile_type("object", obj, depth),
            None if obj.contains_key("items") => self.compile_type("array", obj, depth),
            None => Ok(self.push(Node::Any)),
            Some(other) => Err(bad(format!("type must be a string or a list, got {other}"))),
        }
    }

    /// An object: declared properties (optional ones may be left out) and
    /// `additionalProperties`.
    fn object(&mut self, obj: &Map<String, Value>, depth: usize) -> Result<Node, Error> {
        let extra = match obj.get("additionalProperties") {
            None | Some(Value::Bool(false)) => None,
            Some(s) => Some(self.compile(s, depth + 1)?),
        };
        let Some(props) = obj.get("properties") else {
            return Ok(match extra {
                // Declared nothing, and nothing else limited: any object.
                None if !obj.contains_key("additionalProperties") => Node::AnyObject,
                _ if obj.get("additionalProperties") == Some(&Value::Bool(true)) => Node::AnyObject,
                extra => {
                    let keys = self.make_trie(&[""; 0], true)?;
                    Node::Object(Obj {
                        props: Vec::new(),
                        keys,
                        next_required: vec![0],
                        extra,
                    })
                }
            });
        };
        let props = props
            .as_object()
            .ok_or_else(|| bad("properties must be an object"))?;
        let mut required = Vec::new();
        for r in obj
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let r = r
                .as_str()
                .ok_or_else(|| bad("required must list property names"))?;
            if !props.contains_key(r) {
                return Err(bad(format!("required property '{r}' is not in properties")));
            }
            required.push(r);
        }
        let mut fields = Vec::with_capacity(props.len());
        let mut quoted = Vec::with_capacity(props.len());
        for (name, sub) in props {
            let node = self.compile(sub, depth + 1)?;
            quoted.push(serde_json::to_string(name).unwrap_or_default());
            fields.push(Prop {
                name: name.clone(),
                node,
                required: required.contains(&name.as_str()),
            });
        }
        let keys = self.make_trie(&quoted, true)?;
        let mut next_required = vec![fields.len(); fields.len() + 1];
        for i in (0..fields.len()).rev() {
            next_required[i] = if fields[i].required {
                i
            } else {
                next_required[i + 1]
            };
        }
        Ok(Node::Object(Obj {
            props: fields,
            keys,
            next_required,
            extra,
        }))
    }

    fn compile_type(
        &mut self,
        t: &str,
        obj: &Map<String, Value>,
        depth: usize,
    ) -> Result<NodeId, Error> {
        let node = match t {
            "string" => match obj.get("pattern") {
                None => Node::String,
                Some(p) => {
                    let p = p
                        .as_str()
                        .ok_or_else(|| bad("the schema keyword 'pattern' must be a string"))?;
                    let dfa = Dfa::compile(p, &mut self.pattern_budget).map_err(|e| {
                        bad(format!(
                            "the schema keyword 'pattern' ('{p}') is not supported: {e}"
                        ))
                    })?;
                    if dfa.dist(0) > MAX_STRING {
                        return Err(bad(format!(
                            "the schema keyword 'pattern' ('{p}'): its shortest match is longer \
                             than {MAX_STRING} bytes"
                        )));
                    }
                    self.patterns.push(dfa);
                    Node::Pattern(self.patterns.len() - 1)
                }
            },
            "number" | "integer" => {
                let int_only = t == "integer";
                match NumRange::from_schema(obj, int_only)? {
                    Some(r) => {
                        self.ranges.push(r);
                        Node::Range(self.ranges.len() - 1)
                    }
                    None if int_only => Node::Integer,
                    None => Node::Number,
                }
            }
            "boolean" => Node::Boolean,
            "null" => Node::Null,
            "object" => self.object(obj, depth)?,
            "array" => {
                let item = match obj.get("items") {
                    Some(items) => self.compile(items, depth + 1)?,
                    None => self.push(Node::Any),
                };
                let count = |k: &str| obj.get(k).and_then(Value::as_u64).map(|v| v as usize);
                let min = count("minItems").unwrap_or(0);
                let max = count("maxItems").unwrap_or(MAX_ITEMS.max(min));
                if min > max || min > 1024 {
                    return Err(bad(format!(
                        "minItems {min} / maxItems {max} cannot be met"
                    )));
                }
                Node::Array { item, min, max }
            }
            other => return Err(bad(format!("type '{other}' is not a JSON schema type"))),
        };
        Ok(self.push(node))
    }
}

/// A schema no value of which can be written to its end within the
/// nesting bound (a required property that nests itself).
fn unfinishable(path: &str) -> Error {
    bad(format!(
        "the schema has no value ferrite can write: '{path}' is required and must nest \
         itself without end or deeper than {MAX_REF_DEPTH} levels"
    ))
}

fn too_big() -> Error {
    bad(format!(
        "the schema's enum / const values and keys are too large \
         (more than {MAX_TRIE_NODES} trie nodes)"
    ))
}
