//! Speculative decoding changes no token: for every drafter (prompt
//! lookup, a draft model, one that is always right, one that is always
//! wrong), greedy and seeded sampling (temperature, top-k/top-p/min-p,
//! repeat penalty, a JSON schema, stop strings), prompts that accept much
//! and little, at 1 and 2 threads, the text, the tokens, the stop reason,
//! the final logits and the KV cache rows are those of plain decoding,
//! bit for bit. Rollbacks past what a ring layer can rewind take the
//! recompute path and still give the same bits.

mod common;

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;

use ferrite::generate::json::Grammar;
use ferrite::generate::sampler::{Sampler, SamplerOptions};
use ferrite::generate::session::{GenerateOptions, Session, StopReason};
use ferrite::generate::speculative::{
    check_same_vocab, DraftModel, Drafter, PromptLookup, Speculation,
};
use ferrite::parallel::Threads;
use ferrite::{Error, Generator};

/// Everything a generation call leaves behind that must not depend on
/// speculation.
#[derive(Debug, PartialEq)]
struct Outcome {
    text: String,
    /// The pieces as streamed (where the text was cut).
    pieces: Vec<String>,
    tokens: Vec<u32>,
    stop: StopReason,
    generated: usize,
    /// Bits of the logits after the last token fed.
    logits: u64,
    /// Hash of every KV row the cache holds.
    kv: u64,
}

/// What a run also reports (not compared): drafted and accepted counts.
#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    drafted: usize,
    accepted: usize,
}

fn hash<T: Hash>(v: T) -> u64 {
    let mut h = DefaultHasher::new();
    v.hash(&mut h);
    h.finish()
}

/// Hash of the cache's rows: every position of every layer that keeps
/// every position; the last `ring_keep` positions of a ring layer (a
/// sliding window's: the rows its attention can still read).
fn kv_hash(session: &Session, ring_keep: usize) -> u64 {
    let cache = &session.state().cache;
    let mut h = DefaultHasher::new();
    cache.len().hash(&mut h);
    for (l, layer) in cache.layers().iter().enumerate() {
        let from = if layer.capacity() >= cache.n_ctx() {
            0
        } else {
            cache.len().saturating_sub(ring_keep)
        };
        for pos in from..cache.len() {
            let (k, v) = cache
                .stored_rows(l, pos)
                .unwrap_or_else(|| panic!("layer {l} lost position {pos}"));
            k.hash(&mut h);
            v.hash(&mut h);
        }
    }
    h.finish()
}

/// One generation case.
struct Case {
    prompt: String,
    sampling: SamplerOptions,
    opts: GenerateOptions,
    n_ctx: usize,
    /// Rows of a ring layer to compare (see [`kv_hash`]).
    ring_keep: usize,
    /// Limit how far the cache may rewind (forces the recompute path).
    max_rewind: Option<usize>,
}

fn run(
    g: &Generator,
    case: &Case,
    threads: usize,
    spec: Option<Speculation<'_>>,
) -> Result<(Outcome, Counts), Error> {
    let mut session = Session::new(
        g.model(),
        g.tokenizer(),
        Some(case.n_ctx),
        Threads::new(threads),
    )?;
    if let Some(n) = case.max_rewind {
        session.state_mut().cache.set_max_rewind(n);
    }
    session.set_speculation(spec);
    let prompt = g.tokenizer().encode(&case.prompt, true, true);
    session.set_prompt(&prompt)?;
    let mut sampler = Sampler::new(case.sampling.clone());
    let mut pieces = Vec::new();
    let stop = session.generate(&mut sampler, &case.opts, |p| {
        pieces.push(p.to_string());
        true
    })?;
    let logits: Vec<u32> = session.logits().iter().map(|v| v.to_bits()).collect();
    let outcome = Outcome {
        text: pieces.concat(),
        pieces,
        tokens: session.tokens().to_vec(),
        stop,
        generated: session.stats.generated_tokens,
        logits: hash(&logits),
        kv: kv_hash(&session, case.ring_keep),
    };
    let counts = Counts {
        drafted: session.stats.drafted,
        accepted: session.stats.accepted,
    };
    Ok((outcome, counts))
}

/// Replays a known sequence: `wrong` changes every proposed token, so
/// every draft is rejected; otherwise every draft is accepted.
struct Replay {
    tokens: Vec<u32>,
    wrong: bool,
    n_vocab: u32,
}

impl Drafter for Replay {
    fn propose(&mut self, context: &[u32], max: usize, out: &mut Vec<u32>) -> Result<(), Error> {
        for i in 0..max {
            match self.tokens.get(context.len() + i) {
                Some(&t) if self.wrong => out.push((t + 1) % self.n_vocab),
                Some(&t) => out.push(t),
                None => break,
            }
        }
        Ok(())
    }
}

/// Options that exercise every part of the sampler.
fn seeded() -> SamplerOptions {
    SamplerOptions {
        temperature: 0.8,
        top_k: 40,
        top_p: 0.95,
        min_p: 0.05,
        repeat_penalty: 1.1,
        seed: 1234,
        ..SamplerOptions::default()
    }
}

fn schema() -> Arc<Grammar> {
    let schema = serde_json::json!({
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "items": {"type": "array", "items": {"type": "integer"}, "maxItems": 4}
        },
        "required": ["name", "items"]
    });
    Arc::new(Grammar::from_schema(&schema).unwrap())
}

/// A prompt whose continuation quotes it (lookup accepts much).
const REPEATING: &str = "fn add(a: i32, b: i32) -> i32 { a + b }\n\
    fn sub(a: i32, b: i32) -> i32 { a - b }\n\
    fn mul(a: i32, b: i32) -> i32 { a * b }\n\
    fn add(a: i32, b: i32) -> i32 { a + b }\n\
    fn sub(a: i32, b: i32) -> i32 { a - b }\n\
    fn mul(a: i32, b: i32) -> i32 { a * b }\n\
    fn add(a: i32, b: i32) -> i32 {";
/// A repeating prompt short enough for the fixtures' small vocabulary
/// and context.
const SHORT_REPEATING: &str = "x = a + b; y = a + b; z = a + b; w =";
/// A prompt with little to copy.
const OPEN: &str = "Once upon a time, in a small village by the sea,";

/// The cases every model runs: two prompts, greedy, seeded, seeded with a
/// JSON schema, seeded with stop strings.
fn cases(repeating: &str, max_tokens: usize, n_ctx: usize) -> Vec<Case> {
    let mut out = Vec::new();
    for prompt in [repeating, OPEN] {
        let base = |sampling: SamplerOptions, opts: GenerateOptions| Case {
            prompt: prompt.to_string(),
            sampling,
            opts,
            n_ctx,
            ring_keep: usize::MAX,
            max_rewind: None,
        };
        let limit = GenerateOptions {
            max_tokens: Some(max_tokens),
            ..GenerateOptions::default()
        };
        out.push(base(SamplerOptions::greedy(), limit.clone()));
        out.push(base(seeded(), limit.clone()));
        out.push(base(
            seeded(),
            GenerateOptions {
                json: Some(schema()),
                ..limit.clone()
            },
        ));
        out.push(base(
            seeded(),
            GenerateOptions {
                stop: vec!["b }".into(), "\n\n".into(), "sea".into()],
                ..limit.clone()
            },
        ));
    }
    out
}

/// Every drafter gives plain decoding's outcome on `g` for every case;
/// returns the drafted/accepted counts per drafter name, summed.
fn check_all_drafters(
    g: &Generator,
    draft: Option<&Generator>,
    cases: &[Case],
    threads: &[usize],
) -> Vec<(&'static str, Counts)> {
    let mut totals: Vec<(&'static str, Counts)> = Vec::new();
    let mut add = |name: &'static str, c: Counts| match totals.iter_mut().find(|(n, _)| *n == name)
    {
        Some((_, t)) => {
            t.drafted += c.drafted;
            t.accepted += c.accepted;
        }
        None => totals.push((name, c)),
    };
    let n_vocab = g.model().n_vocab() as u32;
    for (i, case) in cases.iter().enumerate() {
        for &t in threads {
            let (plain, none) = run(g, case, t, None).unwrap();
            assert_eq!(none.drafted, 0);
            let mut drafters: Vec<(&'static str, Speculation)> = vec![
                (
                    "lookup",
                    Speculation::new(Box::new(PromptLookup::default()), 8),
                ),
                (
                    "always right",
                    Speculation::new(
                        Box::new(Replay {
                            tokens: plain.tokens.clone(),
                            wrong: false,
                            n_vocab,
                        }),
                        5,
                    ),
                ),
                (
                    "always wrong",
                    Speculation::new(
                        Box::new(Replay {
                            tokens: plain.tokens.clone(),
                            wrong: true,
                            n_vocab,
                        }),
                        3,
                    ),
                ),
            ];
            if let Some(d) = draft {
                let dm = DraftModel::new(d.model(), case.n_ctx, Threads::new(t)).unwrap();
                drafters.push(("draft model", Speculation::new(Box::new(dm), 4)));
            }
            for (name, spec) in drafters {
                let (out, counts) = run(g, case, t, Some(spec)).unwrap();
                assert!(
                    out == plain,
                    "case {i} ({:?}, json {}, stop {:?}), {t} threads, drafter {name}: \
                     speculation changed the output\nplain: {plain:?}\nspec:  {out:?}",
                    case.prompt.get(..20),
                    case.opts.json.is_some(),
                    case.opts.stop,
                );
                assert!(counts.accepted <= counts.drafted);
                add(name, counts);
            }
        }
    }
    totals
}

fn counts(totals: &[(&str, Counts)], name: &str) -> Counts {
    totals.iter().find(|(n, _)| *n == name).unwrap().1
}

/// The always-right drafter has every draft accepted, the always-wrong
/// none, and lookup some: the paths under test did run.
fn check_counts(totals: &[(&str, Counts)]) {
    check_right_and_wrong(totals);
    let lookup = counts(totals, "lookup");
    assert!(lookup.accepted > 0, "{lookup:?}");
}

/// As [`check_counts`], for the always-right and always-wrong drafters
/// only.
fn check_right_and_wrong(totals: &[(&str, Counts)]) {
    let right = counts(totals, "always right");
    assert!(
        right.drafted > 0 && right.accepted == right.drafted,
        "{right:?}"
    );
    let wrong = counts(totals, "always wrong");
    assert!(wrong.drafted > 0 && wrong.accepted == 0, "{wrong:?}");
}

fn fixture(name: &str) -> Generator {
    let path = common::testdata().join("hf-decoders").join(name);
    ferrite::open(path.to_str().unwrap())
        .unwrap()
        .into_generator()
        .unwrap()
}

#[test]
fn random_weight_fixture_output_is_plain_decoding() {
    let g = fixture("tiny-llama3.q8_0.gguf");
    let draft = fixture("tiny-llama3.f32.gguf");
    check_same_vocab(g.tokenizer(), draft.tokenizer()).unwrap();
    let totals = check_all_drafters(&g, Some(&draft), &cases(SHORT_REPEATING, 40, 128), &[1, 2]);
    check_counts(&totals);
    let dm = counts(&totals, "draft model");
    assert!(dm.drafted > 0, "{dm:?}");
    eprintln!("{totals:?}");
}

#[test]
fn smollm2_output_is_plain_decoding() {
    let g = ferrite::open(common::real_model("smollm2").to_str().unwrap())
        .unwrap()
        .into_generator()
        .unwrap();
    // The model drafting for itself: greedy drafts of the same logits.
    let totals = check_all_drafters(&g, Some(&g), &cases(REPEATING, 32, 512), &[2]);
    check_counts(&totals);
    let dm = counts(&totals, "draft model");
    assert!(dm.accepted > 0, "{dm:?}");
    eprintln!("{totals:?}");
    // One thread, the cases lookup accepts most in (greedy and seeded).
    let some: Vec<Case> = cases(REPEATING, 32, 512).into_iter().take(2).collect();
    check_all_drafters(&g, None, &some, &[1]);
}

/// Gemma 3's local layers keep a ring of slots: drafts past the window
/// wrap it, and a rollback that goes further back than the ring allows
/// is recomputed from the start; the output stays plain decoding's.
#[test]
fn sliding_window_rollback_fixture() {
    let g = fixture("tiny-gemma3.q8_0.gguf");
    for max_rewind in [None, Some(1), Some(3)] {
        let cases: Vec<Case> = cases(SHORT_REPEATING, 40, 128)
            .into_iter()
            .map(|c| Case { max_rewind, ..c })
            .collect();
        let totals = check_all_drafters(&g, None, &cases, &[2]);
        check_counts(&totals);
    }
}

#[test]
fn sliding_window_rollback_gemma3() {
    let g = ferrite::open(common::real_model("gemma3-270m").to_str().unwrap())
        .unwrap()
        .into_generator()
        .unwrap();
    // A prompt past the window (512) and a context past a local layer's
    // ring (767 slots), so that the rings wrap while drafting.
    let long = REPEATING.repeat(5);
    let n = g.tokenizer().encode(&long, true, true).len();
    assert!(n > 800, "{n} tokens");
    let mk = |sampling, max_rewind| Case {
        prompt: long.clone(),
        sampling,
        opts: GenerateOptions {
            max_tokens: Some(24),
            ..GenerateOptions::default()
        },
        n_ctx: 1024,
        ring_keep: 512,
        max_rewind,
    };
    let cases = vec![
        mk(SamplerOptions::greedy(), None),
        mk(seeded(), None),
        mk(SamplerOptions::greedy(), Some(2)),
    ];
    let totals = check_all_drafters(&g, None, &cases, &[2]);
    check_counts(&totals);
}

/// After a rejected draft the cache holds exactly plain decoding's rows,
/// checked after every round (not only at the end): generation stopped
/// after each token count gives plain decoding's cache.
#[test]
fn cache_after_rejection_equals_plain() {
    let g = fixture("tiny-llama3.q8_0.gguf");
    for max_tokens in 1..=12 {
        let case = Case {
            prompt: OPEN.into(),
            sampling: seeded(),
            opts: GenerateOptions {
                max_tokens: Some(max_tokens),
                ..GenerateOptions::default()
            },
            n_ctx: 128,
            ring_keep: usize::MAX,
            max_rewind: None,
        };
        let (plain, _) = run(&g, &case, 1, None).unwrap();
        let wrong = Replay {
            tokens: plain.tokens.clone(),
            wrong: true,
            n_vocab: g.model().n_vocab() as u32,
        };
        let (out, counts) = run(&g, &case, 1, Some(Speculation::new(Box::new(wrong), 4))).unwrap();
        assert_eq!(out, plain, "{max_tokens} tokens");
        assert!(counts.drafted > 0 || max_tokens == 1);
    }
}

#[test]
fn a_draft_model_with_another_vocabulary_is_refused() {
    let a = fixture("tiny-llama3.q8_0.gguf");
    let b = fixture("tiny-qwen3.q8_0.gguf");
    let err = check_same_vocab(a.tokenizer(), b.tokenizer()).unwrap_err();
    assert!(err.to_string().contains("same tokenizer"), "{err}");
}

#[test]
fn lookup_without_a_match_drafts_nothing() {
    let mut l = PromptLookup::default();
    let mut out = Vec::new();
    l.propose(&[1, 2, 3, 4], 8, &mut out).unwrap();
    assert!(out.is_empty());
}

/// The facade's `GenerateOptions::speculate` (what Python's `lookup=True`
/// and `draft=` set) gives the text of plain decoding; a draft model with
/// another vocabulary is an error, not a panic.
#[test]
fn facade_speculate_option_changes_no_text() {
    let g = fixture("tiny-llama3.q8_0.gguf");
    let draft = Arc::new(fixture("tiny-llama3.f32.gguf"));
    let complete = |speculate: Option<ferrite::Speculate>, sampling: &SamplerOptions| {
        let opts = GenerateOptions {
            max_tokens: Some(40),
            stop: vec!["\n\n".into()],
            speculate,
            ..GenerateOptions::default()
        };
        let mut text = String::new();
        let stop = g.complete_in(
            SHORT_REPEATING,
            sampling,
            &opts,
            Threads::new(2),
            Some(128),
            |p| {
                text.push_str(p);
                true
            },
        );
        stop.map(|s| (text, s))
    };
    for sampling in [SamplerOptions::greedy(), seeded()] {
        let plain = complete(None, &sampling).unwrap();
        let lookup = complete(Some(ferrite::Speculate::Lookup { max: 8 }), &sampling).unwrap();
        assert_eq!(lookup, plain);
        let with_draft = ferrite::Speculate::Draft {
            model: draft.clone(),
            max: 4,
        };
        assert_eq!(complete(Some(with_draft), &sampling).unwrap(), plain);
    }
    let other = ferrite::Speculate::Draft {
        model: Arc::new(fixture("tiny-qwen3.q8_0.gguf")),
        max: 4,
    };
    let err = complete(Some(other), &SamplerOptions::greedy()).unwrap_err();
    assert!(err.to_string().contains("same tokenizer"), "{err}");
}

/// Generation that runs into the end of the context stops where plain
/// decoding stops (drafts are cut to the room left).
#[test]
fn context_full_is_plain_decoding() {
    let g = fixture("tiny-llama3.q8_0.gguf");
    let cases: Vec<Case> = [SHORT_REPEATING, OPEN]
        .iter()
        .flat_map(|p| {
            [SamplerOptions::greedy(), seeded()].map(|sampling| Case {
                prompt: p.to_string(),
                sampling,
                opts: GenerateOptions::default(),
                n_ctx: 48,
                ring_keep: usize::MAX,
                max_rewind: None,
            })
        })
        .collect();
    let full = cases
        .iter()
        .filter(|c| run(&g, c, 1, None).unwrap().0.stop == StopReason::ContextFull)
        .count();
    assert!(full > 0, "no case filled the context");
    let totals = check_all_drafters(&g, Some(&fixture("tiny-llama3.f32.gguf")), &cases, &[1]);
    check_right_and_wrong(&totals);
    let dm = counts(&totals, "draft model");
    assert!(dm.accepted > 0, "{dm:?}");
}
