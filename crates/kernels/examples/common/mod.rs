//! Shared by the examples that time by CPU time (`mod common;`); the
//! others include `common/clock.rs` alone through `#[path]`.

// Each example uses only part of the clock module.
#[allow(dead_code)]
mod clock;

/// This thread's CPU time in seconds on Linux (elsewhere, wall time since
/// the first call): differences of two calls time a piece of work.
pub fn thread_cpu_secs() -> f64 {
    clock::now().as_secs_f64()
}
