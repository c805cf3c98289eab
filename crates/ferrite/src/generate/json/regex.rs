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

use std::collections::{HashMap, VecDeque};

/// Why a pattern is refused: the feature or the fault, in words that finish
/// "pattern ... is not supported: ..." (the schema compiler names the
/// keyword and the pattern).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct RegexError(String);

impl From<&str> for RegexError {
    fn from(s: &str) -> Self {
        RegexError(s.to_string())
    }
}

impl From<String> for RegexError {
    fn from(s: String) -> Self {
        RegexError(s)
    }
}

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
        let ast = Parser {
            chars: pattern.chars().collect(),
            at: 0,
        }
        .top()?;
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

    /// States (for budgets).
    pub fn states(&self) -> usize {
        self.accept.len()
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

/// A set of characters: ASCII members, the generated non-ASCII block
/// (see the module notes), and single non-ASCII characters.
#[derive(Clone, Debug)]
struct Set {
    ascii: [bool; 128],
    wide: bool,
    extra: Vec<char>,
}

impl Set {
    fn empty() -> Set {
        Set {
            ascii: [false; 128],
            wide: false,
            extra: Vec::new(),
        }
    }

    fn of(f: impl Fn(u8) -> bool) -> Set {
        let mut s = Set::empty();
        for b in 0..128u8 {
            s.ascii[b as usize] = f(b);
        }
        s
    }

    fn char(c: char) -> Set {
        let mut s = Set::empty();
        s.add(c);
        s
    }

    fn add(&mut self, c: char) {
        if c.is_ascii() {
            self.ascii[c as usize] = true;
        } else {
            self.extra.push(c);
        }
    }
}

#[derive(Clone, Debug)]
enum Ast {
    Set(Set),
    Concat(Vec<Ast>),
    Alt(Vec<Ast>),
    Repeat(Box<Ast>, u32, Option<u32>),
    Start,
    End,
}

struct Parser {
    chars: Vec<char>,
    at: usize,
}

fn is_word(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c)
}

/// Most repetitions a counted quantifier may ask for.
const MAX_COUNT: u32 = 1000;

impl Parser {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.at).copied()
    }

    fn eat(&mut self, c: char) -> bool {
        if self.peek() == Some(c) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    /// The whole pattern: each top-level alternative with its anchors, or
    /// `.*` where it has none.
    fn top(mut self) -> Result<Ast, RegexError> {
        let alt = self.alt()?;
        if self.at < self.chars.len() {
            return Err(format!("unbalanced ')' at character {}", self.at).into());
        }
        let any = || Ast::Repeat(Box::new(Ast::Set(Set::of(|_| true).wide())), 0, None);
        let alts = match alt {
            Ast::Alt(a) => a,
            one => vec![one],
        };
        let mut out = Vec::new();
        for a in alts {
            let mut items = match a {
                Ast::Concat(v) => v,
                one => vec![one],
            };
            let anchored_start = matches!(items.first(), Some(Ast::Start));
            if anchored_start {
                items.remove(0);
            }
            let anchored_end = matches!(items.last(), Some(Ast::End));
            if anchored_end {
                items.pop();
            }
            if !anchored_start {
                items.insert(0, any());
            }
            if !anchored_end {
                items.push(any());
            }
            let body = Ast::Concat(items);
            if has_anchor(&body) {
                return Err(
                    "'^' and '$' are supported only at the start and end of the pattern".into(),
                );
            }
            out.push(body);
        }
        Ok(Ast::Alt(out))
    }

    fn alt(&mut self) -> Result<Ast, RegexError> {
        let mut alts = vec![self.concat()?];
        while self.eat('|') {
            alts.push(self.concat()?);
        }
        Ok(if alts.len() == 1 {
            alts.pop().unwrap_or(Ast::Concat(Vec::new()))
        } else {
            Ast::Alt(alts)
        })
    }

    fn concat(&mut self) -> Result<Ast, RegexError> {
        let mut items = Vec::new();
        while let Some(c) = self.peek() {
            if c == '|' || c == ')' {
                break;
            }
            let atom = self.atom()?;
            let atom = self.quantified(atom)?;
            items.push(atom);
        }
        Ok(Ast::Concat(items))
    }

    fn number(&mut self) -> Option<u32> {
        let start = self.at;
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.at += 1;
        }
        let s: String = self.chars[start..self.at].iter().collect();
        s.parse().ok()
    }

    fn quantified(&mut self, atom: Ast) -> Result<Ast, RegexError> {
        let mut atom = atom;
        loop {
            let (min, max) = match self.peek() {
                Some('*') => (0, None),
                Some('+') => (1, None),
                Some('?') => (0, Some(1)),
                Some('{') => {
                    let save = self.at;
                    self.at += 1;
                    let Some(min) = self.number() else {
                        // Not a quantifier: a literal `{` (Annex B).
                        self.at = save;
                        return Ok(atom);
                    };
                    let max = if self.eat(',') {
                        if self.peek() == Some('}') {
                            None
                        } else {
                            match self.number() {
                                Some(m) => Some(m),
                                None => {
                                    self.at = save;
                                    return Ok(atom);
                                }
                            }
                        }
                    } else {
                        Some(min)
                    };
                    if !self.eat('}') {
                        self.at = save;
                        return Ok(atom);
                    }
                    self.at -= 1;
                    if max.is_some_and(|m| m < min) {
                        return Err(
                            format!("the quantifier {{{min},{max:?}}} is out of order").into()
                        );
                    }
                    if min.max(max.unwrap_or(0)) > MAX_COUNT {
                        return Err(format!("repetition counts above {MAX_COUNT}").into());
                    }
                    (min, max)
                }
                _ => return Ok(atom),
            };
            self.at += 1;
            // A lazy quantifier matches the same strings.
            self.eat('?');
            if matches!(atom, Ast::Start | Ast::End) {
                return Err("a quantifier on '^' or '$'".into());
            }
            atom = Ast::Repeat(Box::new(atom), min, max);
        }
    }

    fn atom(&mut self) -> Result<Ast, RegexError> {
        let c = self.peek().ok_or("unexpected end")?;
        self.at += 1;
        Ok(match c {
            '(' => {
                if self.eat('?') {
                    if self.eat(':') {
                    } else if self.peek() == Some('<')
                        && !matches!(self.chars.get(self.at + 1), Some('=' | '!'))
                    {
                        while let Some(c) = self.peek() {
                            self.at += 1;
                            if c == '>' {
                                break;
                            }
                        }
                    } else {
                        return Err("lookaround assertions ('(?=', '(?!', '(?<=', '(?<!')".into());
                    }
                }
                let inner = self.alt()?;
                if !self.eat(')') {
                    return Err("an unclosed '('".into());
                }
                inner
            }
            '[' => Ast::Set(self.class()?),
            '.' => Ast::Set(Set::of(|b| b != b'\n' && b != b'\r').wide()),
            '^' => Ast::Start,
            '$' => Ast::End,
            '\\' => Ast::Set(self.escape(false)?.0),
            '*' | '+' | '?' => return Err(format!("nothing to repeat before '{c}'").into()),
            ')' => return Err("unbalanced ')'".into()),
            c => Ast::Set(Set::char(c)),
        })
    }

    /// An escape after `\`; whether it was a class escape (`\d`, `\W`, ...).
    fn escape(&mut self, in_class: bool) -> Result<(Set, bool), RegexError> {
        let c = self.peek().ok_or("a trailing '\\'")?;
        self.at += 1;
        let hex = |p: &mut Parser, n: usize| -> Result<char, RegexError> {
            let s: String = p.chars.iter().skip(p.at).take(n).collect();
            p.at += n;
            u32::from_str_radix(&s, 16)
                .ok()
                .filter(|_| s.len() == n)
                .and_then(char::from_u32)
                .ok_or_else(|| format!("a bad \\x / \\u escape '{s}'").into())
        };
        let set = match c {
            'd' => return Ok((Set::of(|b| b.is_ascii_digit()), true)),
            'D' => return Ok((Set::of(|b| !b.is_ascii_digit()), true)),
            'w' => return Ok((Set::of(is_word), true)),
            'W' => return Ok((Set::of(|b| !is_word(b)), true)),
            's' => return Ok((Set::of(is_space), true)),
            'S' => return Ok((Set::of(|b| !is_space(b)), true)),
            'n' => Set::char('\n'),
            't' => Set::char('\t'),
            'r' => Set::char('\r'),
            'f' => Set::char('\x0c'),
            'v' => Set::char('\x0b'),
            'b' if in_class => Set::char('\x08'),
            '0' if !self.peek().is_some_and(|c| c.is_ascii_digit()) => Set::char('\0'),
            'x' => Set::char(hex(self, 2)?),
            'u' => Set::char(hex(self, 4)?),
            'b' | 'B' => return Err("word boundaries ('\\b', '\\B')".into()),
            '1'..='9' | 'k' => return Err("backreferences".into()),
            'p' | 'P' => return Err("Unicode property escapes ('\\p{...}')".into()),
            c if c.is_ascii_alphanumeric() => return Err(format!("the escape '\\{c}'").into()),
            c => Set::char(c),
        };
        Ok((set, false))
    }

    fn class(&mut self) -> Result<Set, RegexError> {
        let negated = self.eat('^');
        let mut set = Set::empty();
        let mut narrow = false;
        let mut first = true;
        loop {
            let c = self.peek().ok_or("an unclosed '['")?;
            if c == ']' && !first {
                self.at += 1;
                break;
            }
            first = false;
            self.at += 1;
            let (lo, class_escape) = if c == '\\' {
                self.escape(true)?
            } else {
                (Set::char(c), false)
            };
            if class_escape {
                narrow = true;
                merge(&mut set, &lo);
                continue;
            }
            let lo_char = single(&lo);
            // A range `a-z` (a `-` first or last is itself).
            if self.peek() == Some('-') && self.chars.get(self.at + 1).is_some_and(|&n| n != ']') {
                self.at += 1;
                let c2 = self.peek().ok_or("an unclosed '['")?;
                self.at += 1;
                let (hi, class_escape) = if c2 == '\\' {
                    self.escape(true)?
                } else {
                    (Set::char(c2), false)
                };
                let (Some(a), Some(b), false) = (lo_char, single(&hi), class_escape) else {
                    return Err("a class range with a class escape as an end".into());
                };
                if a > b {
                    return Err(format!("the class range '{a}-{b}' is out of order").into());
                }
                if !b.is_ascii() {
                    return Err("class ranges between non-ASCII characters".into());
                }
                for x in a as u8..=b as u8 {
                    set.ascii[x as usize] = true;
                }
                continue;
            }
            merge(&mut set, &lo);
        }
        if negated {
            narrow |= !set.extra.is_empty();
            let mut out = Set::of(|b| !set.ascii[b as usize]);
            out.wide = !narrow;
            return Ok(out);
        }
        Ok(set)
    }
}

fn merge(into: &mut Set, from: &Set) {
    for b in 0..128 {
        into.ascii[b] |= from.ascii[b];
    }
    into.wide |= from.wide;
    into.extra.extend_from_slice(&from.extra);
}

/// The one character of a set made of one, if it is.
fn single(s: &Set) -> Option<char> {
    let ascii: Vec<usize> = (0..128).filter(|&b| s.ascii[b]).collect();
    match (ascii.as_slice(), s.extra.as_slice(), s.wide) {
        ([b], [], false) => Some(*b as u8 as char),
        ([], [c], false) => Some(*c),
        _ => None,
    }
}

impl Set {
    fn wide(mut self) -> Set {
        self.wide = true;
        self
    }
}

fn has_anchor(a: &Ast) -> bool {
    match a {
        Ast::Start | Ast::End => true,
        Ast::Set(_) => false,
        Ast::Concat(v) | Ast::Alt(v) => v.iter().any(has_anchor),
        Ast::Repeat(x, ..) => has_anchor(x),
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
}
