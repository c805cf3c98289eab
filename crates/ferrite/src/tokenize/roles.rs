//! Which tokens end generation, end a turn or mark fill-in-the-middle, found
//! by their text where the GGUF file does not say, and the attribute fixes
//! that come with them.
//!
//! Mirrors the end of `llama_vocab::impl::load` in llama.cpp's
//! `src/llama-vocab.cpp`: its lists of EOT/EOM/FIM/EOG token texts, tokens
//! found that way promoted to control tokens, control tokens named
//! `*unused*` marked unused, the gpt-oss and solar-open `<|end|>` and the
//! plain-`</s>` exceptions.

use std::collections::{BTreeSet, HashMap};

/// Token attributes (llama.cpp's `llama_token_attr`, the subset tokenizing
/// and decoding look at). A token of undefined type has none.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Attr(u8);

impl Attr {
    pub const UNKNOWN: Attr = Attr(1);
    pub const UNUSED: Attr = Attr(2);
    pub const NORMAL: Attr = Attr(4);
    pub const CONTROL: Attr = Attr(8);
    pub const USER_DEFINED: Attr = Attr(16);
    pub const BYTE: Attr = Attr(32);

    /// The attribute of a `tokenizer.ggml.token_type` value.
    pub(crate) fn from_token_type(t: i32) -> Attr {
        match t {
            1 => Attr::NORMAL,
            2 => Attr::UNKNOWN,
            3 => Attr::CONTROL,
            4 => Attr::USER_DEFINED,
            5 => Attr::UNUSED,
            6 => Attr::BYTE,
            _ => Attr::default(),
        }
    }

    /// True if any flag of `other` is set.
    pub fn any(self, other: Attr) -> bool {
        self.0 & other.0 != 0
    }

    pub fn insert(&mut self, other: Attr) {
        self.0 |= other.0;
    }
}

impl std::ops::BitOr for Attr {
    type Output = Attr;
    fn bitor(self, rhs: Attr) -> Attr {
        Attr(self.0 | rhs.0)
    }
}

/// Ids of the tokens with a role.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct SpecialIds {
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub eot: Option<u32>,
    pub eom: Option<u32>,
    pub unk: Option<u32>,
    pub pad: Option<u32>,
    pub fim_pre: Option<u32>,
    pub fim_suf: Option<u32>,
    pub fim_mid: Option<u32>,
    pub fim_pad: Option<u32>,
    pub fim_rep: Option<u32>,
    pub fim_sep: Option<u32>,
}

/// Token texts that end generation (llama.cpp's list, matched exactly).
const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<｜end▁of▁sentence｜>",
    "[e~[",
];
const EOT_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "<｜end▁of▁sentence｜>",
    "<end_of_utterance>",
];
const EOM_TEXTS: &[&str] = &["<|eom_id|>"];
const FIM_PRE_TEXTS: &[&str] = &[
    "<|fim_prefix|>",
    "<fim-prefix>",
    "<fim_prefix>",
    "<｜fim▁begin｜>",
    "<PRE>",
    "▁<PRE>",
    "<|code_prefix|>",
    "<|prefix|>",
];
const FIM_SUF_TEXTS: &[&str] = &[
    "<|fim_suffix|>",
    "<fim-suffix>",
    "<fim_suffix>",
    "<｜fim▁hole｜>",
    "<SUF>",
    "▁<SUF>",
    "<|code_suffix|>",
    "<|suffix|>",
];
const FIM_MID_TEXTS: &[&str] = &[
    "<|fim_middle|>",
    "<fim-middle>",
    "<fim_middle>",
    "<｜fim▁end｜>",
    "<MID>",
    "▁<MID>",
    "<|code_middle|>",
    "<|middle|>",
];
const FIM_PAD_TEXTS: &[&str] = &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"];
const FIM_REP_TEXTS: &[&str] = &[
    "<|fim_repo|>",
    "<|repo_name|>",
    "<fim-repo>",
    "<REPO>",
    "<reponame>",
];
const FIM_SEP_TEXTS: &[&str] = &["<|file_sep|>"];

/// Finds EOT/EOM/FIM tokens by text where the file does not name them,
/// builds the end-of-generation set and adjusts attributes the way llama.cpp
/// does. Where several tokens of a role match, llama.cpp takes whichever its
/// hash map yields first; we take the lowest id.
pub(crate) fn find_roles(
    texts: &[String],
    text_to_id: &HashMap<String, u32>,
    attrs: &mut [Attr],
    special: &mut SpecialIds,
) -> BTreeSet<u32> {
    let find = |candidates: &[&str]| {
        candidates
            .iter()
            .filter_map(|t| text_to_id.get(*t).copied())
            .min()
    };
    let roles = [
        (&mut special.eot, EOT_TEXTS),
        (&mut special.eom, EOM_TEXTS),
        (&mut special.fim_pre, FIM_PRE_TEXTS),
        (&mut special.fim_suf, FIM_SUF_TEXTS),
        (&mut special.fim_mid, FIM_MID_TEXTS),
        (&mut special.fim_pad, FIM_PAD_TEXTS),
        (&mut special.fim_rep, FIM_REP_TEXTS),
        (&mut special.fim_sep, FIM_SEP_TEXTS),
    ];
    for (slot, candidates) in roles {
        if slot.is_none() {
            if let Some(id) = find(candidates) {
                *slot = Some(id);
                attrs[id as usize].insert(Attr::CONTROL);
            }
        }
    }

    for (text, attr) in texts.iter().zip(attrs.iter_mut()) {
        if attr.any(Attr::CONTROL) && text.contains("unused") {
            attr.insert(Attr::UNUSED);
        }
    }

    let mut eog: BTreeSet<u32> = [special.fim_pad, special.fim_rep, special.fim_sep]
        .into_iter()
        .flatten()
        .collect();
    for text in EOG_TEXTS {
        if let Some(&id) = text_to_id.get(*text) {
            eog.insert(id);
            attrs[id as usize].insert(Attr::CONTROL);
        }
    }
    // gpt-oss: these are always rendered.
    for text in ["<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"] {
        if let Some(&id) = text_to_id.get(text) {
            attrs[id as usize] = Attr::USER_DEFINED;
        }
    }
    eog.extend(
        [special.eos, special.eot, special.eom]
            .into_iter()
            .flatten(),
    );

    // o200k_harmony / solar-open: `<|end|>` ends a message, not generation.
    let has = |eog: &BTreeSet<u32>, t: &str| eog.iter().any(|&id| texts[id as usize] == t);
    let has_call = has(&eog, "<|call|>") || has(&eog, "<|calls|>");
    if has(&eog, "<|end|>") && has_call && (has(&eog, "<|return|>") || has(&eog, "<|flush|>")) {
        if let Some(&id) = text_to_id.get("<|end|>") {
            eog.remove(&id);
            attrs[id as usize] = Attr::USER_DEFINED;
        }
    }
    // A plain `</s>` where the model has its own end markers.
    if has(&eog, "</s>") && (has(&eog, "<|tool_response>") || has(&eog, "<|plamo:eos|>")) {
        if let Some(&id) = text_to_id.get("</s>") {
            eog.remove(&id);
            attrs[id as usize] = Attr::NORMAL;
        }
    }
    eog
}
