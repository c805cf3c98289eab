//! The JSON a constrained reply must be: `response_format` `json_object`
//! (any object) or a `json_schema` compiled into a small tree of [`Node`]s.
//!
//! The supported subset: `type` object (with `properties`, all emitted in
//! key order; `required` must name declared properties; without
//! `properties`, any object), array (`items`, `minItems`, `maxItems`),
//! string, number, integer, boolean, null, a list of types, `anyOf` /
//! `oneOf` whose members start with different characters, `enum` and
//! `const`. Keywords that constrain further (`pattern`, `format`,
//! `minimum`, `$ref`, ...) are refused with a clear error rather than
//! ignored, so an accepted schema is always met.

use serde_json::{Map, Value};

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
    Object(Vec<(String, NodeId)>),
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
    /// One of these JSON texts exactly.
    Literal(Vec<String>),
    /// One of these nodes, chosen by the first character.
    Union(Vec<NodeId>),
}

/// A compiled constraint: nodes and the root.
#[derive(Clone, Debug)]
pub struct Grammar {
    pub nodes: Vec<Node>,
    pub root: NodeId,
    /// Most nested containers inside an `Any` value.
    pub max_depth: usize,
    /// Most bytes of a free string (then it must close).
    pub max_string: usize,
    /// Most items of an array without `maxItems`.
    pub max_items: usize,
}

/// Keywords that would constrain values beyond what is enforced.
const REFUSED: [&str; 17] = [
    "pattern",
    "format",
    "minLength",
    "maxLength",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "$ref",
    "allOf",
    "not",
    "if",
    "patternProperties",
    "uniqueItems",
    "contains",
    "prefixItems",
];

/// Default limits that make every constrained reply finish.
const MAX_DEPTH: usize = 6;
const MAX_STRING: usize = 256;
const MAX_ITEMS: usize = 32;

impl Grammar {
    fn with_root(nodes: Vec<Node>, root: NodeId) -> Grammar {
        Grammar {
            nodes,
            root,
            max_depth: MAX_DEPTH,
            max_string: MAX_STRING,
            max_items: MAX_ITEMS,
        }
    }

    /// `json_object`: any JSON object.
    pub fn any_object() -> Grammar {
        Grammar::with_root(vec![Node::AnyObject], 0)
    }

    /// A JSON schema; the error names what is not supported.
    pub fn from_schema(schema: &Value) -> Result<Grammar, Error> {
        let mut nodes = Vec::new();
        let root = compile(schema, &mut nodes, 0)?;
        if !matches!(nodes[root], Node::Object(_) | Node::AnyObject) {
            return Err(bad("the schema's root must be an object (type: object)"));
        }
        Ok(Grammar::with_root(nodes, root))
    }

    /// The characters a value of `id` may start with.
    pub fn starts(&self, id: NodeId, c: u8) -> bool {
        match &self.nodes[id] {
            Node::Any => b"{[\"-0123456789tfn".contains(&c),
            Node::Object(_) | Node::AnyObject => c == b'{',
            Node::Array { .. } => c == b'[',
            Node::String => c == b'"',
            Node::Number | Node::Integer => c == b'-' || c.is_ascii_digit(),
            Node::Boolean => c == b't' || c == b'f',
            Node::Null => c == b'n',
            Node::Literal(texts) => texts.iter().any(|t| t.as_bytes().first() == Some(&c)),
            Node::Union(members) => members.iter().any(|&m| self.starts(m, c)),
        }
    }
}

fn push(nodes: &mut Vec<Node>, n: Node) -> NodeId {
    nodes.push(n);
    nodes.len() - 1
}

/// Nesting of schemas we follow at most (a hostile schema could be deep).
const MAX_SCHEMA_DEPTH: usize = 32;

fn compile(s: &Value, nodes: &mut Vec<Node>, depth: usize) -> Result<NodeId, Error> {
    if depth > MAX_SCHEMA_DEPTH {
        return Err(bad(format!(
            "the schema nests deeper than {MAX_SCHEMA_DEPTH} levels"
        )));
    }
    let obj = match s {
        Value::Bool(true) => return Ok(push(nodes, Node::Any)),
        Value::Object(o) => o,
        _ => return Err(bad(format!("a schema must be an object, got {s}"))),
    };
    if let Some(k) = REFUSED.iter().find(|k| obj.contains_key(**k)) {
        return Err(bad(format!("the schema keyword '{k}' is not supported")));
    }
    if let Some(v) = obj.get("const") {
        return Ok(push(nodes, Node::Literal(vec![v.to_string()])));
    }
    if let Some(e) = obj.get("enum") {
        let values = e
            .as_array()
            .filter(|a| !a.is_empty())
            .ok_or_else(|| bad("enum must be a non-empty list"))?;
        return Ok(push(
            nodes,
            Node::Literal(values.iter().map(Value::to_string).collect()),
        ));
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(v) = obj.get(key) {
            let list = v
                .as_array()
                .filter(|a| !a.is_empty())
                .ok_or_else(|| bad(format!("{key} must be a non-empty list")))?;
            let members = list
                .iter()
                .map(|m| compile(m, nodes, depth + 1))
                .collect::<Result<Vec<_>, _>>()?;
            return Ok(push(nodes, Node::Union(members)));
        }
    }
    match obj.get("type") {
        Some(Value::Array(types)) => {
            let members = types
                .iter()
                .map(|t| {
                    let mut one = obj.clone();
                    one.insert("type".into(), t.clone());
                    compile(&Value::Object(one), nodes, depth + 1)
                })
                .collect::<Result<Vec<_>, _>>()?;
            Ok(push(nodes, Node::Union(members)))
        }
        Some(Value::String(t)) => compile_type(t, obj, nodes, depth),
        None if obj.contains_key("properties") => compile_type("object", obj, nodes, depth),
        None if obj.contains_key("items") => compile_type("array", obj, nodes, depth),
        None => Ok(push(nodes, Node::Any)),
        Some(other) => Err(bad(format!("type must be a string or a list, got {other}"))),
    }
}

fn compile_type(
    t: &str,
    obj: &Map<String, Value>,
    nodes: &mut Vec<Node>,
    depth: usize,
) -> Result<NodeId, Error> {
    let node = match t {
        "string" => Node::String,
        "number" => Node::Number,
        "integer" => Node::Integer,
        "boolean" => Node::Boolean,
        "null" => Node::Null,
        "object" => match obj.get("properties").and_then(Value::as_object) {
            None => Node::AnyObject,
            Some(props) => {
                let mut fields = Vec::with_capacity(props.len());
                for (name, sub) in props {
                    fields.push((name.clone(), compile(sub, nodes, depth + 1)?));
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
                        return Err(bad(format!("required property '{r}' is not in properties")));
                    }
                }
                Node::Object(fields)
            }
        },
        "array" => {
            let item = match obj.get("items") {
                Some(items) => compile(items, nodes, depth + 1)?,
                None => push(nodes, Node::Any),
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
    Ok(push(nodes, node))
}
