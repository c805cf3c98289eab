//! The JSON a constrained reply must be: `response_format` `json_object`
//! (any object) or a `json_schema` compiled into a small tree of [`Node`]s.
//!
//! The supported subset: `type` object (with `properties`, all emitted in
//! key order; `required` must name declared properties; without
//! `properties`, any object), array (`items`, `minItems`, `maxItems`),
//! string, number, integer (with `minimum` / `maximum` when both bound
//! it: a closed range of at most 100,000 values), boolean, null, a list of
//! types, `anyOf` / `oneOf` (the first member that may start with the
//! reply's next character is followed), `enum` and `const` of any size
//! (one byte trie per grammar, within [`MAX_TRIE_NODES`]), and `$ref` into
//! the schema itself (`#/$defs/...`, `#/definitions/...`, `#`; recursion
//! is bounded by the nesting limit). Keywords that constrain further
//! (`pattern`, `format`, `minLength`, ...) are refused with a clear error
//! rather than ignored, so an accepted schema is always met.

use std::collections::HashMap;

use serde_json::{Map, Value};

use super::trie::Trie;
use crate::Error;

/// A schema ferrite cannot enforce: a bad input, with the reason.
fn bad(reason: impl Into<String>) -> Error {
    Error::Input(reason.into())
}

/// Index of a node in [`Grammar::nodes`].
pub type NodeId = usize;

/// What a value may be.
#[derive(Clone, Debug, PartialEq)]
pub enum Node {
    /// Any JSON value (nesting limited by [`Grammar::max_depth`]).
    Any,
    /// An object with exactly these properties, in this order.
    Object(Vec<Prop>),
    /// An object with any keys and any values.
    AnyObject,
    Array {
        item: NodeId,
        min: usize,
        max: usize,
    },
    String,
    Number,
    Integer,
    Boolean,
    Null,
    /// One of the JSON texts of trie `tries[i]`, exactly.
    Literal(usize),
    /// One of these nodes: the first that may start with the next byte.
    Union(Vec<NodeId>),
    /// The same as another node (a `$ref`).
    Ref(NodeId),
    /// Function calls as Qwen2.5 / Hermes templates write them (see
    /// [`Grammar::tool_calls`]).
    Calls(Calls),
}

/// The pieces of [`Node::Calls`]: `tries` indices of the fixed texts and
/// of the functions' names, and each function's arguments.
#[derive(Clone, Debug, PartialEq)]
pub struct Calls {
    /// `<tool_call>` first, or the grammar starts after it.
    pub open: Option<usize>,
    /// `\n{"name": "`.
    pub head: usize,
    /// Each name, JSON-escaped, with its closing quote.
    pub names: usize,
    /// `, "arguments": `.
    pub middle: usize,
    /// `}\n</tool_call>`.
    pub tail: usize,
    /// `\n<tool_call>` before a further call.
    pub next: usize,
    /// The arguments of function `i` (in `names`' value order).
    pub args: Vec<NodeId>,
    /// Most calls after the first.
    pub more: usize,
}

/// A fixed property of an object.
#[derive(Clone, Debug, PartialEq)]
pub struct Prop {
    pub name: String,
    /// Index in [`Grammar::tries`] of the quoted name.
    pub key: usize,
    pub node: NodeId,
}

/// [`Grammar::tries`]' first entries: `true`/`false`, and `null`.
pub const BOOL_TRIE: usize = 0;
pub const NULL_TRIE: usize = 1;

/// Most trie nodes (about 20 bytes each) a schema's `enum`s, `const`s,
/// integer ranges and keys may take together: a larger schema is refused
/// rather than held in memory.
pub const MAX_TRIE_NODES: usize = 1 << 20;

/// A compiled constraint: nodes and the root.
#[derive(Clone, Debug)]
pub struct Grammar {
    pub nodes: Vec<Node>,
    pub root: NodeId,
    /// Most nested containers inside an `Any` value, and of schema
    /// containers through recursive `$ref`s.
    pub max_depth: usize,
    /// Most bytes of a free string (then it must close).
    pub max_string: usize,
    /// Most items of an array without `maxItems`.
    pub max_items: usize,
    /// The texts `Literal`s and keys follow.
    pub tries: Vec<Trie>,
    /// Texts of control tokens the grammar writes (a call's `<tool_call>`,
    /// a single token in Qwen2.5's vocabulary): those tokens are allowed,
    /// and shown in the text.
    pub markers: Vec<String>,
}

/// Keywords that would constrain values beyond what is enforced.
const REFUSED: [&str; 12] = [
    "pattern",
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
];

/// Bounds, supported on integers only.
const BOUNDS: [&str; 4] = ["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"];

/// Default limits that make every constrained reply finish.
const MAX_DEPTH: usize = 6;
const MAX_STRING: usize = 256;
const MAX_ITEMS: usize = 32;
/// Nesting of schema containers reached through recursive `$ref`s.
pub const MAX_REF_DEPTH: usize = 12;

impl Grammar {
    fn with_root(nodes: Vec<Node>, root: NodeId, tries: Vec<Trie>) -> Grammar {
        Grammar {
            nodes,
            root,
            max_depth: MAX_DEPTH,
            max_string: MAX_STRING,
            max_items: MAX_ITEMS,
            tries,
            markers: Vec::new(),
        }
    }

    /// `json_object`: any JSON object.
    pub fn any_object() -> Grammar {
        Grammar::with_root(vec![Node::AnyObject], 0, base_tries())
    }

    /// A JSON schema; the error names what is not supported.
    pub fn from_schema(schema: &Value) -> Result<Grammar, Error> {
        let mut c = Compiler {
            root: schema,
            nodes: Vec::new(),
            tries: base_tries(),
            trie_nodes: 0,
            refs: HashMap::new(),
        };
        let root = c.compile(schema, 0)?;
        let g = Grammar::with_root(c.nodes, root, c.tries);
        if !matches!(g.node(root), Node::Object(_) | Node::AnyObject) {
            return Err(bad("the schema's root must be an object (type: object)"));
        }
        Ok(g)
    }

    /// Function calls, `<tool_call>\n{"name": "NAME", "arguments": ARGS}\n</tool_call>`
    /// as Qwen2.5 (and Hermes-style) templates write them: `functions` are
    /// each name with the JSON schema of its arguments (an object), the
    /// arguments following the named function's schema. With
    /// `after_open`, the text starts after the first `<tool_call>` (a
    /// reply that opened a call by itself); with `more`, up to that many
    /// further calls may follow, each after a newline.
    pub fn tool_calls(
        functions: &[(String, Value)],
        after_open: bool,
        more: usize,
    ) -> Result<Grammar, Error> {
        if functions.is_empty() {
            return Err(bad("no function to call"));
        }
        let empty = Value::Null;
        let mut c = Compiler {
            root: &empty,
            nodes: Vec::new(),
            tries: base_tries(),
            trie_nodes: 0,
            refs: HashMap::new(),
        };
        let mut args = Vec::with_capacity(functions.len());
        let mut names = Vec::with_capacity(functions.len());
        for (name, schema) in functions {
            // Each function's schema is its own document for `$ref`s.
            c.root = schema;
            c.refs.clear();
            let node = c.compile(schema, 0)?;
            let is_object = {
                let g = Grammar::with_root(c.nodes.clone(), node, Vec::new());
                matches!(g.node(node), Node::Object(_) | Node::AnyObject)
            };
            if !is_object {
                return Err(bad(format!(
                    "the parameters of function '{name}' must be an object schema"
                )));
            }
            args.push(node);
            let quoted = serde_json::to_string(name).unwrap_or_default();
            names.push(quoted[1..].to_string());
        }
        let calls = Calls {
            open: if after_open {
                None
            } else {
                Some(c.trie(&["<tool_call>"])?)
            },
            head: c.trie(&["\n{\"name\": \""])?,
            names: c.trie(&names)?,
            middle: c.trie(&[", \"arguments\": "])?,
            tail: c.trie(&["}\n</tool_call>"])?,
            next: c.trie(&["\n<tool_call>"])?,
            args,
            more,
        };
        let root = c.push(Node::Calls(calls));
        let mut g = Grammar::with_root(c.nodes, root, c.tries);
        g.markers = vec!["<tool_call>".into(), "</tool_call>".into()];
        Ok(g)
    }

    /// The node `id` stands for (through `$ref`s).
    pub fn node(&self, mut id: NodeId) -> &Node {
        for _ in 0..=self.nodes.len() {
            match &self.nodes[id] {
                Node::Ref(to) => id = *to,
                n => return n,
            }
        }
        // A `$ref` cycle with nothing in between: any value.
        &Node::Any
    }

    /// The characters a value of `id` may start with, `depth` containers
    /// deep.
    pub fn starts(&self, id: NodeId, c: u8, depth: usize) -> bool {
        let deep = depth >= MAX_REF_DEPTH;
        match self.node(id) {
            Node::Any => b"{[\"-0123456789tfn".contains(&c),
            Node::Object(_) | Node::AnyObject => c == b'{' && !deep,
            Node::Array { min, .. } => c == b'[' && (!deep || *min == 0),
            Node::String => c == b'"',
            Node::Number | Node::Integer => c == b'-' || c.is_ascii_digit(),
            Node::Boolean => c == b't' || c == b'f',
            Node::Null => c == b'n',
            Node::Literal(t) => self.tries[*t].step(0, c).is_some(),
            Node::Union(members) => members.iter().any(|&m| self.starts(m, c, depth)),
            Node::Calls(calls) => match calls.open {
                Some(t) => self.tries[t].step(0, c).is_some(),
                None => self.tries[calls.head].step(0, c).is_some(),
            },
            Node::Ref(_) => false,
        }
    }
}

fn base_tries() -> Vec<Trie> {
    vec![Trie::new(&["true", "false"]), Trie::new(&["null"])]
}

/// Nesting of schemas we follow at most (a hostile schema could be deep).
const MAX_SCHEMA_DEPTH: usize = 32;

/// Most integers a range may hold (it becomes a trie of them).
const MAX_RANGE: f64 = 100_000.0;

struct Compiler<'s> {
    /// The whole schema (what `$ref`s point into).
    root: &'s Value,
    nodes: Vec<Node>,
    tries: Vec<Trie>,
    trie_nodes: usize,
    /// The node of each `$ref` compiled so far (a recursive one finds it).
    refs: HashMap<String, NodeId>,
}

impl Compiler<'_> {
    fn push(&mut self, n: Node) -> NodeId {
        self.nodes.push(n);
        self.nodes.len() - 1
    }

    /// A trie of `texts`, counted against [`MAX_TRIE_NODES`].
    fn trie<S: AsRef<[u8]>>(&mut self, texts: &[S]) -> Result<usize, Error> {
        // A trie has at most one node per byte, plus the root: refuse
        // what is surely too big before building it.
        let bytes: usize = texts.iter().map(|t| t.as_ref().len()).sum();
        if texts.len() > MAX_TRIE_NODES || (bytes > 2 * MAX_TRIE_NODES) {
            return Err(too_big());
        }
        let t = Trie::new(texts);
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
        // (A list of types is checked per type.)
        let integer = match obj.get("type") {
            Some(Value::String(t)) => t == "integer",
            Some(Value::Array(_)) => true,
            _ => false,
        };
        if let Some(k) = BOUNDS.iter().find(|k| obj.contains_key(**k)) {
            if !integer {
                return Err(bad(format!(
                    "the schema keyword '{k}' is supported on integers only"
                )));
            }
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

    /// An integer with bounds: both must be given (a closed range of at
    /// most [`MAX_RANGE`] values), which becomes a trie of its integers.
    fn integer_range(&mut self, obj: &Map<String, Value>) -> Result<NodeId, Error> {
        let bound = |k: &str| -> Result<Option<f64>, Error> {
            obj.get(k)
                .map(|v| {
                    v.as_f64()
                        .ok_or_else(|| bad(format!("{k} must be a number")))
                })
                .transpose()
        };
        let lo = match (bound("minimum")?, bound("exclusiveMinimum")?) {
            (Some(a), Some(b)) => Some(a.ceil().max(b.floor() + 1.0)),
            (Some(a), None) => Some(a.ceil()),
            (None, Some(b)) => Some(b.floor() + 1.0),
            (None, None) => None,
        };
        let hi = match (bound("maximum")?, bound("exclusiveMaximum")?) {
            (Some(a), Some(b)) => Some(a.floor().min(b.ceil() - 1.0)),
            (Some(a), None) => Some(a.floor()),
            (None, Some(b)) => Some(b.ceil() - 1.0),
            (None, None) => None,
        };
        let (Some(lo), Some(hi)) = (lo, hi) else {
            return Err(bad(
                "an integer's bounds are supported only as a closed range (both a minimum and a maximum)",
            ));
        };
        if lo > hi {
            return Err(bad(format!("no integer lies between {lo} and {hi}")));
        }
        if hi - lo >= MAX_RANGE {
            return Err(bad(format!(
                "an integer range may hold at most {MAX_RANGE} values; {lo}..={hi} holds more"
            )));
        }
        let texts: Vec<String> = (lo as i64..=hi as i64).map(|i| i.to_string()).collect();
        let t = self.trie(&texts)?;
        Ok(self.push(Node::Literal(t)))
    }

    fn compile_type(
        &mut self,
        t: &str,
        obj: &Map<String, Value>,
        depth: usize,
    ) -> Result<NodeId, Error> {
        let node = match t {
            "string" => Node::String,
            "number" => Node::Number,
            "integer" if BOUNDS.iter().any(|k| obj.contains_key(*k)) => {
                return self.integer_range(obj)
            }
            "integer" => Node::Integer,
            "boolean" => Node::Boolean,
            "null" => Node::Null,
            "object" => match obj.get("properties").and_then(Value::as_object) {
                None => Node::AnyObject,
                Some(props) => {
                    let mut fields = Vec::with_capacity(props.len());
                    for (name, sub) in props {
                        let node = self.compile(sub, depth + 1)?;
                        let quoted = serde_json::to_string(name).unwrap_or_default();
                        let key = self.trie(&[quoted])?;
                        fields.push(Prop {
                            name: name.clone(),
                            key,
                            node,
                        });
                    }
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
                            return Err(bad(format!(
                                "required property '{r}' is not in properties"
                            )));
                        }
                    }
                    Node::Object(fields)
                }
            },
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

fn too_big() -> Error {
    bad(format!(
        "the schema's enum / const values, integer ranges and keys are too large \
         (more than {MAX_TRIE_NODES} trie nodes)"
    ))
}
