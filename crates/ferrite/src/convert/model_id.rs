//! gguf-py's guesses from a model id (`Qwen/Qwen2.5-0.5B-Instruct`): its
//! title-cased name, organization, basename, finetune, version and size
//! label, and the size label of a parameter count.

/// Python's `str.islower()`: some cased character, none upper case.
fn is_lower(s: &str) -> bool {
    let cased = s.chars().any(|c| c.is_lowercase() || c.is_uppercase());
    cased && !s.chars().any(char::is_uppercase)
}

/// Python's `str.title()`.
fn title(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut prev_cased = false;
    for c in s.chars() {
        let cased = c.is_lowercase() || c.is_uppercase();
        if cased && !prev_cased {
            out.extend(c.to_uppercase());
        } else if cased {
            out.extend(c.to_lowercase());
        } else {
            out.push(c);
        }
        prev_cased = cased;
    }
    out
}

/// `v1`, `1.2`, `3b...`: words `id_to_title` leaves as they are.
fn is_version_or_number(w: &str) -> bool {
    let b = w.as_bytes();
    if b.first().is_some_and(u8::is_ascii_digit) {
        return true;
    }
    let Some(rest) = w.strip_prefix('v') else {
        return false;
    };
    !rest.is_empty()
        && rest
            .split('.')
            .all(|p| !p.is_empty() && p.bytes().all(|c| c.is_ascii_digit()))
}

/// gguf-py `Metadata.id_to_title`.
pub(super) fn id_to_title(s: &str) -> String {
    s.trim()
        .replace('-', " ")
        .split_whitespace()
        .map(|w| {
            if is_lower(w) && !is_version_or_number(w) {
                title(w)
            } else {
                w.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// `(v|iter)?\d+([.]\d+)*`, case-insensitive.
fn is_version(p: &str) -> bool {
    let l = p.to_ascii_lowercase();
    let rest = l
        .strip_prefix("iter")
        .or_else(|| l.strip_prefix('v'))
        .unwrap_or(&l);
    !rest.is_empty()
        && rest
            .split('.')
            .all(|d| !d.is_empty() && d.bytes().all(|c| c.is_ascii_digit()))
}

/// `i?q\d(_\w)*|b?fp?(16|32)`, case-insensitive.
fn is_quant_type(p: &str) -> bool {
    let l = p.to_ascii_lowercase();
    let q = l.strip_prefix('i').unwrap_or(&l);
    if let Some(rest) = q.strip_prefix('q') {
        let mut b = rest.bytes();
        if b.next().is_some_and(|c| c.is_ascii_digit()) {
            let tail = &rest[1..];
            // (_\w)*: pairs of '_' and one word character.
            let t = tail.as_bytes();
            if t.len().is_multiple_of(2)
                && t.chunks(2)
                    .all(|c| c[0] == b'_' && (c[1].is_ascii_alphanumeric() || c[1] == b'_'))
            {
                return true;
            }
        }
    }
    let f = l.strip_prefix('b').unwrap_or(&l);
    let f = f.strip_prefix('f').unwrap_or("x");
    let f = f.strip_prefix('p').unwrap_or(f);
    f == "16" || f == "32"
}

/// `(([A]|\d+[x])?\d+([._]\d+)?[KMBT][\d]?|small|mini|medium|large|x?xl)`,
/// case-insensitive.
fn is_size(p: &str) -> bool {
    let l = p.to_ascii_lowercase();
    if matches!(
        l.as_str(),
        "small" | "mini" | "medium" | "large" | "xl" | "xxl"
    ) {
        return true;
    }
    let b = l.as_bytes();
    // Try every optional prefix: "a", "\d+x", or none.
    let mut starts = vec![0usize];
    if b.first() == Some(&b'a') {
        starts.push(1);
    }
    let digits = b.iter().take_while(|c| c.is_ascii_digit()).count();
    if digits > 0 && b.get(digits) == Some(&b'x') {
        starts.push(digits + 1);
    }
    starts.into_iter().any(|s| {
        let r = &b[s..];
        let d1 = r.iter().take_while(|c| c.is_ascii_digit()).count();
        if d1 == 0 {
            return false;
        }
        let mut i = d1;
        if matches!(r.get(i), Some(b'.' | b'_')) {
            let d2 = r[i + 1..].iter().take_while(|c| c.is_ascii_digit()).count();
            if d2 > 0 {
                i += 1 + d2;
            }
        }
        if !matches!(r.get(i), Some(b'k' | b'm' | b'b' | b't')) {
            return false;
        }
        i += 1;
        if r.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        i == r.len()
    })
}

/// gguf-py `Metadata.get_model_id_components`: full name, organization,
/// basename, finetune, version, size label.
type Components = (
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
);

pub(super) fn model_id_components(model_id: &str, total_params: u64) -> Components {
    if model_id.contains(' ') {
        return (Some(model_id.to_string()), None, None, None, None, None);
    }
    let (mut org, full) = match model_id.split_once('/') {
        Some((o, n)) => (Some(o.to_string()), n.to_string()),
        None => (None, model_id.to_string()),
    };
    if org.as_deref().is_some_and(|o| o.starts_with('.')) {
        org = None;
    }
    let mut parts: Vec<String> = full
        .split('-')
        .filter(|p| !p.is_empty())
        .map(str::to_string)
        .collect();
    #[derive(Default, Clone)]
    struct T {
        basename: bool,
        size: bool,
        finetune: bool,
        version: bool,
        ty: bool,
    }
    impl T {
        fn empty(&self) -> bool {
            !(self.basename || self.size || self.finetune || self.version || self.ty)
        }
        fn count(&self) -> usize {
            [
                self.basename,
                self.size,
                self.finetune,
                self.version,
                self.ty,
            ]
            .iter()
            .filter(|b| **b)
            .count()
        }
    }
    let mut types = vec![T::default(); parts.len()];
    for i in 0..parts.len() {
        let part = parts[i].clone();
        if is_version(&part) {
            types[i].version = true;
        } else if is_quant_type(&part) {
            types[i].ty = true;
            parts[i] = part.to_uppercase();
        } else if i > 0 && is_size(&part) {
            let mut p = part.replace('_', ".");
            let pb: Vec<char> = p.chars().collect();
            if pb.last().is_some_and(|c| c.is_ascii_digit()) && pb.len() >= 2 {
                // bloom-7b1 -> 7.1b
                let n = pb.len();
                let head: String = pb[..n - 2].iter().collect();
                p = format!("{head}.{}{}", pb[n - 1], pb[n - 2]);
            }
            let pb: Vec<char> = p.chars().collect();
            if pb.len() > 1
                && pb[pb.len() - 2].is_ascii_digit()
                && "kmbt".contains(pb[pb.len() - 1])
            {
                let head: String = pb[..pb.len() - 1].iter().collect();
                p = format!("{head}{}", pb[pb.len() - 1].to_ascii_uppercase());
            }
            if total_params != 0 {
                let pb: Vec<char> = p.chars().collect();
                let head: String = pb[..pb.len() - 1].iter().collect();
                let scale = " KMBT".find(pb[pb.len() - 1]);
                if let (Ok(v), Some(scale)) = (head.parse::<f64>(), scale) {
                    let label = v * 1000f64.powi(scale as i32);
                    let t = total_params as f64;
                    if (label - t).abs() > (7 * total_params / 8) as f64 {
                        types[i].finetune = true;
                        let head: String = pb[..pb.len() - 1].iter().collect();
                        p = format!("{head}{}", pb[pb.len() - 1].to_ascii_lowercase());
                    }
                } else if let (Ok(_), None) = (head.parse::<f64>(), scale) {
                    // " KMBT".find of a lower-case letter is -1 in Python:
                    // 1000 ** -1.
                    let v: f64 = head.parse().unwrap_or(0.0);
                    let label = v / 1000.0;
                    let t = total_params as f64;
                    if (label - t).abs() > (7 * total_params / 8) as f64 {
                        types[i].finetune = true;
                    }
                }
            }
            if types[i].empty() {
                types[i].size = true;
            }
            parts[i] = p;
        } else if i > 0
            && matches!(
                part.to_ascii_lowercase().as_str(),
                "chat" | "instruct" | "vision" | "lora"
            )
        {
            types[i].finetune = true;
        }
    }
    let numeric_size = parts
        .iter()
        .zip(&types)
        .any(|(n, t)| t.size && n.chars().any(|c| c.is_ascii_digit()));
    if numeric_size {
        for (n, t) in parts.iter().zip(types.iter_mut()) {
            if t.size && n.chars().all(char::is_alphabetic) {
                t.size = false;
            }
        }
    }
    let mut at_start = true;
    for (part, t) in parts.iter().zip(types.iter_mut()) {
        let alpha_first = part.chars().next().is_some_and(char::is_alphabetic);
        if at_start && ((t.empty() && alpha_first) || t.version) {
            t.basename = true;
        } else {
            at_start = false;
            if t.empty() {
                t.finetune = true;
            }
        }
    }
    for t in types.iter_mut().rev() {
        if t.basename && t.count() > 1 {
            t.basename = false;
        } else {
            break;
        }
    }
    let join = |f: &dyn Fn(&T) -> bool| -> Option<String> {
        let v: Vec<&str> = parts
            .iter()
            .zip(&types)
            .filter(|(_, t)| f(t))
            .map(|(n, _)| n.as_str())
            .collect();
        (!v.is_empty()).then(|| v.join("-"))
    };
    let mut basename = join(&|t| t.basename);
    let size_label = {
        let mut seen: Vec<&str> = Vec::new();
        for (n, t) in parts.iter().zip(&types) {
            if t.size && !seen.contains(&n.as_str()) {
                seen.push(n);
            }
        }
        (!seen.is_empty()).then(|| seen.join("-"))
    };
    let finetune = join(&|t| t.finetune);
    let version = join(&|t| t.version && !t.basename);
    if size_label.is_none() && finetune.is_none() && version.is_none() {
        basename = None;
    }
    (Some(full), org, basename, finetune, version, size_label)
}

/// gguf-py `model_weight_count_rounded_notation` with two digits.
pub(super) fn size_label(total: u64) -> String {
    let t = total as f64;
    let (scaled, suffix) = if t > 1e12 {
        (t * 1e-12, "T")
    } else if t > 1e9 {
        (t * 1e-9, "B")
    } else if t > 1e6 {
        (t * 1e-6, "M")
    } else {
        (t * 1e-3, "K")
    };
    let rounded = format!("{}", scaled.round_ties_even() as u64);
    let digits = rounded.trim_start_matches('0').len();
    let fix = 2usize.saturating_sub(digits);
    format!("{scaled:.fix$}{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_as_gguf_py_makes_them() {
        assert_eq!(id_to_title("tiny-llama3"), "Tiny Llama3");
        assert_eq!(id_to_title("all-MiniLM-L6-v2"), "All MiniLM L6 v2");
        assert_eq!(title("s2orc"), "S2Orc");
        let (full, org, base, ft, ver, size) =
            model_id_components("Qwen/Qwen2.5-0.5B-Instruct", 494_032_768);
        assert_eq!(full.as_deref(), Some("Qwen2.5-0.5B-Instruct"));
        assert_eq!(org.as_deref(), Some("Qwen"));
        assert_eq!(base.as_deref(), Some("Qwen2.5"));
        assert_eq!(ft.as_deref(), Some("Instruct"));
        assert_eq!(ver, None);
        assert_eq!(size.as_deref(), Some("0.5B"));
        assert_eq!(size_label(103_360), "103K");
        assert_eq!(size_label(22_565_376), "23M");
        assert_eq!(size_label(1_500_000), "1.5M");
        assert_eq!(size_label(494_032_768), "494M");
    }
}
