//! The `general.*` keys `convert_hf_to_gguf.py` writes before the
//! hyper-parameters (gguf-py `Metadata`): the model's name, organization,
//! basename, finetune, version and size label guessed from `config.json`'s
//! `_name_or_path` and the directory's name, the model card's front matter
//! (`README.md`: license, tags, languages, datasets, base models), and the
//! sampling settings of `generation_config.json`; then the size label from
//! the parameter count. The same heuristics, re-implemented (the front
//! matter through a small YAML subset: scalars and lists of scalars at the
//! top level; anything else is refused with an error rather than guessed).

use std::path::Path;

use serde_json::Value as Json;

use crate::formats::gguf::{Array, Metadata, Value};
use crate::Error;

/// A base model or data set entry of the model card.
#[derive(Clone, Debug, Default)]
struct Source {
    name: Option<String>,
    organization: Option<String>,
    version: Option<String>,
    repo_url: Option<String>,
}

#[derive(Clone, Debug, Default)]
pub(crate) struct General {
    sampling: Vec<(&'static str, Value)>,
    pub(crate) name: Option<String>,
    author: Option<String>,
    version: Option<String>,
    organization: Option<String>,
    finetune: Option<String>,
    basename: Option<String>,
    description: Option<String>,
    size_label: Option<String>,
    license: Option<String>,
    license_name: Option<String>,
    license_link: Option<String>,
    source_url: Option<String>,
    source_doi: Option<String>,
    source_uuid: Option<String>,
    source_repo_url: Option<String>,
    base_models: Option<Vec<Source>>,
    datasets: Option<Vec<Source>>,
    tags: Option<Vec<String>>,
    languages: Option<Vec<String>>,
}

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
fn id_to_title(s: &str) -> String {
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

fn model_id_components(model_id: &str, total_params: u64) -> Components {
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
pub(crate) fn size_label(total: u64) -> String {
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

/// The top level of a model card's YAML front matter: scalars and lists
/// of scalars.
fn front_matter(text: &str, source: &str) -> Result<Vec<(String, Json)>, Error> {
    let lines: Vec<&str> = text.lines().collect();
    if lines.first() != Some(&"---") {
        return Ok(Vec::new());
    }
    let bad = |line: &str| {
        Error::model(
            source,
            format!(
                "model card front matter line '{line}' is outside the YAML subset ferrite reads \
                 (top-level scalars and lists of scalars)"
            ),
        )
    };
    let scalar = |v: &str| -> Json {
        let v = v.trim();
        let unq = |q: char| v.len() >= 2 && v.starts_with(q) && v.ends_with(q);
        if unq('"') || unq('\'') {
            return Json::String(v[1..v.len() - 1].to_string());
        }
        match v {
            "true" | "True" | "TRUE" => Json::Bool(true),
            "false" | "False" | "FALSE" => Json::Bool(false),
            "null" | "~" | "" => Json::Null,
            _ => match v.parse::<i64>() {
                Ok(n) => Json::from(n),
                Err(_) => Json::String(v.to_string()),
            },
        }
    };
    let mut out: Vec<(String, Json)> = Vec::new();
    for line in lines[1..].iter().map(|l| l.replace('\t', "  ")) {
        if line == "---" {
            break;
        }
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        if let Some(item) = line
            .strip_prefix("- ")
            .or_else(|| line.strip_prefix("  - "))
        {
            let item = if item.trim() == "no" { "\"no\"" } else { item };
            match out.last_mut() {
                Some((_, Json::Array(a))) => a.push(scalar(item)),
                Some((_, v @ Json::Null)) => *v = Json::Array(vec![scalar(item)]),
                _ => return Err(bad(&line)),
            }
            continue;
        }
        if line.starts_with(' ') {
            return Err(bad(&line));
        }
        let Some((k, v)) = line.split_once(':') else {
            return Err(bad(&line));
        };
        let v = v.trim();
        if v.starts_with('[') || v.starts_with('{') || v.starts_with('|') || v.starts_with('>') {
            return Err(bad(&line));
        }
        out.push((k.trim().to_string(), scalar(v)));
    }
    Ok(out)
}

fn json_str(v: &Json) -> Option<String> {
    match v {
        Json::String(s) => Some(s.clone()),
        Json::Number(n) => Some(n.to_string()),
        Json::Bool(b) => Some(if *b { "True" } else { "False" }.to_string()),
        _ => None,
    }
}

/// A base model or data set named by id or URL, as gguf-py describes it.
fn source_entry(id: &str, total: u64) -> Source {
    let mut s = Source::default();
    let describe = |s: &mut Source, id: &str, url: bool| {
        let (full, org, _, _, version, _) = model_id_components(id, total);
        s.name = full.as_deref().map(id_to_title);
        s.organization = org.as_deref().map(id_to_title);
        s.version = version;
        if !url {
            if let (Some(o), Some(f)) = (org, full) {
                s.repo_url = Some(format!("https://huggingface.co/{o}/{f}"));
            }
        }
    };
    if ["http://", "https://", "ssh://"]
        .iter()
        .any(|p| id.starts_with(p))
    {
        s.repo_url = Some(id.to_string());
        let tail = id
            .strip_prefix("https://huggingface.co/")
            .or_else(|| id.strip_prefix("http://huggingface.co/"));
        if let Some(t) = tail.filter(|t| t.matches('/').count() == 1 && !t.ends_with('/')) {
            describe(&mut s, t, true);
            s.repo_url = Some(id.to_string());
        }
    } else {
        describe(&mut s, id, false);
    }
    s
}

impl General {
    /// The heuristics of gguf-py `Metadata.load` for `dir` with
    /// `total_params` parameters; `label`: the size label when nothing
    /// gives one (see [`size_label`]).
    pub(crate) fn load(
        dir: &Path,
        config: &Json,
        total: u64,
        label: String,
    ) -> Result<General, Error> {
        let mut g = General::default();
        let card_path = dir.join("README.md");
        if let Ok(text) = std::fs::read_to_string(&card_path) {
            let card = front_matter(&text, &card_path.display().to_string())?;
            g.apply_card(&card, total);
        }
        if let Some(id) = config.get("_name_or_path").and_then(Json::as_str) {
            if id.matches('/').count() <= 1 {
                g.apply_id(id, total);
            }
        }
        let dir_name = dir
            .canonicalize()
            .ok()
            .and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_default();
        g.apply_id(&dir_name, total);
        if let Ok(text) = std::fs::read_to_string(dir.join("generation_config.json")) {
            if let Ok(gen) = serde_json::from_str::<Json>(&text) {
                g.sampling(&gen);
            }
        }
        if g.name.is_none() {
            g.name = Some(dir_name);
        }
        if g.size_label.is_none() && total > 0 {
            g.size_label = Some(label);
        }
        Ok(g)
    }

    fn sampling(&mut self, gen: &Json) {
        let int = |k: &str| {
            gen.get(k)
                .and_then(Json::as_i64)
                .map(|v| Value::I32(v as i32))
        };
        let float = |k: &str| {
            gen.get(k)
                .and_then(Json::as_f64)
                .map(|v| Value::F32(v as f32))
        };
        let keys: [(&'static str, Option<Value>); 12] = [
            (
                "general.sampling.sequence",
                gen.get("sequence")
                    .and_then(Json::as_str)
                    .map(|s| Value::String(s.into())),
            ),
            ("general.sampling.top_k", int("top_k")),
            ("general.sampling.top_p", float("top_p")),
            ("general.sampling.min_p", float("min_p")),
            ("general.sampling.xtc_probability", float("xtc_probability")),
            ("general.sampling.xtc_threshold", float("xtc_threshold")),
            ("general.sampling.temp", float("temperature")),
            ("general.sampling.penalty_last_n", int("penalty_last_n")),
            (
                "general.sampling.penalty_repeat",
                float("penalty_repeat").or_else(|| float("repetition_penalty")),
            ),
            ("general.sampling.mirostat", int("mirostat")),
            ("general.sampling.mirostat_tau", float("mirostat_tau")),
            ("general.sampling.mirostat_eta", float("mirostat_eta")),
        ];
        self.sampling = keys
            .into_iter()
            .filter_map(|(k, v)| v.map(|v| (k, v)))
            .collect();
    }

    fn apply_id(&mut self, id: &str, total: u64) {
        let (full, org, basename, finetune, version, size) = model_id_components(id, total);
        let fill = |slot: &mut Option<String>, v: Option<String>| {
            if slot.is_none() {
                *slot = v;
            }
        };
        fill(&mut self.name, full.as_deref().map(id_to_title));
        fill(&mut self.organization, org.as_deref().map(id_to_title));
        fill(&mut self.basename, basename);
        fill(&mut self.finetune, finetune);
        fill(&mut self.version, version);
        fill(&mut self.size_label, size);
    }

    fn apply_card(&mut self, card: &[(String, Json)], total: u64) {
        let get = |k: &str| card.iter().find(|(key, _)| key == k).map(|(_, v)| v);
        let set = |g: &mut General, slot: fn(&mut General) -> &mut Option<String>, k: &str| {
            if let Some(v) = get(k).and_then(json_str) {
                let s = slot(g);
                if s.is_none() {
                    *s = Some(v);
                }
            }
        };
        for (slot, keys) in [
            (
                (|g: &mut General| &mut g.name) as fn(&mut General) -> &mut Option<String>,
                &["name", "model_name"][..],
            ),
            (
                |g| &mut g.author,
                &["author", "model_author", "model_creator"],
            ),
            (|g| &mut g.version, &["version", "model_version"]),
            (
                |g| &mut g.organization,
                &["organization", "model_organization"],
            ),
            (
                |g| &mut g.description,
                &["description", "model_description"],
            ),
            (|g| &mut g.finetune, &["finetune", "model_finetune"]),
            (
                |g| &mut g.basename,
                &["basename", "model_basename", "model_type"],
            ),
            (|g| &mut g.size_label, &["size_label", "model_size_label"]),
            (|g| &mut g.source_url, &["url", "model_url"]),
            (|g| &mut g.source_doi, &["doi", "model_doi"]),
            (|g| &mut g.source_uuid, &["uuid", "model_uuid"]),
            (|g| &mut g.source_repo_url, &["repo_url", "model_repo_url"]),
        ] {
            for k in keys {
                set(self, slot, k);
            }
        }
        let list = |keys: &[&str]| -> Option<Vec<String>> {
            let v = keys.iter().find_map(|k| get(k))?;
            Some(match v {
                Json::Array(a) => a.iter().filter_map(json_str).collect(),
                other => json_str(other).into_iter().collect(),
            })
        };
        if let Some(ids) = list(&["base_model", "base_models", "base_model_sources"]) {
            let v = self.base_models.get_or_insert_with(Vec::new);
            v.extend(ids.iter().map(|id| source_entry(id, total)));
        }
        if let Some(ids) = list(&["datasets", "dataset", "dataset_sources"]) {
            let v = self.datasets.get_or_insert_with(Vec::new);
            v.extend(ids.iter().map(|id| source_entry(id, total)));
        }
        set(self, |g| &mut g.license, "license");
        if let Some(Json::Array(a)) = get("license") {
            self.license = Some(a.iter().filter_map(json_str).collect::<Vec<_>>().join(","));
        }
        set(self, |g| &mut g.license_name, "license_name");
        set(self, |g| &mut g.license_link, "license_link");
        for (slot, key) in [
            (
                (|g: &mut General| &mut g.tags) as fn(&mut General) -> &mut Option<Vec<String>>,
                "tags",
            ),
            (|g| &mut g.tags, "pipeline_tag"),
            (|g| &mut g.languages, "languages"),
            (|g| &mut g.languages, "language"),
        ] {
            if let Some(items) = list(&[key]) {
                slot(self).get_or_insert_with(Vec::new).extend(items);
            }
        }
    }

    /// The keys in gguf-py `Metadata.set_gguf_meta_model`'s order.
    pub(crate) fn write(&self, md: &mut Metadata) {
        let mut put = |k: &str, v: Value| {
            md.insert(k.to_string(), v);
        };
        for (k, v) in &self.sampling {
            put(k, v.clone());
        }
        let s = |v: &Option<String>| v.clone().map(Value::String);
        for (k, v) in [
            ("general.name", s(&self.name)),
            ("general.author", s(&self.author)),
            ("general.version", s(&self.version)),
            ("general.organization", s(&self.organization)),
            ("general.finetune", s(&self.finetune)),
            ("general.basename", s(&self.basename)),
            ("general.description", s(&self.description)),
            ("general.size_label", s(&self.size_label)),
            ("general.license", s(&self.license)),
            ("general.license.name", s(&self.license_name)),
            ("general.license.link", s(&self.license_link)),
            ("general.source.url", s(&self.source_url)),
            ("general.source.doi", s(&self.source_doi)),
            ("general.source.uuid", s(&self.source_uuid)),
            ("general.source.repo_url", s(&self.source_repo_url)),
        ] {
            if let Some(v) = v {
                put(k, v);
            }
        }
        for (what, list) in [
            ("base_model", &self.base_models),
            ("dataset", &self.datasets),
        ] {
            let Some(list) = list else { continue };
            put(
                &format!("general.{what}.count"),
                Value::U32(list.len() as u32),
            );
            for (i, e) in list.iter().enumerate() {
                for (field, v) in [
                    ("name", &e.name),
                    ("version", &e.version),
                    ("organization", &e.organization),
                    ("repo_url", &e.repo_url),
                ] {
                    if let Some(v) = v {
                        put(
                            &format!("general.{what}.{i}.{field}"),
                            Value::String(v.clone()),
                        );
                    }
                }
            }
        }
        for (k, v) in [
            ("general.tags", &self.tags),
            ("general.languages", &self.languages),
        ] {
            if let Some(v) = v {
                put(k, Value::Array(Array::String(v.clone())));
            }
        }
    }
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
