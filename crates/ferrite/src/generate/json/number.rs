//! Numbers with bounds (`minimum`, `maximum`, `exclusiveMinimum`,
//! `exclusiveMaximum`), for integers and floats, enforced digit by digit:
//! a byte is allowed only when some number that starts with the text so
//! far lies within the bounds, so a reply can always finish in range.
//! Numbers without bounds (`FreeNum`) follow JSON's grammar, each part
//! within a digit cap.
//!
//! What is exact and what is not:
//! - A bounded number is written as plain decimal, without an exponent,
//!   with at most [`MAX_DIGITS`] digits in all (integer and fraction
//!   parts). That restricts what may be written, never what is valid.
//! - The bounds are compared with the text's exact decimal value. A bound
//!   is read from its shortest decimal form and rounded inward to
//!   `SCALE` fraction digits when it has more.
//! - A validator reads the text as an `f64`. Because rounding to `f64`
//!   keeps order, a text `>=` a bound's decimal reads as `>=` the bound.
//!   Because two different decimals of at most 15 significant digits never
//!   read as the same `f64`, a text strictly beyond an exclusive bound
//!   reads strictly beyond it too.
//! - Each step is one walk over at most 16 candidate lengths: the cost per
//!   byte does not depend on the bounds.

use serde_json::{Map, Value};

use crate::Error;

/// Most digits of a bounded number (integer and fraction parts together):
/// 15 significant digits always survive a round trip through `f64`.
pub const MAX_DIGITS: u8 = 15;
/// Fraction digits of the fixed-point form bounds are kept in.
const SCALE: u32 = 20;
/// Bounds beyond this (in units of `10^-SCALE`) are as good as none: no
/// number of [`MAX_DIGITS`] digits reaches them.
const FAR: i128 = 10i128.pow(15 + SCALE);

/// Where a number's text is (bounded numbers use the phases up to `Frac`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
enum Phase {
    #[default]
    Start,
    Minus,
    Zero,
    Int,
    Dot,
    Frac,
    E,
    ESign,
    Exp,
}

/// Most digits in each part (integer, fraction) of a number without
/// bounds.
const MAX_PART_DIGITS: u8 = 15;
/// Most digits of its exponent: two, so that every number written reads
/// as a finite `f64` (`1e999` overflows, and serde_json refuses it).
const MAX_EXP_DIGITS: u8 = 2;

/// A number without bounds read so far: any JSON number within the digit
/// caps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct FreeNum {
    int_only: bool,
    phase: Phase,
    /// Digits so far in the current part.
    digits: u8,
}

/// What a byte does to a [`FreeNum`].
pub(super) enum NumStep {
    /// It continues the number.
    Took,
    /// The number was complete and ended before it: the byte belongs to
    /// what follows.
    Ended,
    /// It may not come next.
    Refused,
}

impl FreeNum {
    /// Before the first byte of an integer (`int_only`) or a number.
    pub(super) fn new(int_only: bool) -> FreeNum {
        FreeNum {
            int_only,
            phase: Phase::Start,
            digits: 0,
        }
    }

    /// Feeds byte `c`.
    pub(super) fn step(&mut self, c: u8) -> NumStep {
        use Phase as P;
        let digit = c.is_ascii_digit();
        let more = self.digits < MAX_PART_DIGITS;
        let next = match (self.phase, c) {
            (P::Start, b'-') => Some(P::Minus),
            (P::Start | P::Minus, b'0') => Some(P::Zero),
            (P::Start | P::Minus, _) if digit => Some(P::Int),
            (P::Int, _) if digit && more => Some(P::Int),
            (P::Zero | P::Int, b'.') if !self.int_only => Some(P::Dot),
            (P::Dot | P::Frac, _) if digit && more => Some(P::Frac),
            (P::Zero | P::Int | P::Frac, b'e' | b'E') if !self.int_only => Some(P::E),
            (P::E, b'+' | b'-') => Some(P::ESign),
            (P::E | P::ESign, _) if digit => Some(P::Exp),
            (P::Exp, _) if digit && self.digits < MAX_EXP_DIGITS => Some(P::Exp),
            _ => None,
        };
        match next {
            Some(p) => {
                self.digits = if p == self.phase {
                    self.digits + 1
                } else {
                    u8::from(digit)
                };
                self.phase = p;
                NumStep::Took
            }
            None if matches!(self.phase, P::Zero | P::Int | P::Frac | P::Exp) => NumStep::Ended,
            None => NumStep::Refused,
        }
    }
}

/// The closed range a bounded number must lie in, in units of
/// `10^-SCALE`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NumRange {
    pub int_only: bool,
    lo: i128,
    hi: i128,
}

/// A bounded number read so far.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct NumText {
    neg: bool,
    /// The digits so far, as one integer.
    mant: i64,
    /// Digits so far.
    digits: u8,
    /// Digits after the point.
    frac: u8,
    phase: Phase,
}

fn pow10(n: u32) -> i128 {
    10i128.pow(n)
}

fn div_floor(a: i128, b: i128) -> i128 {
    let q = a / b;
    if a % b != 0 && (a < 0) != (b < 0) {
        q - 1
    } else {
        q
    }
}

fn div_ceil(a: i128, b: i128) -> i128 {
    -div_floor(-a, b)
}

/// `v` (a JSON number) in units of `10^-SCALE`, rounded up (`up`) or
/// down when it has more fraction digits, clamped to `±FAR`; and whether
/// it was exact.
fn fixed(v: &Value, up: bool) -> Option<(i128, bool)> {
    let f = v.as_f64()?;
    if !f.is_finite() {
        return None;
    }
    if f.abs() >= 1e16 {
        return Some((if f > 0.0 { FAR } else { -FAR }, false));
    }
    // The shortest decimal that reads as `f` (what the client wrote).
    let text = v.to_string();
    let (mantissa, exp) = match text.split_once(['e', 'E']) {
        Some((m, e)) => (m, e.parse::<i32>().ok()?),
        None => (text.as_str(), 0),
    };
    let neg = mantissa.starts_with('-');
    let mantissa = mantissa.trim_start_matches('-');
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits: String = format!("{int}{frac}");
    // value = digits * 10^(exp - frac.len())
    let shift = exp - frac.len() as i32 + SCALE as i32;
    let mut n: i128 = 0;
    for d in digits.bytes() {
        n = n.checked_mul(10)?.checked_add(i128::from(d - b'0'))?;
    }
    let (mut out, exact) = if shift >= 0 {
        (n.checked_mul(10i128.checked_pow(shift as u32)?)?, true)
    } else if shift < -38 {
        (0, n == 0)
    } else {
        let p = pow10((-shift) as u32);
        (n / p, n % p == 0)
    };
    if neg {
        out = -out;
    }
    // Truncation went toward zero: round the other way when asked.
    if !exact {
        if up && !neg {
            out += 1;
        } else if !up && neg {
            out -= 1;
        }
    }
    Some((out.clamp(-FAR, FAR), exact))
}

impl NumRange {
    /// The range of a schema's bounds, `None` when it has none. `int_only`
    /// for `type: integer`. The error names a bound that is not a number
    /// and a range no number of at most [`MAX_DIGITS`] digits meets.
    pub fn from_schema(obj: &Map<String, Value>, int_only: bool) -> Result<Option<Self>, Error> {
        let get = |k: &str, up: bool| -> Result<Option<(i128, bool)>, Error> {
            obj.get(k)
                .map(|v| fixed(v, up).ok_or_else(|| Error::Input(format!("{k} must be a number"))))
                .transpose()
        };
        let (min, xmin) = (get("minimum", true)?, get("exclusiveMinimum", true)?);
        let (max, xmax) = (get("maximum", false)?, get("exclusiveMaximum", false)?);
        if min.is_none() && xmin.is_none() && max.is_none() && xmax.is_none() {
            return Ok(None);
        }
        let mut lo = -FAR;
        if let Some((v, _)) = min {
            lo = lo.max(v);
        }
        if let Some((v, exact)) = xmin {
            lo = lo.max(if exact { v + 1 } else { v });
        }
        let mut hi = FAR;
        if let Some((v, _)) = max {
            hi = hi.min(v);
        }
        if let Some((v, exact)) = xmax {
            hi = hi.min(if exact { v - 1 } else { v });
        }
        let r = NumRange { int_only, lo, hi };
        if !r.feasible(&NumText::default()) {
            let kind = if int_only { "integer" } else { "number" };
            return Err(Error::Input(format!(
                "no {kind} of at most {MAX_DIGITS} digits meets the schema's minimum / maximum"
            )));
        }
        Ok(Some(r))
    }

    /// Whether some number starting with `t` lies in the range.
    pub fn feasible(&self, t: &NumText) -> bool {
        let grows = matches!(t.phase, Phase::Start | Phase::Minus | Phase::Int);
        let fresh = matches!(t.phase, Phase::Start | Phase::Minus);
        let room = u32::from(MAX_DIGITS - t.digits);
        let ks = if grows { 0..=room } else { 0..=0 };
        for k in ks {
            // The first digit of a fresh number: `0` alone, or 1-9 leading.
            if fresh && k == 0 {
                continue;
            }
            let j = if self.int_only { 0 } else { room - k };
            if t.phase == Phase::Dot && j == 0 {
                continue;
            }
            // The integers (in units of 10^-(frac + j)) reachable.
            let (low, high) = if fresh {
                let low = if k == 1 { 0 } else { pow10(k - 1) };
                (low * pow10(j), pow10(k + j) - 1)
            } else {
                let base = i128::from(t.mant) * pow10(k + j);
                (base, base + pow10(k + j) - 1)
            };
            let (p, q) = if t.neg || t.phase == Phase::Minus {
                (-high, -low)
            } else {
                (low, high)
            };
            let g = pow10(SCALE - u32::from(t.frac) - j);
            if p.max(div_ceil(self.lo, g)) <= q.min(div_floor(self.hi, g)) {
                return true;
            }
        }
        false
    }

    /// `t` followed by `c`, if some number in range starts so.
    pub fn step(&self, t: &NumText, c: u8) -> Option<NumText> {
        let mut n = *t;
        let digit = c.is_ascii_digit();
        let more = n.digits < MAX_DIGITS;
        n.phase = match (t.phase, c) {
            (Phase::Start, b'-') => {
                n.neg = true;
                Phase::Minus
            }
            (Phase::Start | Phase::Minus, b'0') => Phase::Zero,
            (Phase::Start | Phase::Minus, _) if digit => Phase::Int,
            (Phase::Int, _) if digit && more => Phase::Int,
            (Phase::Zero | Phase::Int, b'.') if !self.int_only && more => Phase::Dot,
            (Phase::Dot | Phase::Frac, _) if digit && more => Phase::Frac,
            _ => return None,
        };
        if digit {
            n.mant = n.mant * 10 + i64::from(c - b'0');
            n.digits += 1;
            if matches!(n.phase, Phase::Frac) {
                n.frac += 1;
            }
        }
        self.feasible(&n).then_some(n)
    }

    /// Whether `t` is a whole number in the range.
    pub fn can_end(&self, t: &NumText) -> bool {
        if !matches!(t.phase, Phase::Zero | Phase::Int | Phase::Frac) {
            return false;
        }
        let mut v = i128::from(t.mant) * pow10(SCALE - u32::from(t.frac));
        if t.neg {
            v = -v;
        }
        (self.lo..=self.hi).contains(&v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn range(s: Value, int_only: bool) -> NumRange {
        NumRange::from_schema(s.as_object().unwrap(), int_only)
            .unwrap()
            .unwrap()
    }

    fn reads(r: &NumRange, text: &str) -> bool {
        let mut t = NumText::default();
        for c in text.bytes() {
            match r.step(&t, c) {
                Some(n) => t = n,
                None => return false,
            }
        }
        r.can_end(&t)
    }

    #[test]
    fn integer_bounds_inclusive_exclusive_and_one_sided() {
        let r = range(json!({"minimum": -5, "exclusiveMaximum": 12}), true);
        for ok in ["-5", "0", "11", "-0", "7"] {
            assert!(reads(&r, ok), "{ok}");
        }
        for bad in ["-6", "12", "100", "1.5", "05", "-", "1e1"] {
            assert!(!reads(&r, bad), "{bad}");
        }
        let r = range(json!({"exclusiveMinimum": 1000}), true);
        assert!(reads(&r, "1001") && reads(&r, "999999999999999"));
        assert!(!reads(&r, "1000") && !reads(&r, "-1") && !reads(&r, "9999999999999999"));
        // A prefix that can only grow into range is allowed.
        let t = r.step(&NumText::default(), b'2').unwrap();
        assert!(!r.can_end(&t));
        assert!(r.step(&NumText::default(), b'-').is_none());
        // Fractional bounds on integers round inward.
        let r = range(json!({"minimum": 0.5, "maximum": 2.5}), true);
        assert!(reads(&r, "1") && reads(&r, "2") && !reads(&r, "0") && !reads(&r, "3"));
    }

    #[test]
    fn float_bounds_are_exact_on_the_decimal_text() {
        let r = range(json!({"exclusiveMinimum": 0.1, "maximum": 0.3}), false);
        for ok in ["0.3", "0.2", "0.10000000000001", "0.29999"] {
            assert!(reads(&r, ok), "{ok}");
        }
        for bad in [
            "0.1",
            "0.30000000000001",
            "0",
            "1",
            "-0.2",
            "0.10",
            "0.100000000000001",
        ] {
            assert!(!reads(&r, bad), "{bad}");
        }
        let r = range(json!({"minimum": -1.5e-7}), false);
        assert!(reads(&r, "-0.00000015") && !reads(&r, "-0.00000016") && reads(&r, "3"));
        let far = json!({"minimum": 1e300});
        assert!(NumRange::from_schema(far.as_object().unwrap(), false).is_err());
        assert!(NumRange::from_schema(
            json!({"minimum": 3, "maximum": 2}).as_object().unwrap(),
            true
        )
        .is_err());
        assert!(NumRange::from_schema(json!({"minimum": "3"}).as_object().unwrap(), true).is_err());
        assert!(
            NumRange::from_schema(json!({"type": "number"}).as_object().unwrap(), false)
                .unwrap()
                .is_none()
        );
    }
}
