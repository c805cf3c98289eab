//! Chat prompts: a model's `tokenizer.chat_template` (Jinja, as Hugging Face
//! writes them) rendered with `minijinja` in a sandbox, or, for models that
//! have none, a built-in template chosen by architecture ([`builtin_template`],
//! the family's `models::registry` entry:
//! Gemma's turn format for Gemma models, ChatML otherwise).
//!
//! Templates come from model files and are untrusted: rendering runs in a
//! sandbox ([`sandbox`]) whose fuel budget bounds the work and the memory
//! (every intermediate value, not only the output) a render may use, with
//! a recursion limit and an output-size limit; every failure is an error,
//! never a panic.
//!
//! [`fit_prompt`] keeps a long conversation inside the context: it drops the
//! oldest user/assistant turns (never the system prompt) until the prompt
//! leaves room for a reply, as llama.cpp's server shifts its context.

use std::fmt;
use std::io;

use minijinja::{Environment, ErrorKind};
use serde::Serialize;
use serde_json::Value as Json;

use crate::formats::gguf::GgufFile;
use crate::models::registry::{self, BuiltinChat};
use crate::tokenize::Tokenizer;

mod bounded;
mod fit;
pub mod sandbox;
pub use fit::{fit_prompt, FittedPrompt, PromptBudget, PromptError};
use sandbox::MAX_OUTPUT;

/// The metadata key holding a GGUF file's chat template.
pub const TEMPLATE_KEY: &str = "tokenizer.chat_template";

/// ChatML, the fallback when a model carries no template.
pub const CHATML_TEMPLATE: &str = "{% for message in messages %}\
{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}\
{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

/// Gemma's turn format (Gemma 1-3 instruction-tuned models): turns are
/// `<start_of_turn>{role}\n{content}<end_of_turn>\n` with the assistant's
/// role named `model`, contents trimmed, and system messages folded into
/// the first user turn followed by a blank line (Gemma has no system role),
/// as Gemma's official template and llama.cpp's built-in "gemma" template
/// do. BOS is left to the tokenizer.
pub const GEMMA_TEMPLATE: &str = "{%- set ns = namespace(system='') -%}\
{%- for message in messages -%}\
{%- if message['role'] == 'system' -%}\
{%- set ns.system = ns.system + (message['content'] | trim) -%}\
{%- else -%}\
{%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}\
{{ '<start_of_turn>' + role + '\n' }}\
{%- if ns.system and role != 'model' -%}{{ ns.system + '\n\n' }}{%- set ns.system = '' -%}{%- endif -%}\
{{ (message['content'] | trim) + '<end_of_turn>\n' }}\
{%- endif -%}\
{%- endfor -%}\
{%- if add_generation_prompt -%}{{ '<start_of_turn>model\n' }}{%- endif -%}";

/// The template for a model file that carries none, by its
/// `general.architecture`: the family's own (`models::registry`,
/// `DecoderFamily::chat`: Gemma's turn format for Gemma models), ChatML
/// for everything else.
pub fn builtin_template(architecture: Option<&str>) -> ChatTemplate {
    let chat = match architecture {
        Some(arch) if OTHER_GEMMA_ARCHITECTURES.contains(&arch) => BuiltinChat::Gemma,
        Some(arch) => registry::by_arch(arch).map_or(BuiltinChat::ChatMl, |f| f.chat),
        None => BuiltinChat::ChatMl,
    };
    match chat {
        BuiltinChat::Gemma => ChatTemplate::gemma(),
        BuiltinChat::ChatMl => ChatTemplate::chatml(),
    }
}

/// Gemma architectures ferrite does not run (no registry entry), whose
/// files [`model_template`] may still be asked for a template.
const OTHER_GEMMA_ARCHITECTURES: [&str; 2] = ["gemma", "gemma3n"];

/// One message of a conversation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Message {
    /// `system`, `user`, `assistant` (or a role the template knows).
    pub role: String,
    /// The message's text.
    pub content: String,
}

impl Message {
    /// A message of `role` with `content`.
    pub fn new(role: &str, content: &str) -> Message {
        Message {
            role: role.to_string(),
            content: content.to_string(),
        }
    }

    /// `{"role": ..., "content": ...}`, as [`ChatTemplate::render_json`]
    /// takes messages.
    pub fn to_json(&self) -> Json {
        serde_json::json!({"role": self.role, "content": self.content})
    }
}

#[derive(Debug)]
pub struct TemplateError(String);

impl fmt::Display for TemplateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "chat template: {}", self.0)
    }
}

impl std::error::Error for TemplateError {}

/// A compiled chat template.
pub struct ChatTemplate {
    env: Environment<'static>,
    source: String,
    bos_token: String,
    eos_token: String,
}

impl ChatTemplate {
    /// Compiles `source`; `bos_token` / `eos_token` are the texts templates
    /// may refer to.
    pub fn new(
        source: &str,
        bos_token: &str,
        eos_token: &str,
    ) -> Result<ChatTemplate, TemplateError> {
        let env = sandbox::environment(source).map_err(|e| TemplateError(e.to_string()))?;
        Ok(ChatTemplate {
            env,
            source: source.to_string(),
            bos_token: bos_token.to_string(),
            eos_token: eos_token.to_string(),
        })
    }

    /// The template's Jinja source.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The built-in ChatML template.
    pub fn chatml() -> ChatTemplate {
        // The constant is valid Jinja (a unit test renders it).
        Self::new(CHATML_TEMPLATE, "", "<|im_end|>").unwrap_or_else(|e| panic!("{e}"))
    }

    /// The built-in Gemma template.
    pub fn gemma() -> ChatTemplate {
        // The constant is valid Jinja (a unit test renders it).
        Self::new(GEMMA_TEMPLATE, "<bos>", "<end_of_turn>").unwrap_or_else(|e| panic!("{e}"))
    }

    /// Renders a conversation; with `add_generation_prompt` the text ends
    /// where the assistant's reply begins.
    pub fn render(
        &self,
        messages: &[Message],
        add_generation_prompt: bool,
    ) -> Result<String, TemplateError> {
        let json: Vec<Json> = messages.iter().map(Message::to_json).collect();
        self.render_json(&json, None, add_generation_prompt)
    }

    /// Renders a conversation given as OpenAI-style JSON messages (`role`,
    /// `content`, and whatever else templates read: an assistant's
    /// `tool_calls` with `function.arguments` as JSON values, a tool
    /// message's `tool_call_id` and `name`), with `tools` (the function
    /// definitions) for templates that render them.
    pub fn render_json(
        &self,
        messages: &[Json],
        tools: Option<&Json>,
        add_generation_prompt: bool,
    ) -> Result<String, TemplateError> {
        let fuel = sandbox::fuel_budget(input_bytes(messages, tools));
        self.render_json_within(messages, tools, add_generation_prompt, fuel)
    }

    /// [`ChatTemplate::render_json`] with a budget of `fuel` (see
    /// `sandbox::fuel_budget`, the budget `render_json` gives) instead of
    /// the one the input's size gives: tests use it to show that real
    /// templates render with a fraction of their budget.
    pub fn render_json_within(
        &self,
        messages: &[Json],
        tools: Option<&Json>,
        add_generation_prompt: bool,
        fuel: u64,
    ) -> Result<String, TemplateError> {
        // Fuel is an environment setting; a clone shares the functions and
        // filters and costs a few reference counts.
        let mut env = self.env.clone();
        env.set_fuel(Some(fuel));
        // The template is compiled again for each render (a fraction of a
        // millisecond): the rewritten instructions borrow the source.
        let compiled = bounded::compile(&env, "chat", &self.source)
            .map_err(|e| TemplateError(e.to_string()))?;
        let ctx = minijinja::context! {
            messages => minijinja::Value::from(minijinja::value::Serde(messages)),
            tools => tools.map(|t| minijinja::Value::from(minijinja::value::Serde(t))),
            add_generation_prompt => add_generation_prompt,
            bos_token => &self.bos_token,
            eos_token => &self.eos_token,
        };
        let mut text = String::new();
        let rendered = minijinja::machinery::eval(
            &env,
            &compiled.instructions,
            ctx,
            &compiled.blocks,
            &mut minijinja::machinery::make_string_output(&mut text),
            compiled.initial_auto_escape.clone(),
        );
        match rendered {
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::OutOfFuel => {
                return Err(TemplateError(sandbox::budget_message(fuel)))
            }
            Err(e) => return Err(TemplateError(e.to_string())),
        }
        // Every write was paid for with fuel, so the text is within the
        // budget's bytes; the prompt's own limit is checked on the result.
        if text.len() > MAX_OUTPUT {
            return Err(TemplateError(format!(
                "the rendered prompt is longer than {MAX_OUTPUT} bytes"
            )));
        }
        Ok(text)
    }
}

impl ChatTemplate {
    /// The render minijinja's own instructions give (no bounded operators,
    /// no fuel, everything else as [`ChatTemplate::render_json`]). Only
    /// for tests that check the bounded render gives the same text on real
    /// templates; never for untrusted templates.
    #[doc(hidden)]
    pub fn reference_render_json(
        &self,
        messages: &[Json],
        tools: Option<&Json>,
        add_generation_prompt: bool,
    ) -> Result<String, TemplateError> {
        let template = self
            .env
            .get_template("chat")
            .map_err(|e| TemplateError(e.to_string()))?;
        let ctx = minijinja::context! {
            messages => minijinja::Value::from(minijinja::value::Serde(messages)),
            tools => tools.map(|t| minijinja::Value::from(minijinja::value::Serde(t))),
            add_generation_prompt => add_generation_prompt,
            bos_token => &self.bos_token,
            eos_token => &self.eos_token,
        };
        template.render(ctx).map_err(|e| TemplateError(e.to_string()))
    }
}

/// Bytes of `messages` and `tools` as JSON: the input size a render's fuel
/// budget grows with.
fn input_bytes(messages: &[Json], tools: Option<&Json>) -> usize {
    /// Counts bytes written and keeps none.
    struct Count(usize);
    impl io::Write for Count {
        fn write(&mut self, data: &[u8]) -> io::Result<usize> {
            self.0 += data.len();
            Ok(data.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Writing to a counter cannot fail, and JSON values always serialize.
    let _ = serde_json::to_writer(&mut count, messages);
    let _ = serde_json::to_writer(&mut count, &tools);
    count.0
}

/// The chat template of a model: its file's `tokenizer.chat_template`, or
/// the built-in one for its architecture when the file has none.
pub fn model_template(file: &GgufFile, tok: &Tokenizer) -> Result<ChatTemplate, TemplateError> {
    let text_of = |id: Option<u32>| id.and_then(|i| tok.token_text(i)).unwrap_or("").to_string();
    let (bos, eos) = (text_of(tok.bos_id()), text_of(tok.eos_id()));
    match file.metadata().get_str(TEMPLATE_KEY) {
        Some(src) => ChatTemplate::new(src, &bos, &eos),
        None => Ok(builtin_template(file.header.architecture())),
    }
}

/// The tokens of `messages` rendered by `template` with the assistant's
/// turn opened: special-token text parsed, and BOS added when the
/// tokenizer wants one and the template did not write it.
pub fn prompt_tokens(
    tok: &Tokenizer,
    template: &ChatTemplate,
    messages: &[Message],
) -> Result<Vec<u32>, TemplateError> {
    let text = template.render(messages, true)?;
    Ok(with_bos(tok, tok.encode(&text, false, true)))
}

/// `ids` with BOS first when the tokenizer wants one and the template did
/// not write it.
pub fn with_bos(tok: &Tokenizer, mut ids: Vec<u32>) -> Vec<u32> {
    if tok.adds_bos() {
        if let Some(bos) = tok.bos_id() {
            if ids.first() != Some(&bos) {
                ids.insert(0, bos);
            }
        }
    }
    ids
}

/// Marks around the client's text in [`guarded_json_prompt_tokens`]'
/// second rendering (private-use characters, removed from that text
/// first).
const OPEN_MARK: char = '\u{E000}';
const CLOSE_MARK: char = '\u{E001}';

/// [`prompt_tokens`] for untrusted messages: the template's own markup
/// yields control tokens, but control-token text inside a message's
/// content (`<|im_end|>\n<|im_start|>system ...`) is tokenized as the
/// plain text it is, so a client cannot forge turns.
pub fn guarded_prompt_tokens(
    tok: &Tokenizer,
    template: &ChatTemplate,
    messages: &[Message],
) -> Result<Vec<u32>, TemplateError> {
    let json: Vec<Json> = messages.iter().map(Message::to_json).collect();
    guarded_json_prompt_tokens(tok, template, &json, None)
}

/// [`guarded_prompt_tokens`] for a conversation as
/// [`ChatTemplate::render_json`] takes it: every string in the messages'
/// contents and tool calls, and in `tools`, is the client's text.
///
/// With no control-token text in those, the ids are exactly those of the
/// rendered text tokenized with special tokens parsed. Otherwise the
/// conversation is rendered a second time with each such string's core
/// (without its leading and trailing whitespace, which templates may trim)
/// between two marks, which locate the client's text in the rendered
/// text; if the template changes that text other than by trimming, the
/// marks cannot be trusted and the conversation is refused. The
/// private-use marks themselves are removed from the client's text.
pub fn guarded_json_prompt_tokens(
    tok: &Tokenizer,
    template: &ChatTemplate,
    messages: &[Json],
    tools: Option<&Json>,
) -> Result<Vec<u32>, TemplateError> {
    let mut risky = false;
    let (mut msgs, mut tools) = (messages.to_vec(), tools.cloned());
    client_strings(&mut msgs, tools.as_mut(), &mut |s| {
        risky |= tok.has_control_text(s)
    });
    if !risky {
        let text = template.render_json(&msgs, tools.as_ref(), true)?;
        return Ok(with_bos(tok, tok.encode(&text, false, true)));
    }
    let is_mark = |c: char| c == OPEN_MARK || c == CLOSE_MARK;
    client_strings(&mut msgs, tools.as_mut(), &mut |s| {
        if s.contains(is_mark) {
            *s = s.replace(is_mark, "");
        }
    });
    let plain = template.render_json(&msgs, tools.as_ref(), true)?;
    client_strings(&mut msgs, tools.as_mut(), &mut |s| {
        let core = s.trim();
        let lead = &s[..s.len() - s.trim_start().len()];
        let trail = &s[lead.len() + core.len()..];
        *s = format!("{lead}{OPEN_MARK}{core}{CLOSE_MARK}{trail}");
    });
    let with_marks = template.render_json(&msgs, tools.as_ref(), true)?;
    let mut text = String::with_capacity(plain.len());
    let mut protected = Vec::new();
    let mut open = None;
    for c in with_marks.chars() {
        match c {
            OPEN_MARK => open = Some(text.len()),
            CLOSE_MARK => {
                if let Some(start) = open.take() {
                    protected.push(start..text.len());
                }
            }
            _ => text.push(c),
        }
    }
    if text != plain || open.is_some() {
        return Err(TemplateError(
            "a message holds special-token text and this model's template changes message \
             contents, so it cannot be kept apart from the template's markup; remove it"
                .into(),
        ));
    }
    Ok(with_bos(tok, tok.encode_protected(&text, &protected)))
}

/// Calls `f` on every string the client wrote: in each message's
/// `content` and `tool_calls`, and in `tools`.
fn client_strings(messages: &mut [Json], tools: Option<&mut Json>, f: &mut dyn FnMut(&mut String)) {
    fn walk(v: &mut Json, f: &mut dyn FnMut(&mut String)) {
        match v {
            Json::String(s) => f(s),
            Json::Array(a) => a.iter_mut().for_each(|x| walk(x, f)),
            Json::Object(o) => o.values_mut().for_each(|x| walk(x, f)),
            _ => {}
        }
    }
    for m in messages {
        if let Json::Object(o) = m {
            for key in ["content", "tool_calls"] {
                if let Some(v) = o.get_mut(key) {
                    walk(v, f);
                }
            }
        }
    }
    if let Some(t) = tools {
        walk(t, f);
    }
}

/// The tokens that end the assistant's turn in `template`: what the
/// template writes right after an assistant message, when that is a control
/// token (`<|im_end|>`, `<end_of_turn>`, `<|eot_id|>`, ...). Empty if the
/// template writes plain text there or cannot render such a conversation.
/// Generation should stop on these as on the tokenizer's end-of-generation
/// set, which usually holds them already.
pub fn turn_end_tokens(tok: &Tokenizer, template: &ChatTemplate) -> Vec<u32> {
    const MARK: &str = "ferrite-reply-marker";
    let conversation = [Message::new("user", "Hi"), Message::new("assistant", MARK)];
    let Ok(text) = template.render(&conversation, false) else {
        return Vec::new();
    };
    let Some(at) = text.find(MARK) else {
        return Vec::new();
    };
    let after = &text[at + MARK.len()..];
    match tok.encode(after, false, true).first() {
        Some(&id) if tok.is_control(id) => vec![id],
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chatml_renders() {
        let t = ChatTemplate::chatml();
        let text = t.render(&[Message::new("user", "Hi")], true).unwrap();
        assert_eq!(
            text,
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        );
    }

    #[test]
    fn gemma_renders_turns_and_folds_the_system_prompt() {
        let t = builtin_template(Some("gemma3"));
        let text = t.render(&[Message::new("user", "Hi")], true).unwrap();
        assert_eq!(
            text,
            "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n"
        );
        let conversation = [
            Message::new("system", " Be brief. "),
            Message::new("user", "Hi\n"),
            Message::new("assistant", " Hello! "),
            Message::new("user", "Bye"),
        ];
        assert_eq!(
            t.render(&conversation, false).unwrap(),
            "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n\
             <start_of_turn>model\nHello!<end_of_turn>\n\
             <start_of_turn>user\nBye<end_of_turn>\n"
        );
    }

    #[test]
    fn other_architectures_get_chatml() {
        for arch in [Some("llama"), Some("qwen2"), None] {
            let text = builtin_template(arch)
                .render(&[Message::new("user", "Hi")], true)
                .unwrap();
            assert!(text.starts_with("<|im_start|>user\nHi"), "{arch:?}: {text}");
        }
    }

    /// The built-in template of every architecture name: Gemma's for the
    /// Gemma families (with or without a registry entry), ChatML else.
    #[test]
    fn builtin_template_by_architecture() {
        let gemma = ["gemma", "gemma2", "gemma3", "gemma3n"];
        let mut archs: Vec<&str> = registry::architectures();
        archs.extend(["gemma", "gemma3n", "mistral", "t5", ""]);
        for arch in archs {
            let text = builtin_template(Some(arch))
                .render(&[Message::new("user", "Hi")], true)
                .unwrap();
            let want = if gemma.contains(&arch) {
                "<start_of_turn>user\nHi"
            } else {
                "<|im_start|>user\nHi"
            };
            assert!(text.starts_with(want), "{arch}: {text}");
        }
    }

    #[test]
    fn hostile_templates_fail_cleanly() {
        let endless = "{% for i in range(100000000) %}{{ i }}{% endfor %}";
        let t = ChatTemplate::new(endless, "", "").unwrap();
        assert!(t.render(&[], false).is_err());
        let recursive = "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}";
        let t = ChatTemplate::new(recursive, "", "").unwrap();
        assert!(t.render(&[], false).is_err());
        let raises = "{{ raise_exception('no system role') }}";
        let t = ChatTemplate::new(raises, "", "").unwrap();
        let err = t.render(&[], false).unwrap_err().to_string();
        assert!(err.contains("no system role"), "{err}");
        assert!(ChatTemplate::new("{% for %}", "", "").is_err());
    }

    #[test]
    fn python_string_methods_work() {
        let src = "{{ messages[0]['content'].strip().upper() }}";
        let t = ChatTemplate::new(src, "", "").unwrap();
        assert_eq!(
            t.render(&[Message::new("user", "  hi ")], false).unwrap(),
            "HI"
        );
    }
}
