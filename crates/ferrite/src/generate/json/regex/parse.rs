//! A `pattern`'s syntax: the parser from its ECMA-262 text to an [`Ast`]
//! of character sets, and the error naming what is refused.

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

/// The pattern's tree, each top-level alternative anchored (or `.*` where
/// it has no anchor).
pub(super) fn parse(pattern: &str) -> Result<Ast, RegexError> {
    Parser {
        chars: pattern.chars().collect(),
        at: 0,
        depth: 0,
    }
    .top()
}

/// Most groups a pattern may nest inside one another. The parser and
/// every walk over its tree recurse once per level, so this bounds their
/// stack use whatever the pattern's length.
pub const MAX_GROUP_DEPTH: usize = 64;


/// A set of characters: ASCII members, the generated non-ASCII block
/// (see the module notes), and single non-ASCII characters.
#[derive(Clone, Debug)]
pub(super) struct Set {
    pub(super) ascii: [bool; 128],
    /// The generated non-ASCII block.
    pub(super) wide: bool,
    pub(super) extra: Vec<char>,
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

/// A parsed pattern.
#[derive(Clone, Debug)]
pub(super) enum Ast {
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
    /// Groups open at `at`.
    depth: usize,
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

    /// `atom` with its quantifier, if one follows. One only: as in
    /// ECMA-262, a quantifier cannot itself be repeated (`a**`, `a{2}{3}`),
    /// which also keeps the tree's depth within the groups' nesting.
    fn quantified(&mut self, atom: Ast) -> Result<Ast, RegexError> {
        let mut atom = atom;
        let mut repeated = false;
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
            if repeated {
                return Err(format!(
                    "nothing to repeat before '{}' (a quantifier after a quantifier)",
                    self.chars[self.at]
                )
                .into());
            }
            repeated = true;
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
                self.depth += 1;
                if self.depth > MAX_GROUP_DEPTH {
                    return Err(format!(
                        "it nests groups deeper than {MAX_GROUP_DEPTH} (at character {})",
                        self.at - 1
                    )
                    .into());
                }
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
                self.depth -= 1;
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
