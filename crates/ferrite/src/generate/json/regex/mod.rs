//! `pattern`: a simple regular expression (ECMA-262 syntax, as JSON Schema
//! specifies) compiled once per request into a DFA over the bytes of the
//! string's JSON text. A step is one table lookup, whatever the pattern.
//!
//! Supported: literals, `.`, classes `[a-z_]` / `[^...]` (ranges between
//! ASCII characters), `\d \w \s \D \W \S`, escapes (`\.`, `\n`, `\xHH`,
//! `\uHHHH`, ...), groups `(...)`, `(?:...)`, `(?<name>...)`, `|`, the
//! quantifiers `* + ? {n} {n,} {n,m}` (lazy or not: the same strings), and
//! `^` / `$` at the start / end of the pattern or of one of its top-level
//! alternatives. A pattern without `^` may be preceded by anything, one
//! without `$` followed by anything, as JSON Schema's search semantics say.
//! Refused with an error naming the feature: backreferences, lookaround,
//! word boundaries, Unicode properties, ranges between non-ASCII
//! characters, anchors elsewhere.
//!
//! What may be generated is a subset of what matches, never more:
//! - strings are written without escapes, so `"`, `\` and control
//!   characters are never generated;
//! - outside ASCII, `.` and negated classes generate only U+00C0-U+07FF
//!   and U+4000-U+9FFF, and `\D`, `\W`, `\S` (and negated classes holding
//!   them or non-ASCII characters) nothing (validators disagree on which
//!   non-ASCII characters those match);
//! - `\s` generates ASCII spaces only.

mod parse;

use std::collections::{HashMap, VecDeque};

use parse::{parse, Ast};
pub use parse::RegexError;

/// Most NFA states one pattern may take (repetition counts multiply).
const MAX_NFA: usize = 4096;
/// Means no state.
const DEAD: u32 = u32::MAX;
const FAR: u32 = u32::MAX;

/// A byte-level DFA of the JSON string contents a pattern allows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dfa {
    classes: [u8; 256],
    n_classes: usize,
    /// `next[state * n_classes + class]`, `DEAD` when no string goes on.
    next: Vec<u32>,
    accept: Vec<bool>,
    /// Fewest bytes from each state to an accepting one (`FAR`: never).
    dist: Vec<u32>,
}

impl Dfa {
    /// The DFA of `pattern`; `budget` is the DFA states still allowed (it
    /// is charged for this one). The error says what is not supported.
    pub fn compile(pattern: &str, budget: &mut usize) -> Result<Dfa, RegexError> {
        let ast = parse(pattern)?;
        let mut nfa = Nfa::default();
        let start = nfa.state()?;
        let accept = nfa.state()?;
        nfa.build(&ast, start, accept)?;
        let dfa = determinize(&nfa, start, accept, budget)?;
        if dfa.dist[0] == FAR {
            return Err("it matches no string that can be written without JSON escapes".into());
        }
        Ok(dfa)
    }

    /// The state after byte `b` (a byte a JSON string holds unescaped),
    /// if an accepting state can still be reached.
    pub fn step(&self, s: u32, b: u8) -> Option<u32> {
        let t = self.next[s as usize * self.n_classes + self.classes[b as usize] as usize];
        (t != DEAD).then_some(t)
    }

    pub fn is_accept(&self, s: u32) -> bool {
        self.accept[s as usize]
    }

    /// Fewest bytes from `s` to a match.
    pub fn dist(&self, s: u32) -> usize {
        self.dist[s as usize] as usize
    }
}

#[derive(Default)]
struct Nfa {
    eps: Vec<Vec<u32>>,
    /// `(lo, hi, to)` byte-range transitions of each state.
    trans: Vec<Vec<(u8, u8, u32)>>,
}

impl Nfa {
    fn state(&mut self) -> Result<u32, RegexError> {
        if self.eps.len() >= MAX_NFA {
            return Err(format!("it is too large (more than {MAX_NFA} automaton states)").into());
        }
        self.eps.push(Vec::new());
        self.trans.push(Vec::new());
        Ok((self.eps.len() - 1) as u32)
    }

    /// A path of byte ranges from `from` to `to`.
    fn path(&mut self, from: u32, ranges: &[(u8, u8)], to: u32) -> Result<(), RegexError> {
        let mut at = from;
        for (i, &(lo, hi)) in ranges.iter().enumerate() {
            let next = if i + 1 == ranges.len() {
                to
            } else {
                self.state()?
            };
            self.trans[at as usize].push((lo, hi, next));
            at = next;
        }
        Ok(())
    }

    fn build(&mut self, a: &Ast, from: u32, to: u32) -> Result<(), RegexError> {
        match a {
            Ast::Set(s) => {
                let mut b = 0usize;
                while b < 128 {
                    if s.ascii[b] {
                        let start = b;
                        while b + 1 < 128 && s.ascii[b + 1] {
                            b += 1;
                        }
                        self.trans[from as usize].push((start as u8, b as u8, to));
                    }
                    b += 1;
                }
                if s.wide {
                    self.path(from, &[(0xc3, 0xdf), (0x80, 0xbf)], to)?;
                    self.path(from, &[(0xe4, 0xe9), (0x80, 0xbf), (0x80, 0xbf)], to)?;
                }
                for c in &s.extra {
                    let mut buf = [0u8; 4];
                    let ranges: Vec<(u8, u8)> =
                        c.encode_utf8(&mut buf).bytes().map(|b| (b, b)).collect();
                    self.path(from, &ranges, to)?;
                }
            }
            Ast::Concat(items) => {
                let mut at = from;
                for (i, item) in items.iter().enumerate() {
                    let next = if i + 1 == items.len() {
                        to
                    } else {
                        self.state()?
                    };
                    self.build(item, at, next)?;
                    at = next;
                }
                if items.is_empty() {
                    self.eps[from as usize].push(to);
                }
            }
            Ast::Alt(alts) => {
                for x in alts {
                    self.build(x, from, to)?;
                }
            }
            Ast::Repeat(x, min, max) => {
                let mut at = from;
                for _ in 0..*min {
                    let next = self.state()?;
                    self.build(x, at, next)?;
                    at = next;
                }
                match max {
                    None => {
                        // A loop on a fresh state (`at` may be shared with
                        // other alternatives): at -> l -x-> back -> l -> to.
                        let l = self.state()?;
                        let back = self.state()?;
                        self.eps[at as usize].push(l);
                        self.build(x, l, back)?;
                        self.eps[back as usize].push(l);
                        self.eps[l as usize].push(to);
                    }
                    Some(max) => {
                        for _ in *min..*max {
                            self.eps[at as usize].push(to);
                            let next = self.state()?;
                            self.build(x, at, next)?;
                            at = next;
                        }
                        self.eps[at as usize].push(to);
                    }
                }
            }
            Ast::Start | Ast::End => return Err("misplaced anchor".into()),
        }
        Ok(())
    }

    fn closure(&self, set: &mut Vec<u32>) {
        let mut seen = vec![false; self.eps.len()];
        let mut stack = set.clone();
        for &s in set.iter() {
            seen[s as usize] = true;
        }
        while let Some(s) = stack.pop() {
            for &t in &self.eps[s as usize] {
                if !seen[t as usize] {
                    seen[t as usize] = true;
                    set.push(t);
                    stack.push(t);
                }
            }
        }
        set.sort_unstable();
    }
}

/// Whether JSON holds byte `b` unescaped inside a string.
fn plain(b: u8) -> bool {
    b >= 0x20 && b != b'"' && b != b'\\'
}

fn determinize(nfa: &Nfa, start: u32, accept: u32, budget: &mut usize) -> Result<Dfa, RegexError> {
    // Byte classes: bytes no transition (nor JSON) tells apart.
    let mut cut = [false; 257];
    for &b in &[0x20usize, 0x22, 0x23, 0x5c, 0x5d, 0x80] {
        cut[b] = true;
    }
    for t in &nfa.trans {
        for &(lo, hi, _) in t {
            cut[lo as usize] = true;
            cut[hi as usize + 1] = true;
        }
    }
    let mut classes = [0u8; 256];
    let mut reps = Vec::new();
    let mut class = 0usize;
    for b in 0..256 {
        if b > 0 && cut[b] {
            class += 1;
        }
        if reps.len() == class {
            reps.push(b as u8);
        }
        classes[b] = class as u8;
    }
    let n_classes = reps.len();
    let mut first = vec![start];
    nfa.closure(&mut first);
    let mut ids: HashMap<Vec<u32>, u32> = HashMap::new();
    let mut sets = vec![first.clone()];
    ids.insert(first, 0);
    let mut next = Vec::new();
    let mut i = 0;
    while i < sets.len() {
        if sets.len() > *budget {
            return Err("it is too large (its automaton exceeds the schema's state budget)".into());
        }
        for &rep in &reps {
            let mut to: Vec<u32> = Vec::new();
            if plain(rep) {
                for &s in &sets[i] {
                    for &(lo, hi, t) in &nfa.trans[s as usize] {
                        if (lo..=hi).contains(&rep) && !to.contains(&t) {
                            to.push(t);
                        }
                    }
                }
            }
            if to.is_empty() {
                next.push(DEAD);
                continue;
            }
            nfa.closure(&mut to);
            let id = match ids.get(&to) {
                Some(&id) => id,
                None => {
                    let id = sets.len() as u32;
                    ids.insert(to.clone(), id);
                    sets.push(to);
                    id
                }
            };
            next.push(id);
        }
        i += 1;
    }
    *budget -= sets.len();
    let accept: Vec<bool> = sets
        .iter()
        .map(|s| s.binary_search(&accept).is_ok())
        .collect();
    // Distances to a match, breadth first over reversed edges.
    let n = sets.len();
    let mut back: Vec<Vec<u32>> = vec![Vec::new(); n];
    for s in 0..n {
        for c in 0..n_classes {
            let t = next[s * n_classes + c];
            if t != DEAD {
                back[t as usize].push(s as u32);
            }
        }
    }
    let mut dist = vec![FAR; n];
    let mut queue = VecDeque::new();
    for s in 0..n {
        if accept[s] {
            dist[s] = 0;
            queue.push_back(s);
        }
    }
    while let Some(s) = queue.pop_front() {
        for &p in &back[s] {
            if dist[p as usize] == FAR {
                dist[p as usize] = dist[s] + 1;
                queue.push_back(p as usize);
            }
        }
    }
    // Edges into states that cannot reach a match are dead.
    for t in next.iter_mut() {
        if *t != DEAD && dist[*t as usize] == FAR {
            *t = DEAD;
        }
    }
    Ok(Dfa {
        classes,
        n_classes,
        next,
        accept,
        dist,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matches(d: &Dfa, s: &str) -> bool {
        let mut at = 0;
        for b in s.bytes() {
            match d.step(at, b) {
                Some(t) => at = t,
                None => return false,
            }
        }
        d.is_accept(at)
    }

    fn dfa(p: &str) -> Dfa {
        Dfa::compile(p, &mut 10_000).unwrap_or_else(|e| panic!("{p}: {e}"))
    }

    #[test]
    fn anchored_patterns_match_exactly() {
        let d = dfa(r"^[A-Z]{2}-\d{3,4}$");
        for ok in ["AB-123", "ZZ-0000"] {
            assert!(matches(&d, ok), "{ok}");
        }
        for bad in [
            "AB-12", "ab-123", "AB-12345", "xAB-123", "AB-123x", "AB_123",
        ] {
            assert!(!matches(&d, bad), "{bad}");
        }
        assert_eq!(d.dist(0), 6);
        let d = dfa(r"^(cat|dog)s?(?:!|\.)?$");
        for ok in ["cat", "dogs", "cats!", "dog."] {
            assert!(matches(&d, ok), "{ok}");
        }
        assert!(!matches(&d, "cow") && !matches(&d, "cats!!"));
        let d = dfa(r"^a|b$");
        assert!(matches(&d, "a") && matches(&d, "axyz") && matches(&d, "xyzb"));
        assert!(!matches(&d, "xa"));
    }

    #[test]
    fn unanchored_patterns_search() {
        let d = dfa("ab+c");
        assert!(matches(&d, "abc") && matches(&d, "xx abbbc yy"));
        assert!(!matches(&d, "ac") && !matches(&d, "ab c"));
        // `.` and negated classes generate non-ASCII letters too.
        let d = dfa("^.[^0-9]$");
        assert!(matches(&d, "éa") && matches(&d, "中文") && !matches(&d, "a1"));
        let d = dfa(r"^\W$");
        assert!(matches(&d, "-") && !matches(&d, "é") && !matches(&d, "a"));
        let d = dfa(r"^[é\-x]+$");
        assert!(matches(&d, "é-x") && !matches(&d, "e"));
    }

    #[test]
    fn json_escapes_are_never_generated() {
        let d = dfa(r#"^a.*b$"#);
        assert!(d.step(1, b'"').is_none() && d.step(1, b'\\').is_none());
        assert!(d.step(1, b'\n').is_none());
        let err = Dfa::compile(r#"^"$"#, &mut 100).unwrap_err();
        assert!(err.to_string().contains("escapes"), "{err}");
    }

    #[test]
    fn unsupported_features_are_named() {
        for (p, what) in [
            (r"(a)\1", "backreferences"),
            (r"a(?=b)", "lookaround"),
            (r"\bword", "word boundaries"),
            (r"\p{L}", "Unicode property"),
            (r"a^b", "'^' and '$'"),
            (r"[à-é]", "non-ASCII"),
            (r"(ab", "unclosed"),
            (r"*a", "nothing to repeat"),
            (r"a{5,2}", "out of order"),
            (r"(a{1000}){1000}", "too large"),
        ] {
            let err = Dfa::compile(p, &mut 100_000).unwrap_err();
            assert!(err.to_string().contains(what), "{p}: {err}");
        }
        // A large but legal pattern is refused by the state budget.
        let err = Dfa::compile(r"^[ab]*a[ab]{12}$", &mut 1000).unwrap_err();
        assert!(err.to_string().contains("budget"), "{err}");
        // `{` that is no quantifier is a literal.
        assert!(matches(&dfa("^a{b}$"), "a{b}"));
    }

    /// Issue 44: a pattern's nesting is bounded before any recursion over
    /// it (1,000 nested groups overflowed the stack and ended the server),
    /// and quantifiers do not stack (each would nest the tree once more).
    #[test]
    fn deep_nesting_is_refused_not_a_crash() {
        let nested = |n: usize| format!("^{}a{}$", "(".repeat(n), ")".repeat(n));
        assert!(matches(&dfa(&nested(parse::MAX_GROUP_DEPTH)), "a"));
        for n in [parse::MAX_GROUP_DEPTH + 1, 1000, 100_000] {
            let err = Dfa::compile(&nested(n), &mut 100_000).unwrap_err();
            assert!(err.to_string().contains("nests groups deeper than 64"), "{n}: {err}");
        }
        // Unclosed groups count too.
        let err = Dfa::compile(&"(".repeat(100_000), &mut 100_000).unwrap_err();
        assert!(err.to_string().contains("deeper than 64"), "{err}");
        for p in ["a**", "a+*", "a{2}{3}", "(a)?+", &format!("a{}", "*".repeat(100_000))] {
            let err = Dfa::compile(p, &mut 100_000).unwrap_err();
            assert!(err.to_string().contains("nothing to repeat"), "{p}: {err}");
        }
        // A lazy quantifier is still one quantifier; groups may repeat.
        assert!(matches(&dfa("^a+?b*?((c)*)*$"), "aabcc"));
        // Long flat patterns are fine (only the state budget limits them).
        let flat = format!("^{}$", "(a)".repeat(2000));
        assert!(matches(&dfa(&flat), &"a".repeat(2000)));
    }
}
