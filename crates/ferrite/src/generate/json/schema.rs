//! The JSON a constrained reply must be: `response_format` `json_object`
//! (any object) or a `json_schema` compiled into a small tree of [`Node`]s.
//!
//! The supported subset: `type` object (with `properties`, emitted in the
//! schema's key order; those not in `required` may be left out; a
//! `required` name not in `properties` is declared after them;
//! `additionalProperties` `false` (the default here: only declared keys
//! are written), `true` or a schema (further keys after the declared
//! ones, never one of theirs); without `properties`, any object, or with
//! `additionalProperties` a schema, a map of such values), array
//! (`items`, `minItems`, `maxItems`), string (with `pattern`: a simple
//! regular expression, see [`super::regex`]), number and integer (with
//! `minimum` / `maximum` / `exclusiveMinimum` / `exclusiveMaximum`, see
//! [`super::number`]), boolean, null, a list of types, `anyOf` / `oneOf`
//! (the first member that may start with the reply's next character is
//! followed; a `oneOf` only when no value can match two of its branches,
//! see [`super::one_of`]), `enum` and `const` of any size (one byte trie per grammar,
//! within [`MAX_TRIE_NODES`]; checked against `type`), and `$ref` into the
//! schema itself (`#/$defs/...`, `#/definitions/...`, `#`; recursion
//! through nesting is bounded at run time, left recursion and cycles with
//! no way out are refused, see [`super::check`]). Keywords that constrain
//! further (`format`, `minLength`, `multipleOf`, ...), or that would be
//! ignored beside `$ref` / `anyOf` / `oneOf` / `enum` / `const`, are
//! refused with an error naming the keyword and its place (`at
//! #/properties/a`) rather than ignored, so an accepted schema is always
//! met.
//!
//! Everything is compiled once per request within budgets (trie nodes,
//! automaton states, nesting); a step of the reply then costs the same
//! whatever the schema's size.

use std::collections::HashMap;

use serde_json::{Map, Value};

use super::grammar::{
    base_tries, CallSyntax, Calls, Grammar, Node, NodeId, Obj, Prop, MAX_ITEMS, MAX_REF_DEPTH,
    MAX_STRING,
};
use super::check::{self, BOUNDS, CONSTRAINING, REFUSED};
use super::number::NumRange;
use super::one_of;
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

impl Grammar {
    fn compiled(c: Compiler, root: NodeId) -> Grammar {
        let mut g = Grammar::with_root(c.nodes, root, c.tries);
        g.ranges = c.ranges;
        g.patterns = c.patterns;
        g
    }

    /// A JSON schema; the error names what is not supported, and where.
    pub fn from_schema(schema: &Value) -> Result<Grammar, Error> {
        let mut c = Compiler::new(schema);
        let root = c.compile(schema, 0)?;
        check::grammar(&c.nodes, &c.paths)?;
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
            c.within = format!("the parameters of function '{name}'");
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
        c.within.clear();
        let root = c.push(Node::Calls(calls));
        check::grammar(&c.nodes, &c.paths)?;
        let mut g = Grammar::compiled(c, root);
        g.markers = syntax.markers.clone();
        Ok(g)
    }
}

/// Nesting of schemas we follow at most (a hostile schema could be deep):
/// the compiler recurses once per level, so this bounds its stack.
pub const MAX_SCHEMA_DEPTH: usize = 32;

struct Compiler<'s> {
    /// The whole schema (what `$ref`s point into).
    root: &'s Value,
    nodes: Vec<Node>,
    /// Where in the schema each node comes from (a JSON pointer, `#/...`).
    paths: Vec<String>,
    tries: Vec<Trie>,
    trie_nodes: usize,
    /// The node of each `$ref` compiled so far (a recursive one finds it).
    refs: HashMap<String, NodeId>,
    ranges: Vec<NumRange>,
    patterns: Vec<Dfa>,
    /// DFA states the patterns may still take.
    pattern_budget: usize,
    /// The JSON pointer segments (escaped) of the schema being compiled.
    path: Vec<String>,
    /// What the path is in (empty, or "the parameters of function 'f'").
    within: String,
}

impl<'s> Compiler<'s> {
    fn new(root: &'s Value) -> Compiler<'s> {
        Compiler {
            root,
            nodes: Vec::new(),
            paths: Vec::new(),
            tries: base_tries(),
            trie_nodes: 0,
            refs: HashMap::new(),
            ranges: Vec::new(),
            patterns: Vec::new(),
            pattern_budget: MAX_PATTERN_STATES,
            path: Vec::new(),
            within: String::new(),
        }
    }

    /// Where the compiler is, as a JSON pointer (`#/properties/a`).
    fn at(&self) -> String {
        let mut at = String::from("#");
        for seg in &self.path {
            at.push('/');
            at.push_str(seg);
        }
        if !self.within.is_empty() {
            at = format!("{at} in {}", self.within);
        }
        at
    }

    /// A refusal naming where in the schema it is.
    fn bad(&self, reason: impl std::fmt::Display) -> Error {
        bad(format!("{reason} (at {})", self.at()))
    }

    fn push(&mut self, n: Node) -> NodeId {
        self.nodes.push(n);
        self.paths.push(self.at());
        self.nodes.len() - 1
    }

    /// Compiles the schema `s` found under `segs` (unescaped keys) below
    /// the current path.
    fn sub(&mut self, s: &Value, segs: &[&str], depth: usize) -> Result<NodeId, Error> {
        let len = self.path.len();
        self.path
            .extend(segs.iter().map(|k| k.replace('~', "~0").replace('/', "~1")));
        let r = self.compile(s, depth + 1);
        self.path.truncate(len);
        r
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

    /// `enum` / `const`: `values` exactly, each checked against `type`.
    fn literal(&mut self, obj: &Map<String, Value>, key: &str) -> Result<NodeId, Error> {
        if let Some(k) = CONSTRAINING
            .iter()
            .find(|k| !matches!(**k, "type" | "enum" | "const") && obj.contains_key(**k))
        {
            return Err(self.bad(format!(
                "the schema keyword '{key}' together with '{k}' is not supported \
                 (list only the values allowed)"
            )));
        }
        let values: &[Value] = match (obj.get("const"), obj.get("enum")) {
            (Some(c), None) => std::slice::from_ref(c),
            (None, Some(e)) => match e.as_array() {
                Some(a) if !a.is_empty() => a,
                _ => return Err(self.bad("enum must be a non-empty list")),
            },
            (Some(c), Some(e)) => {
                if !e.as_array().is_some_and(|a| a.contains(c)) {
                    return Err(self.bad("const is not one of enum's values: nothing matches"));
                }
                std::slice::from_ref(c)
            }
            (None, None) => return Err(self.bad("neither enum nor const")),
        };
        let types = match obj.get("type") {
            None => None,
            Some(t) => Some(check::type_names(t).map_err(|e| self.bad(e))?),
        };
        for (i, v) in values.iter().enumerate() {
            let which = if key == "const" {
                "const".to_string()
            } else {
                format!("enum value {i}")
            };
            if !check::depth_within(v, check::MAX_VALUE_DEPTH) {
                return Err(self.bad(format!(
                    "{which} nests deeper than {} levels",
                    check::MAX_VALUE_DEPTH
                )));
            }
            if let Some(types) = &types {
                if !types.iter().any(|t| check::has_type(v, t)) {
                    let v = v.to_string();
                    let v = if v.len() > 60 { format!("{}...", &v[..v.floor_char_boundary(60)]) } else { v };
                    return Err(self.bad(format!(
                        "{which} ({v}) is not of the schema's type {}: nothing would match",
                        obj["type"]
                    )));
                }
            }
        }
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
                self.bad(format!(
                    "$ref '{r}' does not point into this schema (only '#/...' references do)"
                ))
            })?;
        // A placeholder first, so that a recursive reference finds it.
        let id = self.push(Node::Ref(NodeId::MAX));
        self.refs.insert(r.to_string(), id);
        // Errors inside name the target's place.
        let site = std::mem::take(&mut self.path);
        self.path = r[1..].split('/').skip(1).map(str::to_string).collect();
        let to = self.compile(target, depth + 1);
        self.path = site;
        self.nodes[id] = Node::Ref(to?);
        Ok(id)
    }

    fn compile(&mut self, s: &Value, depth: usize) -> Result<NodeId, Error> {
        if depth > MAX_SCHEMA_DEPTH {
            return Err(self.bad(format!(
                "the schema nests deeper than {MAX_SCHEMA_DEPTH} levels"
            )));
        }
        let obj = match s {
            Value::Bool(true) => return Ok(self.push(Node::Any)),
            Value::Bool(false) => return Err(self.bad("the schema false matches nothing")),
            Value::Object(o) => o,
            _ => return Err(self.bad(format!("a schema must be an object, got {s}"))),
        };
        if let Some(k) = REFUSED.iter().find(|k| obj.contains_key(**k)) {
            return Err(self.bad(format!("the schema keyword '{k}' is not supported")));
        }
        // `$ref`, `anyOf` and `oneOf` are followed alone.
        for key in ["$ref", "anyOf", "oneOf"] {
            if !obj.contains_key(key) {
                continue;
            }
            if let Some(k) = CONSTRAINING
                .iter()
                .find(|k| **k != key && obj.contains_key(**k))
            {
                return Err(self.bad(format!(
                    "the schema keyword '{key}' together with '{k}' is not supported"
                )));
            }
        }
        if let Some(k) = BOUNDS.iter().find(|k| obj.contains_key(**k)) {
            if !obj.contains_key("type") {
                return Err(self.bad(format!(
                    "the schema keyword '{k}' needs a type (number or integer)"
                )));
            }
        }
        if obj.contains_key("pattern") && !obj.contains_key("type") {
            return Err(self.bad("the schema keyword 'pattern' needs type string"));
        }
        if let Some(r) = obj.get("$ref") {
            let r = r.as_str().ok_or_else(|| self.bad("$ref must be a string"))?;
            return self.reference(r, depth);
        }
        if obj.contains_key("const") {
            return self.literal(obj, "const");
        }
        if obj.contains_key("enum") {
            return self.literal(obj, "enum");
        }
        for key in ["anyOf", "oneOf"] {
            if let Some(v) = obj.get(key) {
                let list = match v.as_array() {
                    Some(a) if !a.is_empty() => a,
                    _ => return Err(self.bad(format!("{key} must be a non-empty list"))),
                };
                if key == "oneOf" {
                    if let Some((i, j)) = one_of::overlapping(self.root, list) {
                        return Err(self.bad(format!(
                            "'oneOf' branches {i} and {j} may both match one value, and oneOf \
                             means exactly one; ferrite takes a oneOf whose branches differ in \
                             type, in const / enum values, or in a required property's const / \
                             enum (a tagged union): use anyOf if any matching branch will do"
                        )));
                    }
                }
                let mut members = Vec::with_capacity(list.len());
                for (i, m) in list.iter().enumerate() {
                    members.push(self.sub(m, &[key, &i.to_string()], depth)?);
                }
                return Ok(self.push(Node::Union(members)));
            }
        }
        let has = |keys: &[&str]| keys.iter().any(|k| obj.contains_key(*k));
        match obj.get("type") {
            Some(t @ Value::Array(_)) => {
                let types = check::type_names(t).map_err(|e| self.bad(e))?;
                let mut members = Vec::with_capacity(types.len());
                for t in types {
                    members.push(self.compile_type(t, obj, depth + 1)?);
                }
                Ok(self.push(Node::Union(members)))
            }
            Some(Value::String(t)) => self.compile_type(t, obj, depth),
            Some(other) => Err(self.bad(format!("type must be a string or a list, got {other}"))),
            // No type: a value of the kind the keywords describe (any
            // such value matches), or any value.
            None if has(&["properties", "required", "additionalProperties"]) => {
                self.compile_type("object", obj, depth)
            }
            None if has(&["items", "minItems", "maxItems"]) => {
                self.compile_type("array", obj, depth)
            }
            None => Ok(self.push(Node::Any)),
        }
    }

    /// An object: declared properties (optional ones may be left out) and
    /// `additionalProperties`. A required name that `properties` does not
    /// declare is declared after them, its value following
    /// `additionalProperties`.
    fn object(&mut self, obj: &Map<String, Value>, depth: usize) -> Result<Node, Error> {
        let more = obj.get("additionalProperties");
        let extra = match more {
            None | Some(Value::Bool(false)) => None,
            Some(s) => Some(self.sub(s, &["additionalProperties"], depth)?),
        };
        let empty = Map::new();
        let props = match obj.get("properties") {
            None => &empty,
            Some(Value::Object(p)) => p,
            Some(_) => return Err(self.bad("properties must be an object")),
        };
        let required = match obj.get("required") {
            None => Vec::new(),
            Some(Value::Array(r)) => {
                let mut names: Vec<&str> = Vec::with_capacity(r.len());
                for n in r {
                    let n = n
                        .as_str()
                        .ok_or_else(|| self.bad("required must list property names"))?;
                    if !names.contains(&n) {
                        names.push(n);
                    }
                }
                names
            }
            Some(_) => return Err(self.bad("required must be a list of property names")),
        };
        if props.is_empty() && required.is_empty() {
            return Ok(match extra {
                // Declared nothing (no `properties` at all), and nothing
                // else limited: any object. `properties: {}` declares no
                // key, so only `{}` (absent `additionalProperties` writes
                // only the declared keys).
                None if more.is_none() && !obj.contains_key("properties") => Node::AnyObject,
                _ if more == Some(&Value::Bool(true)) => Node::AnyObject,
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
        }
        let mut fields = Vec::with_capacity(props.len() + required.len());
        let mut quoted = Vec::with_capacity(props.len() + required.len());
        for (name, sub) in props {
            let node = self.sub(sub, &["properties", name], depth)?;
            quoted.push(serde_json::to_string(name).unwrap_or_default());
            fields.push(Prop {
                name: name.clone(),
                node,
                required: required.contains(&name.as_str()),
            });
        }
        for name in required.iter().filter(|n| !props.contains_key(**n)) {
            let node = match (extra, more) {
                (Some(e), _) => e,
                (None, Some(Value::Bool(false))) => {
                    return Err(self.bad(format!(
                        "required property '{name}' is not in properties and \
                         additionalProperties is false: no object matches"
                    )))
                }
                // Absent or `true`: any value.
                _ => self.push(Node::Any),
            };
            quoted.push(serde_json::to_string(name).unwrap_or_default());
            fields.push(Prop {
                name: name.to_string(),
                node,
                required: true,
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
        if depth > MAX_SCHEMA_DEPTH {
            return Err(self.bad(format!(
                "the schema nests deeper than {MAX_SCHEMA_DEPTH} levels"
            )));
        }
        let node = match t {
            "string" => match obj.get("pattern") {
                None => Node::String,
                Some(p) => {
                    let p = p
                        .as_str()
                        .ok_or_else(|| self.bad("the schema keyword 'pattern' must be a string"))?;
                    let mut budget = self.pattern_budget;
                    let dfa = Dfa::compile(p, &mut budget).map_err(|e| {
                        let shown = if p.len() > 80 {
                            format!("{}...", &p[..p.floor_char_boundary(80)])
                        } else {
                            p.to_string()
                        };
                        self.bad(format!(
                            "the schema keyword 'pattern' ('{shown}') is not supported: {e}"
                        ))
                    })?;
                    self.pattern_budget = budget;
                    if dfa.dist(0) > MAX_STRING {
                        return Err(self.bad(format!(
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
                match NumRange::from_schema(obj, int_only).map_err(|e| self.bad(e))? {
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
                    Some(items) => self.sub(items, &["items"], depth)?,
                    None => self.push(Node::Any),
                };
                let count = |k: &str| check::count(obj, k).map_err(|e| self.bad(e));
                let min = count("minItems")?.unwrap_or(0);
                let max = count("maxItems")?.unwrap_or(MAX_ITEMS.max(min));
                if min > max {
                    return Err(self.bad(format!(
                        "minItems {min} is more than maxItems {max}: no array matches"
                    )));
                }
                if min > 1024 {
                    return Err(self.bad(format!("minItems {min} is more than 1024")));
                }
                Node::Array { item, min, max }
            }
            other => {
                return Err(self.bad(format!("type '{other}' is not a JSON schema type")))
            }
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
