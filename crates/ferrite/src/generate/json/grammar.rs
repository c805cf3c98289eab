//! A compiled constraint ([`Grammar`]): the tree of [`Node`]s a reply's
//! JSON must follow, with its tries, number ranges, pattern automata and
//! limits. `schema.rs` compiles one from a JSON schema.

use super::feasible::{depth_limits, key_limits, RangeMax};
use super::number::NumRange;
use super::regex::Dfa;
use super::trie::Trie;

/// Index of a node in [`Grammar::nodes`].
pub type NodeId = usize;

/// What a value may be.
#[derive(Clone, Debug, PartialEq)]
pub enum Node {
    /// Any JSON value (nesting limited by [`Grammar::max_depth`]).
    Any,
    /// An object of declared properties, in their order (see [`Obj`]).
    Object(Obj),
    /// An object with any keys and any values.
    AnyObject,
    Array {
        item: NodeId,
        min: usize,
        max: usize,
    },
    String,
    /// A string of `min..=max` Unicode characters (`minLength`,
    /// `maxLength`; still within [`Grammar::max_string`] bytes).
    Sized { min: u32, max: u32 },
    Number,
    Integer,
    /// A number within bounds: `ranges[i]`.
    Range(usize),
    /// A string matching `patterns[i]`.
    Pattern(usize),
    Boolean,
    Null,
    /// One of the JSON texts of trie `tries[i]`, exactly.
    Literal(usize),
    /// One of these nodes: the first that may start with the next byte.
    Union(Vec<NodeId>),
    /// The same as another node (a `$ref`).
    Ref(NodeId),
    /// Function calls as a model's template writes them (see
    /// [`Grammar::tool_calls`]).
    Calls(Calls),
}

/// The fixed texts of a model's function calls (see
/// [`Grammar::tool_calls`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallSyntax {
    /// What opens the first call, if it is part of the grammar.
    pub open: Option<String>,
    /// Up to the function's name.
    pub head: String,
    /// Between the name's closing quote and the arguments.
    pub middle: String,
    /// After the arguments.
    pub tail: String,
    /// Before a further call.
    pub next: String,
    /// Control-token texts the grammar writes.
    pub markers: Vec<String>,
}

impl CallSyntax {
    /// `<tool_call>\n{"name": "NAME", "arguments": ARGS}\n</tool_call>`, as
    /// Qwen2.5 (and Hermes-style) templates write calls, separated by a
    /// newline; with `after_open`, the text starts after the first
    /// `<tool_call>` (a reply that opened a call by itself).
    pub fn hermes(after_open: bool) -> CallSyntax {
        CallSyntax {
            open: (!after_open).then(|| "<tool_call>".into()),
            head: "\n{\"name\": \"".into(),
            middle: ", \"arguments\": ".into(),
            tail: "}\n</tool_call>".into(),
            next: "\n<tool_call>".into(),
            markers: vec!["<tool_call>".into(), "</tool_call>".into()],
        }
    }

    /// `{"name": "NAME", "parameters": ARGS}`, as Llama 3.1-3.3 templates
    /// write a call (one per reply).
    pub fn llama3() -> CallSyntax {
        CallSyntax {
            open: None,
            head: "{\"name\": \"".into(),
            middle: ", \"parameters\": ".into(),
            tail: "}".into(),
            next: String::new(),
            markers: Vec::new(),
        }
    }
}

/// The pieces of [`Node::Calls`]: `tries` indices of the fixed texts and
/// of the functions' names, and each function's arguments.
#[derive(Clone, Debug, PartialEq)]
pub struct Calls {
    /// The opening text (`<tool_call>`), if the grammar starts with it.
    pub open: Option<usize>,
    /// Up to the name (`\n{"name": "`).
    pub head: usize,
    /// Each name, JSON-escaped, with its closing quote.
    pub names: usize,
    /// `, "arguments": `.
    pub middle: usize,
    /// After the arguments (`}\n</tool_call>`).
    pub tail: usize,
    /// Before a further call (`\n<tool_call>`).
    pub next: usize,
    /// The arguments of function `i` (in `names`' value order).
    pub args: Vec<NodeId>,
    /// Most calls after the first.
    pub more: usize,
}

/// An object's declared properties and what else it may hold.
#[derive(Clone, Debug, PartialEq)]
pub struct Obj {
    pub props: Vec<Prop>,
    /// Index in [`Grammar::tries`] of the quoted keys (an indexed trie:
    /// text `i` is `props[i]`'s key).
    pub keys: usize,
    /// `next_required[i]`: the first required property at or after `i`
    /// (`props.len()` when none is): the keys that may come next after
    /// property `i - 1` are `i..=next_required[i]`.
    pub next_required: Vec<usize>,
    /// The values of keys other than the declared ones, when such keys are
    /// allowed (after the declared ones).
    pub extra: Option<NodeId>,
}

/// A declared property of an object.
#[derive(Clone, Debug, PartialEq)]
pub struct Prop {
    pub name: String,
    pub node: NodeId,
    pub required: bool,
}

/// [`Grammar::tries`]' first entries: `true`/`false`, and `null`.
pub const BOOL_TRIE: usize = 0;
pub const NULL_TRIE: usize = 1;

/// A compiled constraint: nodes and the root.
#[derive(Clone, Debug)]
pub struct Grammar {
    /// The nodes, referred to by index.
    pub(crate) nodes: Vec<Node>,
    /// The node of the whole value.
    pub(crate) root: NodeId,
    /// Most nested containers inside an `Any` value, and of schema
    /// containers through recursive `$ref`s.
    pub max_depth: usize,
    /// Most bytes of a free string (then it must close).
    pub max_string: usize,
    /// Most items of an array without `maxItems`.
    pub max_items: usize,
    /// The texts `Literal`s and keys follow.
    pub(crate) tries: Vec<Trie>,
    /// The bounds of `Range` nodes.
    pub(crate) ranges: Vec<NumRange>,
    /// The automata of `Pattern` nodes.
    pub(crate) patterns: Vec<Dfa>,
    /// Texts of control tokens the grammar writes (a call's `<tool_call>`,
    /// a single token in Qwen2.5's vocabulary): those tokens are allowed,
    /// and shown in the text.
    pub markers: Vec<String>,
    /// Each node's depth limit: how deep its values can start and still
    /// be finished (see [`super::feasible`]).
    pub(crate) limits: Vec<u8>,
    /// For each keys trie of an object with depth-limited properties, the
    /// limits in the trie's index order (see [`super::feasible`]).
    pub(crate) key_limits: Vec<Option<RangeMax>>,
}

/// Default limits that make every constrained reply finish.
const MAX_DEPTH: usize = 6;
pub(super) const MAX_STRING: usize = 256;
pub(super) const MAX_ITEMS: usize = 32;
/// Nesting of schema containers reached through recursive `$ref`s.
pub const MAX_REF_DEPTH: usize = 12;

impl Grammar {
    /// A grammar of `nodes` from `root` with the default limits.
    pub(super) fn with_root(nodes: Vec<Node>, root: NodeId, tries: Vec<Trie>) -> Grammar {
        let mut g = Grammar {
            limits: depth_limits(&nodes),
            key_limits: Vec::new(),
            nodes,
            root,
            max_depth: MAX_DEPTH,
            max_string: MAX_STRING,
            max_items: MAX_ITEMS,
            tries,
            ranges: Vec::new(),
            patterns: Vec::new(),
            markers: Vec::new(),
        };
        g.key_limits = key_limits(&g);
        g
    }

    /// `json_object`: any JSON object.
    pub fn any_object() -> Grammar {
        Grammar::with_root(vec![Node::AnyObject], 0, base_tries())
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
    /// deep (none if such a value could not be finished there).
    pub fn starts(&self, id: NodeId, c: u8, depth: usize) -> bool {
        if !self.fits(id, depth) {
            return false;
        }
        match self.node(id) {
            Node::Any => b"{[\"-0123456789tfn".contains(&c),
            Node::Object(_) | Node::AnyObject => c == b'{',
            Node::Array { .. } => c == b'[',
            Node::String | Node::Sized { .. } => c == b'"',
            Node::Number | Node::Integer => c == b'-' || c.is_ascii_digit(),
            Node::Range(r) => {
                let r = &self.ranges[*r];
                r.step(&Default::default(), c).is_some()
            }
            Node::Pattern(_) => c == b'"',
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

/// The tries every grammar starts with ([`BOOL_TRIE`], [`NULL_TRIE`]).
pub(super) fn base_tries() -> Vec<Trie> {
    vec![Trie::new(&["true", "false"]), Trie::new(&["null"])]
}
