//! A byte-at-a-time recognizer of the JSON texts a [`Grammar`] allows: a
//! stack of frames (object, array, string, number, literal choice). It
//! answers "may this byte come next?" by feeding a clone, which is how the
//! token mask is built: a token is allowed when all its bytes feed.
//! Whitespace between tokens is allowed in short runs only, and free
//! strings and arrays have length caps, so a constrained reply always
//! reaches the end of its value. Objects (keys, required and extra
//! properties) are fed in `object.rs`.

use super::grammar::{Grammar, Node, NodeId, BOOL_TRIE, MAX_REF_DEPTH, NULL_TRIE};
use super::number::{FreeNum, NumStep, NumText};
use super::string::{FreeStr, StrStep};
use super::trie::TrieNode;

mod object;

/// Most whitespace bytes in a row.
const MAX_WS: u8 = 8;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ObjPhase {
    /// After `{`.
    Open,
    /// Before a key (after `,`).
    Key,
    Colon,
    /// After a value: `,` or `}`.
    Next,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ArrPhase {
    Open,
    Item,
    Next,
}

#[derive(Clone, Copy, Debug)]
enum Frame {
    /// A value of this node comes next.
    Value { node: NodeId, depth: usize },
    /// Inside an object; `prop` is the first declared property that may
    /// still come, `value` the node of the value after the current key.
    Object {
        node: NodeId,
        phase: ObjPhase,
        prop: usize,
        value: NodeId,
        depth: usize,
    },
    /// A key of object node `obj` (see [`Obj`](super::grammar::Obj)):
    /// `at` is where it is in the declared keys' trie (`None`: it is none
    /// of them), `len` its bytes after the opening quote (`None` before
    /// it), `escaped` whether it holds a backslash (then it can only be a
    /// declared key: other keys are written without escapes).
    Key {
        obj: NodeId,
        at: Option<TrieNode>,
        len: Option<u16>,
        escaped: bool,
    },
    /// A number within `ranges[range]`.
    Range { range: u32, text: NumText },
    /// A string of `patterns[dfa]`, in its state `at`, `len` bytes long.
    Pat { dfa: u32, at: u32, len: u16 },
    Array {
        item: NodeId,
        phase: ArrPhase,
        count: usize,
        min: usize,
        max: usize,
        depth: usize,
    },
    /// Inside a string (after the opening quote).
    Str(FreeStr),
    /// A number without bounds.
    Num(FreeNum),
    /// One of the texts of trie `tries[trie]`, matched so far up to its
    /// node `at`.
    Choice { trie: usize, at: TrieNode },
    /// A function's name (trie `tries[trie]`, up to node `at`) in the
    /// calls of node `calls`; once complete, the arguments slot below the
    /// next frame becomes that function's arguments.
    Name {
        trie: usize,
        at: TrieNode,
        calls: NodeId,
    },
    /// Where the arguments of the function being named go.
    ArgsSlot,
    /// After a call of node `calls`: the end, or (if `left` > 0) another.
    MoreCalls { calls: NodeId, left: usize },
}

/// Where a reply is in its JSON value.
#[derive(Debug)]
pub struct JsonState {
    stack: Vec<Frame>,
    ws: u8,
}

impl Clone for JsonState {
    fn clone(&self) -> Self {
        JsonState {
            stack: self.stack.clone(),
            ws: self.ws,
        }
    }

    /// Reuses the stack's allocation (the mask clones a state per trie
    /// node it visits).
    fn clone_from(&mut self, source: &Self) {
        self.stack.clone_from(&source.stack);
        self.ws = source.ws;
    }
}

impl JsonState {
    /// Before the first byte of a value of `g`.
    pub fn new(g: &Grammar) -> JsonState {
        let mut s = JsonState {
            stack: Vec::new(),
            ws: 0,
        };
        match g.node(g.root) {
            // Calls start with their fixed text (no leading whitespace).
            Node::Calls(calls) => {
                let (open, more) = (calls.open, calls.more);
                s.push_call(g, g.root, open, more);
            }
            _ => s.stack.push(Frame::Value {
                node: g.root,
                depth: 0,
            }),
        }
        s
    }

    /// The value is complete: only the end of generation may follow.
    pub fn is_done(&self) -> bool {
        self.stack.is_empty()
    }

    /// The text may end here (it is complete, or is complete function
    /// calls that may be followed by another).
    pub fn can_end(&self) -> bool {
        matches!(self.stack.as_slice(), [] | [Frame::MoreCalls { .. }])
    }

    /// Pushes the frames of one function call of `calls` (node `id`):
    /// `first` is the fixed text it starts with, if any.
    fn push_call(&mut self, g: &Grammar, id: NodeId, first: Option<usize>, left: usize) {
        let Node::Calls(calls) = g.node(id) else {
            return;
        };
        let choice = |trie| Frame::Choice { trie, at: 0 };
        self.stack.push(Frame::MoreCalls { calls: id, left });
        self.stack.push(choice(calls.tail));
        self.stack.push(Frame::ArgsSlot);
        self.stack.push(choice(calls.middle));
        self.stack.push(Frame::Name {
            trie: calls.names,
            at: 0,
            calls: id,
        });
        self.stack.push(choice(calls.head));
        if let Some(t) = first {
            self.stack.push(choice(t));
        }
    }

    /// Inside a `pattern` string: whether `bytes` (none of them a quote)
    /// may come next, judged on the automaton alone.
    pub fn pattern_accepts(&self, g: &Grammar, bytes: &[u8]) -> Option<bool> {
        let Some(Frame::Pat { dfa, at, len }) = self.stack.last() else {
            return None;
        };
        if bytes.contains(&b'"') {
            return None;
        }
        let d = &g.patterns[*dfa as usize];
        let mut s = *at;
        for &b in bytes {
            match d.step(s, b) {
                Some(t) => s = t,
                None => return Some(false),
            }
        }
        Some(usize::from(*len) + bytes.len() + d.dist(s) <= g.max_string)
    }

    /// Inside a string, not after a backslash: how many more bytes it may
    /// take. (Plain bytes there need no feeding to be judged.)
    pub fn string_room(&self, g: &Grammar) -> Option<usize> {
        match self.stack.last() {
            Some(Frame::Str(s)) => s.room(g.max_string),
            _ => None,
        }
    }

    /// Feeds every byte of `bytes`; false (state then undefined) if one
    /// may not come next.
    pub fn feed_all(&mut self, g: &Grammar, bytes: &[u8]) -> bool {
        bytes.iter().all(|&b| self.feed(g, b))
    }

    fn ws_ok(&mut self, c: u8) -> Option<bool> {
        if matches!(c, b' ' | b'\n' | b'\t' | b'\r') {
            if self.ws < MAX_WS {
                self.ws += 1;
                return Some(true);
            }
            return Some(false);
        }
        None
    }

    /// Feeds one byte; false if it may not come next.
    pub fn feed(&mut self, g: &Grammar, c: u8) -> bool {
        loop {
            let Some(top) = self.stack.last_mut() else {
                return false;
            };
            let ws_allowed = matches!(
                top,
                Frame::Value { .. } | Frame::Object { .. } | Frame::Array { .. }
            );
            if ws_allowed {
                if let Some(ok) = self.ws_ok(c) {
                    return ok;
                }
                self.ws = 0;
            }
            let top = self.stack.last_mut().expect("checked above");
            match top {
                Frame::Value { node, depth } => {
                    let (node, depth) = (*node, *depth);
                    return self.start_value(g, node, depth, c);
                }
                Frame::Object { .. } => {
                    if let Some(ok) = self.feed_object(g, c) {
                        return ok;
                    }
                }
                Frame::Key {
                    obj,
                    at,
                    len,
                    escaped,
                } => {
                    let (obj, at, len, escaped) = (*obj, *at, *len, *escaped);
                    return self.feed_key(g, obj, at, len, escaped, c);
                }
                Frame::Range { range, text } => {
                    let r = &g.ranges[*range as usize];
                    match r.step(text, c) {
                        Some(t) => {
                            *text = t;
                            return true;
                        }
                        None if r.can_end(text) => {
                            // The number ended; the byte belongs to what follows.
                            self.stack.pop();
                        }
                        None => return false,
                    }
                }
                Frame::Pat { dfa, at, len } => {
                    let d = &g.patterns[*dfa as usize];
                    if c == b'"' {
                        let ok = d.is_accept(*at);
                        return self.close(ok);
                    }
                    let Some(t) = d.step(*at, c) else {
                        return false;
                    };
                    if usize::from(*len) + 1 + d.dist(t) > g.max_string {
                        return false;
                    }
                    *at = t;
                    *len += 1;
                    return true;
                }
                Frame::Array {
                    item,
                    phase,
                    count,
                    min,
                    max,
                    depth,
                } => {
                    let (item, depth) = (*item, *depth);
                    match *phase {
                        ArrPhase::Open if c == b']' => {
                            let ok = *min == 0;
                            return self.close(ok);
                        }
                        ArrPhase::Open | ArrPhase::Item => {
                            // An item only if it can be finished there.
                            if *count >= *max || !g.fits(item, depth + 1) {
                                return false;
                            }
                            *count += 1;
                            *phase = ArrPhase::Next;
                            self.stack.push(Frame::Value {
                                node: item,
                                depth: depth + 1,
                            });
                        }
                        ArrPhase::Next => {
                            return match c {
                                b',' if *count < *max && g.fits(item, depth + 1) => {
                                    *phase = ArrPhase::Item;
                                    true
                                }
                                b']' => {
                                    let ok = *count >= *min;
                                    self.close(ok)
                                }
                                _ => false,
                            };
                        }
                    }
                }
                Frame::Str(s) => {
                    return match s.step(c, g.max_string) {
                        StrStep::Took => true,
                        StrStep::Closed => self.close(true),
                        StrStep::Refused => false,
                    };
                }
                Frame::Num(num) => match num.step(c) {
                    NumStep::Took => return true,
                    // The number ended; the byte belongs to what follows.
                    NumStep::Ended => {
                        self.stack.pop();
                    }
                    NumStep::Refused => return false,
                },
                Frame::Choice { trie, at } => {
                    let t = &g.tries[*trie];
                    match t.step(*at, c) {
                        Some(next) => {
                            *at = next;
                            if t.is_leaf(next) {
                                self.stack.pop();
                            }
                            return true;
                        }
                        None if t.is_terminal(*at) => {
                            // A complete text ended; the byte follows it.
                            self.stack.pop();
                        }
                        None => return false,
                    }
                }
                Frame::Name { trie, at, calls } => {
                    let t = &g.tries[*trie];
                    let Some(next) = t.step(*at, c) else {
                        return false;
                    };
                    *at = next;
                    if t.is_leaf(next) {
                        let calls = *calls;
                        let function = t.value(next);
                        self.stack.pop();
                        // Below the `, "arguments": ` text: the slot.
                        let slot = self.stack.len().wrapping_sub(2);
                        if let (Some(f), Node::Calls(cl), Some(frame)) =
                            (function, g.node(calls), self.stack.get_mut(slot))
                        {
                            *frame = Frame::Value {
                                node: cl.args[f],
                                depth: 1,
                            };
                        }
                    }
                    return true;
                }
                Frame::ArgsSlot => return false,
                Frame::MoreCalls { calls, left } => {
                    let (calls, left) = (*calls, *left);
                    if left == 0 {
                        return false;
                    }
                    let Node::Calls(cl) = g.node(calls) else {
                        return false;
                    };
                    let next = cl.next;
                    self.stack.pop();
                    self.push_call(g, calls, Some(next), left - 1);
                }
            }
        }
    }

    /// Pops a finished container or string if `ok`.
    fn close(&mut self, ok: bool) -> bool {
        if ok {
            self.stack.pop();
        }
        ok
    }

    /// The first byte of a value of `node` (`NodeId::MAX`: any value).
    fn start_value(&mut self, g: &Grammar, node: NodeId, depth: usize, c: u8) -> bool {
        let any = node == NodeId::MAX || *g.node(node) == Node::Any;
        let kind = if any {
            match c {
                b'{' if depth < g.max_depth => &Node::AnyObject,
                b'[' if depth < g.max_depth => &Node::Any,
                b'"' => &Node::String,
                b'-' | b'0'..=b'9' => &Node::Number,
                b't' | b'f' => &Node::Boolean,
                b'n' => &Node::Null,
                _ => return false,
            }
        } else {
            g.node(node)
        };
        // Only a value that can be finished here: past the nesting bound
        // (recursive `$ref`s), no object may open (see `feasible`) and
        // arrays must stay empty.
        if !any && !g.fits(node, depth) {
            return false;
        }
        let deep = !any && depth >= MAX_REF_DEPTH;
        self.stack.pop();
        let frame = match kind {
            Node::Any => Frame::Array {
                item: NodeId::MAX,
                phase: ArrPhase::Open,
                count: 0,
                min: 0,
                max: g.max_items,
                depth,
            },
            Node::Object(_) | Node::AnyObject => Frame::Object {
                node: if any { usize::MAX } else { node },
                phase: ObjPhase::Open,
                prop: 0,
                value: NodeId::MAX,
                depth,
            },
            Node::Pattern(p) => Frame::Pat {
                dfa: *p as u32,
                at: 0,
                len: 0,
            },
            Node::Range(r) => {
                self.stack.push(Frame::Range {
                    range: *r as u32,
                    text: NumText::default(),
                });
                return self.feed(g, c);
            }
            Node::Array { item, min, max } => Frame::Array {
                item: *item,
                phase: ArrPhase::Open,
                count: 0,
                min: *min,
                max: if deep { 0 } else { *max },
                depth,
            },
            Node::String => Frame::Str(FreeStr::default()),
            Node::Sized { min, max } => Frame::Str(FreeStr::sized(*min, *max)),
            Node::Number | Node::Integer => {
                self.stack
                    .push(Frame::Num(FreeNum::new(*kind == Node::Integer)));
                return self.feed(g, c);
            }
            Node::Boolean | Node::Null | Node::Literal(_) => {
                let trie = match kind {
                    Node::Boolean => BOOL_TRIE,
                    Node::Null => NULL_TRIE,
                    Node::Literal(t) => *t,
                    _ => unreachable!("matched above"),
                };
                self.stack.push(Frame::Choice { trie, at: 0 });
                return self.feed(g, c);
            }
            Node::Union(members) => {
                let Some(&m) = members.iter().find(|&&m| g.starts(m, c, depth)) else {
                    return false;
                };
                self.stack.push(Frame::Value { node: m, depth });
                return self.feed(g, c);
            }
            Node::Calls(calls) => {
                let (open, more) = (calls.open, calls.more);
                self.push_call(g, node, open, more);
                return self.feed(g, c);
            }
            // `g.node` resolves references.
            Node::Ref(_) => return false,
        };
        let opener = match frame {
            Frame::Object { .. } => b'{',
            Frame::Array { .. } => b'[',
            _ => b'"',
        };
        self.stack.push(frame);
        c == opener
    }
}
