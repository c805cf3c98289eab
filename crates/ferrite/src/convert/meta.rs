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

use super::model_id::{id_to_title, model_id_components};
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
