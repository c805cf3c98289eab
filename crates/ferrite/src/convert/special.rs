//! gguf-py's `SpecialVocab` for the converter: special token ids, the
//! add-BOS/EOS flags, merges, the chat template, normalizer flags.

use std::path::Path;

use serde_json::Value as Json;

use super::json::read_json;
use crate::formats::gguf::{Array, Metadata, Value};
use crate::Error;

/// `SpecialVocab.special_token_types`.
const SPECIAL_TYPES: [&str; 7] = ["bos", "eos", "unk", "sep", "pad", "cls", "mask"];

/// GGUF key of a special token id.
fn id_key(typ: &str) -> String {
    match typ {
        "unk" => "tokenizer.ggml.unknown_token_id".into(),
        "sep" => "tokenizer.ggml.seperator_token_id".into(),
        "pad" => "tokenizer.ggml.padding_token_id".into(),
        other => format!("tokenizer.ggml.{other}_token_id"),
    }
}

fn content(v: &Json) -> Option<String> {
    match v {
        Json::String(s) => Some(s.clone()),
        Json::Object(o) => o.get("content").and_then(Json::as_str).map(str::to_string),
        _ => None,
    }
}

fn truthy(v: Option<&Json>) -> bool {
    match v {
        None | Some(Json::Null) => false,
        Some(Json::Bool(b)) => *b,
        Some(Json::String(s)) => !s.is_empty(),
        Some(Json::Object(o)) => !o.is_empty(),
        Some(_) => true,
    }
}

/// gguf-py `SpecialVocab` of `dir`: keys appended to `md`.
pub(super) struct Special {
    merges: Vec<String>,
    ids: Vec<(String, u32)>,
    add: Vec<(String, bool)>,
    chat_template: Option<String>,
    lowercase: Option<bool>,
    strip_accents: Option<bool>,
    types: Vec<String>,
    n_vocab: Option<usize>,
}

impl Special {
    fn set_add(&mut self, typ: &str, v: bool, only_default: bool) {
        match self.add.iter_mut().find(|(t, _)| t == typ) {
            Some(e) if !only_default => e.1 = v,
            Some(_) => {}
            None => self.add.push((typ.to_string(), v)),
        }
    }

    fn set_id(&mut self, typ: &str, id: Option<&Json>) -> Result<(), Error> {
        let Some(id) = id.and_then(Json::as_i64) else {
            return Ok(());
        };
        if id < 0 {
            return Err(Error::Input(format!(
                "invalid value for special token type {typ}: {id}"
            )));
        }
        if self.n_vocab.is_none_or(|n| (id as usize) < n) && !self.ids.iter().any(|(t, _)| t == typ)
        {
            self.ids.push((typ.to_string(), id as u32));
        }
        Ok(())
    }

    fn normalizer(&mut self, n: &Json) {
        match n.get("type").and_then(Json::as_str) {
            Some("Lowercase") => self.lowercase = Some(true),
            Some("StripAccents") => self.strip_accents = Some(true),
            Some("BertNormalizer") => {
                if let Some(b) = n.get("lowercase") {
                    self.lowercase = b.as_bool();
                }
                if let Some(b) = n.get("strip_accents") {
                    self.strip_accents = b.as_bool();
                }
            }
            Some("Sequence") => {
                for m in n
                    .get("normalizers")
                    .and_then(Json::as_array)
                    .into_iter()
                    .flatten()
                {
                    self.normalizer(m);
                }
            }
            _ => {}
        }
    }

    pub(super) fn load(
        dir: &Path,
        tokenizer: &Json,
        config: &Json,
        load_merges: bool,
        n_vocab: Option<usize>,
    ) -> Result<Special, Error> {
        let mut s = Special {
            merges: Vec::new(),
            ids: Vec::new(),
            add: Vec::new(),
            chat_template: None,
            lowercase: None,
            strip_accents: None,
            types: SPECIAL_TYPES.iter().map(|t| t.to_string()).collect(),
            n_vocab,
        };
        if load_merges {
            if let Some(Json::Array(m)) = tokenizer.get("model").and_then(|m| m.get("merges")) {
                for e in m {
                    match e {
                        Json::String(x) => s.merges.push(x.clone()),
                        Json::Array(pair) if pair.len() == 2 => {
                            let enc = |p: &Json| -> String {
                                p.as_str()
                                    .unwrap_or("")
                                    .chars()
                                    .map(|c| if c == ' ' { '\u{120}' } else { c })
                                    .collect()
                            };
                            s.merges
                                .push(format!("{} {}", enc(&pair[0]), enc(&pair[1])));
                        }
                        _ => {
                            return Err(Error::model(
                                dir.join("tokenizer.json").display().to_string(),
                                "unknown tokenizer merges format",
                            ))
                        }
                    }
                }
            }
        }
        if let Some(n) = tokenizer.get("normalizer").filter(|n| truthy(Some(n))) {
            s.normalizer(n);
        }
        let added: Vec<Json> = tokenizer
            .get("added_tokens")
            .and_then(Json::as_array)
            .cloned()
            .unwrap_or_default();
        let mut tc = read_json(&dir.join("tokenizer_config.json"), false)?;
        let has_tc = |tc: &Option<Json>| tc.as_ref().is_some_and(|t| truthy(Some(t)));
        let get_tc = |tc: &Option<Json>, k: &str| -> Option<Json> {
            tc.as_ref().and_then(|t| t.get(k)).cloned()
        };
        let set_tc = |tc: &mut Option<Json>, k: &str, v: Json| {
            if let Some(Json::Object(o)) = tc.as_mut() {
                o.insert(k.to_string(), v);
            }
        };
        let mut special_bos = get_tc(&tc, "bos_token");
        let special_cls = get_tc(&tc, "cls_token");
        let mut special_eos = get_tc(&tc, "eos_token");
        let special_sep = get_tc(&tc, "sep_token");
        if !truthy(special_bos.as_ref()) && truthy(special_cls.as_ref()) && has_tc(&tc) {
            special_bos = special_cls.clone();
            set_tc(
                &mut tc,
                "bos_token",
                special_bos.clone().unwrap_or(Json::Null),
            );
        }
        if !truthy(special_eos.as_ref()) && truthy(special_sep.as_ref()) && has_tc(&tc) {
            special_eos = special_sep.clone();
            set_tc(
                &mut tc,
                "eos_token",
                special_eos.clone().unwrap_or(Json::Null),
            );
        }
        if let Some(pp) = tokenizer.get("post_processor").filter(|p| truthy(Some(p))) {
            let list = match pp.get("processors").and_then(Json::as_array) {
                Some(l) => l.clone(),
                None => vec![pp.clone()],
            };
            for p in &list {
                match p.get("type").and_then(Json::as_str) {
                    Some("ByteLevel") => {
                        s.set_add("bos", false, true);
                        s.set_add("eos", false, true);
                    }
                    Some("RobertaProcessing") => {
                        s.set_add("bos", true, false);
                        s.set_add("eos", true, false);
                        s.set_add("sep", true, false);
                        if !truthy(special_cls.as_ref()) && has_tc(&tc) {
                            let cls = p
                                .get("cls")
                                .and_then(|c| c.get(0))
                                .cloned()
                                .or_else(|| special_bos.clone())
                                .unwrap_or(Json::Null);
                            set_tc(&mut tc, "cls_token", cls);
                        }
                        if !truthy(special_sep.as_ref()) && has_tc(&tc) {
                            let sep = p
                                .get("sep")
                                .and_then(|c| c.get(0))
                                .cloned()
                                .or_else(|| special_eos.clone())
                                .unwrap_or(Json::Null);
                            set_tc(&mut tc, "sep_token", sep);
                        }
                    }
                    Some("TemplateProcessing") => {
                        let single = p
                            .get("single")
                            .and_then(Json::as_array)
                            .cloned()
                            .unwrap_or_default();
                        let pair = p
                            .get("pair")
                            .and_then(Json::as_array)
                            .cloned()
                            .unwrap_or_default();
                        let sp_id = |e: &Json| -> Option<Json> {
                            e.get("SpecialToken").and_then(|t| t.get("id")).cloned()
                        };
                        let bos_c = special_bos.clone();
                        let cls_c = get_tc(&tc, "cls_token");
                        let mut first = None;
                        let mut last = None;
                        if single.len() > 1 {
                            first = sp_id(&single[0]).filter(|v| truthy(Some(v)));
                            if let Some(f) = &first {
                                let fs = Some(f.clone());
                                if !has_tc(&tc) {
                                    special_bos = Some(f.clone());
                                } else if fs != bos_c && fs != cls_c {
                                    if !truthy(special_bos.as_ref()) {
                                        special_bos = Some(f.clone());
                                        set_tc(&mut tc, "bos_token", f.clone());
                                    }
                                    if !truthy(get_tc(&tc, "cls_token").as_ref()) {
                                        set_tc(&mut tc, "cls_token", f.clone());
                                    }
                                }
                                let bos_c = special_bos.clone();
                                let cls_c = get_tc(&tc, "cls_token");
                                s.set_add("bos", fs == bos_c || fs == cls_c, false);
                            }
                            last = sp_id(&single[single.len() - 1]).filter(|v| truthy(Some(v)));
                            if let Some(l) = &last {
                                let ls = Some(l.clone());
                                let eos_c = special_eos.clone();
                                if !has_tc(&tc) {
                                    special_eos = Some(l.clone());
                                } else if ls != eos_c {
                                    if !s.types.iter().any(|t| t == "eot") {
                                        s.types.push("eot".into());
                                        set_tc(
                                            &mut tc,
                                            "eot_token",
                                            special_eos.clone().unwrap_or(Json::Null),
                                        );
                                    } else if !s.types.iter().any(|t| t == "eom") {
                                        s.types.push("eom".into());
                                        set_tc(
                                            &mut tc,
                                            "eom_token",
                                            special_eos.clone().unwrap_or(Json::Null),
                                        );
                                    }
                                    special_eos = Some(l.clone());
                                    set_tc(&mut tc, "eos_token", l.clone());
                                }
                                let eos_c = special_eos.clone();
                                s.set_add("eos", ls == eos_c, false);
                            }
                        }
                        if !pair.is_empty() {
                            let start = usize::from(first.is_some() && sp_id(&pair[0]) == first);
                            let stop = if last.is_some() && sp_id(&pair[pair.len() - 1]) == last {
                                pair.len() - 1
                            } else {
                                pair.len()
                            };
                            let mid: &[Json] = if start < stop {
                                &pair[start..stop]
                            } else {
                                &[]
                            };
                            if !mid.is_empty() {
                                let seq = |e: &Json| {
                                    e.get("Sequence")
                                        .and_then(|s| s.get("id"))
                                        .and_then(Json::as_str)
                                        .map(str::to_string)
                                };
                                let a = seq(&mid[0]);
                                let b = seq(&mid[mid.len() - 1]);
                                if a.as_deref() == Some("A")
                                    && b.as_deref() == Some("B")
                                    && mid.len() > 2
                                {
                                    let inner = &mid[1..mid.len() - 1];
                                    let sep_c = special_sep.clone();
                                    let eos_c = special_eos.clone();
                                    let is_sep = |e: &Json| {
                                        let id = sp_id(e);
                                        id.is_some() && (id == sep_c || id == eos_c)
                                    };
                                    let mut add_sep = false;
                                    if sp_id(&inner[0]).is_some_and(|v| truthy(Some(&v)))
                                        && is_sep(&inner[0])
                                        && last.is_none()
                                    {
                                        add_sep = true;
                                    }
                                    if inner.len() == 2 && is_sep(&inner[1]) {
                                        add_sep = true;
                                    }
                                    s.set_add("sep", add_sep, false);
                                    if add_sep
                                        && !truthy(get_tc(&tc, "sep_token").as_ref())
                                        && has_tc(&tc)
                                    {
                                        set_tc(
                                            &mut tc,
                                            "sep_token",
                                            special_eos.clone().unwrap_or(Json::Null),
                                        );
                                    }
                                }
                            }
                        }
                    }
                    _ => {}
                }
            }
        }
        let Some(tc) = tc.filter(|t| truthy(Some(t))) else {
            s.ids_from_config(config)?;
            return Ok(s);
        };
        let jinja = dir.join("chat_template.jinja");
        let alt = match std::fs::read_to_string(&jinja) {
            Ok(t) => Some(Json::String(t)),
            Err(_) => read_json(&dir.join("chat_template.json"), false)?
                .and_then(|j| j.get("chat_template").cloned()),
        };
        match tc.get("chat_template").cloned().or(alt) {
            Some(Json::String(t)) => s.chat_template = Some(t),
            Some(Json::Array(_)) => {
                return Err(Error::model(
                    dir.display().to_string(),
                    "several named chat templates are not supported by ferrite convert yet",
                ))
            }
            _ => {}
        }
        for typ in s.types.clone() {
            if let Some(b) = tc.get(format!("add_{typ}_token")).and_then(Json::as_bool) {
                if !s.add.iter().any(|(t, _)| *t == typ) {
                    s.add.push((typ.clone(), b));
                }
            }
            let Some(c) = tc.get(format!("{typ}_token")).and_then(content) else {
                continue;
            };
            let id = added
                .iter()
                .find(|a| a.get("content").and_then(Json::as_str) == Some(&c))
                .and_then(|a| a.get("id"));
            s.set_id(&typ, id)?;
        }
        s.ids_from_config(config)?;
        Ok(s)
    }

    fn ids_from_config(&mut self, config: &Json) -> Result<(), Error> {
        for typ in self.types.clone() {
            let key = format!("{typ}_token_id");
            let id = config
                .get(&key)
                .filter(|v| !v.is_null())
                .or_else(|| config.get("text_config").and_then(|t| t.get(&key)));
            self.set_id(&typ, id)?;
        }
        Ok(())
    }

    pub(super) fn write(&self, md: &mut Metadata) {
        let mut put = |k: String, v: Value| {
            md.insert(k, v);
        };
        if !self.merges.is_empty() {
            put(
                "tokenizer.ggml.merges".into(),
                Value::Array(Array::String(self.merges.clone())),
            );
        }
        // gguf-py's writer has no key for `cls` (it is skipped).
        for (typ, id) in &self.ids {
            if typ != "cls" {
                put(id_key(typ), Value::U32(*id));
            }
        }
        for (typ, b) in &self.add {
            if matches!(typ.as_str(), "bos" | "eos" | "sep") {
                put(format!("tokenizer.ggml.add_{typ}_token"), Value::Bool(*b));
            }
        }
        if let Some(t) = &self.chat_template {
            put("tokenizer.chat_template".into(), Value::String(t.clone()));
        }
        if let Some(b) = self.lowercase {
            put("tokenizer.ggml.normalizer.lowercase".into(), Value::Bool(b));
        }
        if let Some(b) = self.strip_accents {
            put(
                "tokenizer.ggml.normalizer.strip_accents".into(),
                Value::Bool(b),
            );
        }
    }
}
