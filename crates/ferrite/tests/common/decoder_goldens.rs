//! Comparing a decoder with the HF goldens of the fixture scripts
//! (`logits` entries: a file of f32 rows, sequences with ids and offsets;
//! greedy runs). (hf_decoders.rs has its own copies of these, older.)

use std::path::{Path, PathBuf};
use std::sync::Arc;

use ferrite::formats::gguf::{write_gguf, GgufFile, Metadata, TensorToWrite, Value};
use ferrite::models::decoder::Logits;
use ferrite::models::{load_causal_lm, CausalLm};
use ferrite::parallel::Threads;
use serde_json::Value as Json;

use super::{all_logits, argmax, ids};

pub fn f32_file(path: &Path) -> Vec<f32> {
    std::fs::read(path)
        .unwrap()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

/// Largest |ours - HF| over the sequences of a goldens `logits` entry
/// (its file in `base`);
/// every row's top-1 must be HF's where HF's top-1/top-2 gap exceeds
/// `tie` (with logits within `tie / 2`, no other row can change its pick).
pub fn max_logit_error_in(model: &dyn CausalLm, entry: &Json, base: &Path, tie: f32) -> f32 {
    let hf = f32_file(&base.join(entry["file"].as_str().unwrap()));
    let n_vocab = entry["n_vocab"].as_u64().unwrap() as usize;
    assert_eq!(model.n_vocab(), n_vocab);
    let mut worst = 0f32;
    for seq in entry["sequences"].as_array().unwrap() {
        let tokens = ids(&seq["ids"]);
        let ours = all_logits(model, &tokens);
        let off = seq["offset"].as_u64().unwrap() as usize;
        let theirs = &hf[off..off + tokens.len() * n_vocab];
        for (row, (a, b)) in ours
            .chunks_exact(n_vocab)
            .zip(theirs.chunks_exact(n_vocab))
            .enumerate()
        {
            if top_gap(b) > tie {
                assert_eq!(argmax(a), argmax(b), "{}: top-1 at row {row}", seq["name"]);
            }
        }
        let err = ours
            .iter()
            .zip(theirs)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        worst = worst.max(err);
    }
    worst
}

/// The gap between the largest and the second-largest value of `row`.
pub fn top_gap(row: &[f32]) -> f32 {
    let top = argmax(row) as usize;
    let second = row
        .iter()
        .enumerate()
        .filter(|&(i, _)| i != top)
        .map(|(_, v)| *v)
        .fold(f32::NEG_INFINITY, f32::max);
    row[top] - second
}

/// Greedy decoding, one token per forward call after the prompt.
pub fn greedy(model: &dyn CausalLm, prompt: &[u32], n: usize) -> Vec<u32> {
    let mut st = model.new_state(128, Threads::new(2)).unwrap();
    let mut out = Vec::new();
    model
        .forward(prompt, &mut st, Logits::Last, &mut out)
        .unwrap();
    let mut generated = Vec::new();
    for _ in 0..n {
        let next = argmax(&out);
        generated.push(next);
        model
            .forward(&[next], &mut st, Logits::Last, &mut out)
            .unwrap();
    }
    generated
}

/// Asserts that greedy decoding of each golden case (`prompt_ids`,
/// `new_ids`, `prompt`) continues with its `new_ids`.
pub fn check_greedy_cases(model: &dyn CausalLm, cases: &Json, what: &str) {
    for case in cases.as_array().unwrap() {
        let want = ids(&case["new_ids"]);
        let got = greedy(model, &ids(&case["prompt_ids"]), want.len());
        assert_eq!(got, want, "{what}: {}", case["prompt"]);
    }
}

/// How many of the goldens' greedy `cases` `model` continues as they do.
pub fn greedy_agreement(model: &dyn CausalLm, cases: &Json) -> usize {
    cases
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| {
            let want = ids(&c["new_ids"]);
            greedy(model, &ids(&c["prompt_ids"]), want.len()) == want
        })
        .count()
}

/// A copy of the fixture directory `src` in a fresh temporary directory
/// (named after `tag`), with `edit` applied to its config.json.
pub fn damaged_copy(src: &Path, tag: &str, edit: impl FnOnce(&mut Json)) -> PathBuf {
    let dst = std::env::temp_dir().join(format!("ferrite-hf-hostile-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dst);
    std::fs::create_dir_all(&dst).unwrap();
    for entry in std::fs::read_dir(src).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), dst.join(entry.file_name())).unwrap();
    }
    let path = dst.join("config.json");
    let mut config: Json = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    edit(&mut config);
    std::fs::write(&path, config.to_string()).unwrap();
    dst
}

/// The GGUF file at `path` rewritten with metadata `set` and each tensor
/// passed through `tensor(name, dims, bytes)` (false: left out), then
/// loaded as a decoder.
pub fn load_edited_gguf(
    path: &Path,
    set: &[(&str, Value)],
    mut tensor: impl FnMut(&str, &mut Vec<u64>, &mut Vec<u8>) -> bool,
) -> Result<Box<dyn CausalLm>, String> {
    let file = GgufFile::open(path).unwrap();
    // `insert` keeps an existing key's value: rebuild with the edits.
    let mut md = Metadata::default();
    for (k, v) in file.metadata().iter() {
        let edit = set.iter().find(|(key, _)| *key == k).map(|(_, v)| v);
        md.insert(k.to_string(), edit.unwrap_or(v).clone());
    }
    for (k, v) in set {
        md.insert(k.to_string(), v.clone());
    }
    let kept: Vec<_> = file
        .tensors()
        .filter_map(|t| {
            let (mut dims, mut data) = (t.info.dims.clone(), t.data.to_vec());
            tensor(&t.info.name, &mut dims, &mut data)
                .then(|| (t.info.name.clone(), dims, t.info.ty, data))
        })
        .collect();
    let tensors: Vec<TensorToWrite> = kept
        .iter()
        .map(|(name, dims, ty, data)| TensorToWrite {
            name,
            dims,
            ty: *ty,
            data,
        })
        .collect();
    let mut bytes = Vec::new();
    write_gguf(&mut bytes, 3, &md, &tensors).unwrap();
    let file = GgufFile::from_vec(path, bytes).map_err(|e| e.to_string())?;
    load_causal_lm(Arc::new(file)).map_err(|e| e.to_string())
}

/// The `messages` of a goldens `chat` entry.
pub fn chat_messages(chat: &Json) -> Vec<ferrite::generate::chat::Message> {
    chat["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            ferrite::generate::chat::Message::new(
                m["role"].as_str().unwrap(),
                m["content"].as_str().unwrap(),
            )
        })
        .collect()
}
