//! Objects in a [`JsonState`]: after `{`, the keys (declared ones through
//! the object's keys trie, in declaration order from the first that may
//! still come; others only when `additionalProperties` allows them and no
//! required property is left), the colon, the value, and `,` or `}` (only
//! once every required property came).

use super::{Frame, JsonState, ObjPhase};
use crate::generate::json::grammar::{Grammar, Node, NodeId, Obj};
use crate::generate::json::string::FreeStr;
use crate::generate::json::trie::TrieNode;

impl JsonState {
    /// Feeds byte `c` to the object frame on top: `Some(ok)` once the byte
    /// is judged, `None` when it starts a declared key (a key frame is
    /// pushed, which takes the byte next).
    pub(super) fn feed_object(&mut self, g: &Grammar, c: u8) -> Option<bool> {
        let Some(Frame::Object {
            node,
            phase,
            prop,
            value,
            depth,
        }) = self.stack.last_mut()
        else {
            return Some(false);
        };
        let fixed = match (*node != NodeId::MAX).then(|| g.node(*node)) {
            Some(Node::Object(o)) => Some(o),
            _ => None,
        };
        let (obj_node, depth) = (*node, *depth);
        match (*phase, fixed) {
            (ObjPhase::Open, Some(o)) if c == b'}' => {
                let ok = o.next_required[0] == o.props.len();
                Some(self.close(ok))
            }
            (ObjPhase::Open | ObjPhase::Key, Some(o)) => {
                // A key only if one can come here (none may, say, in
                // `"properties": {}`: then only `}`).
                if !key_may_come(g, o, *prop, depth) {
                    return Some(false);
                }
                *phase = ObjPhase::Colon;
                self.stack.push(Frame::Key {
                    obj: obj_node,
                    at: Some(0),
                    len: None,
                    escaped: false,
                });
                None
            }
            (ObjPhase::Open, None) if c == b'}' => Some(self.close(true)),
            (ObjPhase::Open | ObjPhase::Key, None) => {
                if c != b'"' {
                    return Some(false);
                }
                *phase = ObjPhase::Colon;
                self.stack.push(Frame::Str(FreeStr::default()));
                Some(true)
            }
            (ObjPhase::Colon, _) => {
                if c != b':' {
                    return Some(false);
                }
                *phase = ObjPhase::Next;
                let value = *value;
                self.stack.push(Frame::Value {
                    node: value,
                    depth: depth + 1,
                });
                Some(true)
            }
            (ObjPhase::Next, Some(o)) => {
                let more = key_may_come(g, o, *prop, depth);
                Some(match c {
                    b',' if more => {
                        *phase = ObjPhase::Key;
                        true
                    }
                    b'}' => {
                        let ok = o.next_required[*prop] == o.props.len();
                        self.close(ok)
                    }
                    _ => false,
                })
            }
            (ObjPhase::Next, None) => Some(match c {
                b',' => {
                    *phase = ObjPhase::Key;
                    true
                }
                b'}' => self.close(true),
                _ => false,
            }),
        }
    }

    /// Feeds byte `c` to the key on top (of object node `obj`, `at` in its
    /// keys' trie, `len` bytes after its opening quote, `escaped` if it
    /// holds a backslash). A byte is taken only if the key can still end
    /// as one that may come here and whose value can be finished.
    pub(super) fn feed_key(
        &mut self,
        g: &Grammar,
        obj: NodeId,
        at: Option<TrieNode>,
        len: Option<u16>,
        escaped: bool,
        c: u8,
    ) -> bool {
        let Node::Object(o) = g.node(obj) else {
            return false;
        };
        let t = &g.tries[o.keys];
        let Some(n) = len else {
            if c != b'"' {
                return false;
            }
            let at = at.and_then(|a| t.step(a, c));
            self.set_key(at, 0, false);
            return true;
        };
        let Some(&Frame::Object {
            prop: lo, depth, ..
        }) = self.stack.iter().rev().nth(1)
        else {
            return false;
        };
        let last = o.props.len().wrapping_sub(1);
        let hi = o.next_required.get(lo).map_or(0, |&h| h.min(last));
        let extra = extra_fits(g, o, lo, depth);
        let next = at.and_then(|a| t.step(a, c));
        let declared = lo < o.props.len()
            && next.is_some_and(|m| g.key_fits(o.keys, m, lo, hi, depth + 1));
        // The keys' texts are JSON strings: a quote that does not end one
        // is escaped, and one that does leads to a leaf.
        let inner_quote = next.is_some_and(|m| !t.is_leaf(m));
        if c == b'"' && !inner_quote {
            // A declared key that may come here, or (none of them) another.
            let chosen = match next {
                Some(m) if declared => t.value(m),
                Some(_) => return false,
                None if extra && n > 0 && !escaped => None,
                None => return false,
            };
            self.stack.pop();
            let Some(Frame::Object { prop, value, .. }) = self.stack.last_mut() else {
                return false;
            };
            match chosen {
                Some(i) => {
                    *prop = i + 1;
                    *value = o.props[i].node;
                }
                None => {
                    *prop = o.props.len();
                    *value = o.extra.unwrap_or(NodeId::MAX);
                }
            }
            return true;
        }
        if !declared {
            // Another key: printable ASCII without escapes, short enough,
            // and not left able to end only as a declared key that may
            // not come here (then it needs room for one more byte).
            let room = usize::from(n) + 1 < g.max_string;
            let closes_declared = next.and_then(|m| t.step(m, b'"')).is_some();
            let more_room = usize::from(n) + 2 < g.max_string;
            if !extra
                || escaped
                || !(0x20..0x80).contains(&c)
                || c == b'\\'
                || c == b'"'
                || !room
                || (closes_declared && !more_room)
            {
                return false;
            }
        }
        self.set_key(next, n + 1, escaped || c == b'\\');
        true
    }

    fn set_key(&mut self, to: Option<TrieNode>, n: u16, has_backslash: bool) {
        if let Some(Frame::Key {
            at, len, escaped, ..
        }) = self.stack.last_mut()
        {
            *at = to;
            *len = Some(n);
            *escaped = has_backslash;
        }
    }
}

/// Whether a key may come in object `o` (at `depth`) when the declared
/// properties from `prop` on are still to come: a declared one up to the
/// next required one whose value fits a level deeper, or another key.
fn key_may_come(g: &Grammar, o: &Obj, prop: usize, depth: usize) -> bool {
    let last = o.props.len().wrapping_sub(1);
    let declared = prop < o.props.len() && {
        let hi = o.next_required[prop].min(last);
        g.key_fits(o.keys, 0, prop, hi, depth + 1)
    };
    declared || extra_fits(g, o, prop, depth)
}

/// Whether a key other than the declared ones may come in object `o` (at
/// `depth`) at `prop`, its value fitting a level deeper.
fn extra_fits(g: &Grammar, o: &Obj, prop: usize, depth: usize) -> bool {
    extra_allowed(o, prop) && o.extra.is_some_and(|e| g.fits(e, depth + 1))
}

/// Whether keys other than the declared ones may come when the declared
/// properties from `prop` on are still to come: none of those is required.
fn extra_allowed(o: &Obj, prop: usize) -> bool {
    o.extra.is_some() && o.next_required.get(prop) == Some(&o.props.len())
}
