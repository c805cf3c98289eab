//! Continuous batching: one thread per generation model that, between
//! forward passes, drops requests whose client went away, admits waiting
//! requests while sequences and KV memory allow, and then runs one
//! `Decoder::forward_batch` over every running sequence's next token plus
//! as many prompt tokens of sequences still in prefill as the pass has
//! room for. Each row of that pass is bit-identical to running its
//! sequence alone, and each choice samples with its own seeded generator,
//! so a request's tokens do not depend on what else is running.
//!
//! KV caches are paged (`ferrite::serving::KvCache`): blocks of 16
//! positions, counted in the model's pool, shared copy-on-write. A
//! request's prompt is prefilled once; when its last prompt token has
//! run, its cache is forked into `n` choices that share the prompt's
//! blocks (each copies only the partly filled last one when it writes its
//! first token). A choice's blocks are let go the moment it ends.
//! Admission is first-come first-served and waits (never fails
//! mid-sequence) while the KV memory a request may need is not free: its
//! prompt's blocks once, plus `n` times the blocks of `max_tokens` more
//! positions (`GenModel::kv_need`).
//!
//! At admission, the longest prefix of the prompt found in the prefix
//! cache (`prefix.rs`: whole blocks of prompts that ran before) is shared
//! into the request's cache, and prefill starts after it; when the prompt
//! has run, its blocks not cached yet are shared into the prefix cache.
//! When the last request ends, freed heap memory is handed back to the
//! system (`malloc_trim`), so the process's RSS comes back down after a
//! burst.
//!
//! With `ferrite serve --lookup`, a decoding choice may feed a draft of
//! the tokens likely to follow its next one (prompt lookup, see
//! `choice.rs`); the drafted rows join the same pass and take their room
//! from the pass's token budget before prompt rows do. What a choice
//! emits is the same as without.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrite::serving::BatchItem;
use ferrite::serving::KvCache;
use ferrite::serving::{Logits, Workspace};
use ferrite::Threads;

use super::choice::{Choice, Ends};
use super::prefix::PrefixCache;
use super::request::{Event, GenRequest, Usage};
use super::{GenModel, KvNeed};
use crate::config::Limits;
use crate::error::ApiError;

/// How long an idle scheduler sleeps before looking at its queue again.
const IDLE_WAIT: Duration = Duration::from_millis(50);

/// Starts the scheduler thread of `model`.
pub fn spawn(
    model: Arc<GenModel>,
    threads: Threads,
    limits: Limits,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name(format!("ferrite-scheduler-{}", model.name))
        .spawn(move || {
            let m = &*model;
            Scheduler::new(m, threads, limits).run();
        })
}

/// An admitted request.
struct Active<'t> {
    req: GenRequest,
    /// KV bytes reserved for the prompt, and per live choice.
    need: KvNeed,
    stage: Stage<'t>,
    completion_tokens: usize,
    first_token_seen: bool,
    /// Prompt positions copied from the prefix cache.
    cached: usize,
    /// The prefix-cache block held until the prompt has run.
    held: Option<u64>,
}

enum Stage<'t> {
    /// The prompt's first `fed` tokens are in the cache.
    Prefill {
        cache: KvCache,
        fed: usize,
    },
    Decode(Vec<Choice<'t>>),
}

impl Active<'_> {
    /// KV bytes the request holds reserved now.
    fn reserved(&self) -> usize {
        self.need.total(self.live())
    }

    /// Sequences this request runs (or will run, during prefill).
    fn live(&self) -> usize {
        match &self.stage {
            Stage::Prefill { .. } => self.req.params.n,
            Stage::Decode(choices) => choices.iter().filter(|c| !c.is_finished()).count(),
        }
    }
}

/// Whose rows a batch item holds.
enum Owner {
    /// `k` prompt tokens of request `a`.
    Prefill { a: usize, k: usize },
    /// The next token (and draft) of choice `c` of request `a`: `rows`
    /// rows of logits.
    Decode { a: usize, c: usize, rows: usize },
}

struct Scheduler<'t> {
    m: &'t GenModel,
    threads: Threads,
    limits: Limits,
    ws: Workspace,
    logits: Vec<f32>,
    active: Vec<Active<'t>>,
    /// KV bytes reserved by admitted requests.
    reserved: usize,
    prefix: PrefixCache,
    /// Memory was freed since the scheduler was last idle.
    freed: bool,
}

impl<'t> Scheduler<'t> {
    fn new(m: &'t GenModel, threads: Threads, limits: Limits) -> Self {
        Scheduler {
            ws: m.decoder().new_workspace(m.ctx, threads.count()),
            m,
            threads,
            limits,
            logits: Vec::new(),
            active: Vec::new(),
            reserved: 0,
            freed: false,
            prefix: PrefixCache::new(limits.prefix_cache_mib.saturating_mul(1 << 20)),
        }
    }

    fn run(&mut self) {
        loop {
            self.drop_cancelled();
            self.admit();
            self.update_gauges();
            if self.active.is_empty() {
                if std::mem::take(&mut self.freed) {
                    release_free_memory();
                }
                self.m.queue.wait(IDLE_WAIT);
                continue;
            }
            if catch_unwind(AssertUnwindSafe(|| self.step())).is_err() {
                self.fail_all(ApiError::internal(
                    "internal error: the forward pass panicked",
                ));
            }
        }
    }

    fn running(&self) -> usize {
        self.active.iter().map(Active::live).sum()
    }

    fn update_gauges(&self) {
        let mm = &self.m.metrics;
        let waiting = self.m.queue.lock().requests.len();
        mm.queue.set(waiting as i64);
        mm.running.set(self.running() as i64);
        mm.kv_usage
            .set(self.reserved as f64 / self.m.kv_budget.max(1) as f64);
        mm.prefix_cache_bytes.set(self.prefix.stats.bytes as i64);
        mm.kv_pool_bytes.set(self.m.pool.bytes() as i64);
        let evicted = self.prefix.stats.evicted_blocks;
        mm.prefix_evicted
            .inc_by(evicted - mm.prefix_evicted.get().min(evicted));
    }

    /// Forgets requests whose receiver is gone (client disconnected).
    fn drop_cancelled(&mut self) {
        let mut q = self.m.queue.lock();
        let before = q.requests.len();
        q.requests.retain(|r| !r.events.is_closed());
        let gone = before - q.requests.len();
        drop(q);
        let (mut freed, mut cancelled) = (0, 0);
        let prefix = &mut self.prefix;
        self.active.retain(|a| {
            let closed = a.req.events.is_closed();
            if closed {
                freed += a.reserved();
                cancelled += 1;
                prefix.release(a.held);
            }
            !closed
        });
        self.reserved -= freed;
        self.freed |= cancelled > 0;
        let dropped = gone + cancelled;
        if dropped > 0 {
            self.m.metrics.requests.inc_by(dropped as u64);
        }
    }

    /// Admits waiting requests, oldest first, while sequences and KV
    /// memory allow.
    fn admit(&mut self) {
        let mut admitted = Vec::new();
        {
            let mut q = self.m.queue.lock();
            let mut running = self.running();
            while let Some(head) = q.requests.front() {
                let n = head.params.n;
                let need = self.m.kv_need(head.prompt.len(), 0, head.params.max_tokens);
                if running + n > self.limits.max_seqs
                    || self.reserved + need.total(n) > self.m.kv_budget
                {
                    break;
                }
                running += n;
                self.reserved += need.total(n);
                if let Some(req) = q.requests.pop_front() {
                    admitted.push((req, need));
                }
            }
        }
        for (req, need) in admitted {
            // A panic fails this request (500), not the scheduler. Until
            // its last step (the request joins `active`) `start` changes
            // only the reservation, set back here without this request, and
            // the prefix cache, whose lookup leaves it whole (at worst one
            // block stays held), hence AssertUnwindSafe.
            let events = req.events.clone();
            let reserved = self.reserved - need.total(req.params.n);
            if catch_unwind(AssertUnwindSafe(|| self.start(req, need))).is_err() {
                tracing::error!(model = %self.m.name, "admitting a request panicked");
                self.reserved = reserved;
                self.m.metrics.requests.inc();
                let _ = events.send(Event::Failed(ApiError::internal(
                    "internal error: admitting the request panicked",
                )));
            }
        }
    }

    /// Starts an admitted request: its cache, with what the prefix cache
    /// holds of its prompt.
    fn start(&mut self, req: GenRequest, mut need: KvNeed) {
        crate::test_hook::panic_once("admit");
        match self.m.decoder().new_cache_in(req.positions(), &self.m.pool) {
            Ok(mut cache) => {
                let hit = self.prefix.lookup(&req.prompt, &mut cache);
                self.m.metrics.cached_tokens.inc_by(hit.positions as u64);
                // The prompt's cached blocks are shared, not new.
                let prompt = self
                    .m
                    .kv_need(req.prompt.len(), hit.positions, req.params.max_tokens)
                    .prompt;
                self.reserved -= need.prompt - prompt;
                need.prompt = prompt;
                self.active.push(Active {
                    req,
                    need,
                    stage: Stage::Prefill {
                        cache,
                        fed: hit.positions,
                    },
                    completion_tokens: 0,
                    first_token_seen: false,
                    cached: hit.positions,
                    held: hit.held,
                })
            }
            Err(e) => {
                self.reserved -= need.total(req.params.n);
                let _ = req
                    .events
                    .send(Event::Failed(ApiError::from_lib(&e, "prompt")));
            }
        }
    }

    /// Fails every admitted request (after an error in a forward pass).
    fn fail_all(&mut self, error: ApiError) {
        let n = self.active.len();
        for a in self.active.drain(..) {
            self.prefix.release(a.held);
            let _ = a.req.events.send(Event::Failed(error.clone()));
        }
        self.reserved = 0;
        self.m.metrics.requests.inc_by(n as u64);
    }

    /// One forward pass and what follows from its logits.
    fn step(&mut self) {
        let decode_rows: usize = self
            .active
            .iter()
            .map(|a| match &a.stage {
                Stage::Decode(cs) => cs.iter().filter(|c| c.next.is_some()).count(),
                Stage::Prefill { .. } => 0,
            })
            .sum();
        let mut room = self.limits.batch_tokens.saturating_sub(decode_rows);
        for a in &mut self.active {
            if let Stage::Decode(choices) = &mut a.stage {
                for c in choices {
                    let fed = c.prepare_feed(room, &a.req.params);
                    room -= fed.saturating_sub(1);
                }
            }
        }
        let mut items = Vec::new();
        let mut owners = Vec::new();
        for (ai, a) in self.active.iter_mut().enumerate() {
            match &mut a.stage {
                Stage::Decode(choices) => {
                    for (ci, c) in choices.iter_mut().enumerate() {
                        if let (false, Some(cache)) = (c.feed.is_empty(), &mut c.cache) {
                            let rows = c.feed.len();
                            items.push(BatchItem {
                                tokens: &c.feed,
                                cache,
                                logits: if rows > 1 { Logits::All } else { Logits::Last },
                            });
                            owners.push(Owner::Decode { a: ai, c: ci, rows });
                        }
                    }
                }
                Stage::Prefill { cache, fed } => {
                    let k = (a.req.prompt.len() - *fed).min(room);
                    if k > 0 {
                        room -= k;
                        items.push(BatchItem {
                            tokens: &a.req.prompt[*fed..*fed + k],
                            cache,
                            logits: Logits::Last,
                        });
                        owners.push(Owner::Prefill { a: ai, k });
                    }
                }
            }
        }
        let result = self.m.decoder().forward_batch(
            &mut items,
            &mut self.ws,
            &self.threads,
            &mut self.logits,
        );
        drop(items);
        if let Err(e) = result {
            self.fail_all(ApiError::from_lib(&e, "prompt"));
            return;
        }
        let logits = std::mem::take(&mut self.logits);
        let nv = self.m.lm.n_vocab();
        let mut at = 0;
        for owner in owners {
            match owner {
                Owner::Prefill { a, k } => {
                    self.prefilled(a, k, &logits[at..at + nv]);
                    at += nv;
                }
                Owner::Decode { a, c, rows } => {
                    self.advance(a, c, &logits[at..at + rows * nv]);
                    at += rows * nv;
                }
            }
        }
        self.logits = logits;
        self.retire_finished();
    }

    /// `k` more prompt tokens of request `a` ran; after the last, its cache
    /// is forked into its choices, which pick their first tokens.
    fn prefilled(&mut self, a: usize, k: usize, logits: &[f32]) {
        let act = &mut self.active[a];
        let Stage::Prefill { fed, .. } = &mut act.stage else {
            return;
        };
        *fed += k;
        if *fed < act.req.prompt.len() {
            return;
        }
        let n = act.req.params.n;
        self.m
            .metrics
            .prompt_tokens
            .inc_by(act.req.prompt.len() as u64);
        let stage = std::mem::replace(&mut act.stage, Stage::Decode(Vec::new()));
        let Stage::Prefill { cache, .. } = stage else {
            return;
        };
        self.prefix.insert(&act.req.prompt, &cache, act.held.take());
        let lookup = self.limits.lookup.filter(|_| act.req.params.speculate);
        let new_choice = |i, cache| {
            Choice::new(
                i,
                cache,
                &act.req.params,
                &self.m.tokenizer,
                &self.m.end_tokens,
                &act.req.prompt,
                lookup,
            )
        };
        let mut choices = Vec::with_capacity(n);
        for i in 0..n - 1 {
            choices.push(new_choice(i, cache.fork()));
        }
        choices.push(new_choice(n - 1, cache));
        act.stage = Stage::Decode(choices);
        for c in 0..n {
            self.advance(a, c, logits);
        }
    }

    /// Choice `c` of request `a` picks its next tokens from `rows` (one
    /// row of logits per token it fed; one after its prompt).
    fn advance(&mut self, a: usize, c: usize, rows: &[f32]) {
        let m = self.m;
        let act = &mut self.active[a];
        let Stage::Decode(choices) = &mut act.stage else {
            return;
        };
        let choice = &mut choices[c];
        let ends = Ends {
            tokenizer: &m.tokenizer,
            end_tokens: &m.end_tokens,
            params: &act.req.params,
        };
        let before = choice.generated();
        let events = &act.req.events;
        let (finished, spec) = choice.advance_rows(rows, m.lm.n_vocab(), &ends, &mut |ev| {
            // A closed receiver is noticed at the next step.
            let _ = events.send(ev);
        });
        if spec.drafted > 0 {
            let mm = &m.metrics;
            mm.drafted_tokens.inc_by(spec.drafted as u64);
            mm.accepted_tokens.inc_by(spec.accepted as u64);
            mm.acceptance
                .set(mm.accepted_tokens.get() as f64 / mm.drafted_tokens.get() as f64);
        }
        let new = choice.generated() - before;
        if new > 0 {
            let now = Instant::now();
            act.completion_tokens += new;
            m.metrics.generated_tokens.inc_by(new as u64);
            if !act.first_token_seen {
                act.first_token_seen = true;
                m.metrics
                    .ttft
                    .observe(now.duration_since(act.req.arrived).as_secs_f64());
            }
            if let Some(t) = choice.last_token_at {
                m.metrics.itl.observe(now.duration_since(t).as_secs_f64());
            }
            // Confirmed drafted tokens arrive with the first, no time apart.
            for _ in 1..new {
                m.metrics.itl.observe(0.0);
            }
            choice.last_token_at = Some(now);
        }
        if finished.is_some() {
            self.reserved -= act.need.per_choice;
            // The first choice's prompt and reply (the tokens that ran: all
            // but the last picked) go to the prefix cache, for the next
            // turn of a chat; the cache is then freed.
            if let Some(cache) = choice.ended_cache.take() {
                if c == 0 {
                    let ran = cache.len().saturating_sub(act.req.prompt.len());
                    let mut seq = act.req.prompt.clone();
                    seq.extend(choice.tokens.iter().take(ran));
                    self.prefix.insert(&seq, &cache, None);
                }
            }
        }
    }

    /// Removes requests whose every choice has ended, updates the gauges,
    /// then reports them (so a client that has its answer sees the
    /// metrics without it).
    fn retire_finished(&mut self) {
        let (done, running): (Vec<Active>, Vec<Active>) = self.active.drain(..).partition(
            |a| matches!(&a.stage, Stage::Decode(cs) if cs.iter().all(Choice::is_finished)),
        );
        self.active = running;
        for a in &done {
            self.reserved -= a.need.prompt;
        }
        self.freed |= !done.is_empty();
        self.update_gauges();
        let m = &self.m.metrics;
        for a in done {
            m.requests.inc();
            m.latency.observe(a.req.arrived.elapsed().as_secs_f64());
            let _ = a.req.events.send(Event::Done(Usage {
                prompt_tokens: a.req.prompt.len(),
                completion_tokens: a.completion_tokens,
                cached_tokens: a.cached,
            }));
        }
    }
}

/// Hands the heap's free memory back to the system: glibc keeps freed
/// blocks in its arenas (the scheduler's thread has an arena of its own)
/// and returns only the top of each heap by itself.
fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks and trims the allocator's own free
    // lists; it takes the arenas' locks and touches no caller memory.
    unsafe {
        libc::malloc_trim(0);
    }
}
