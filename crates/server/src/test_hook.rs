//! A panic on demand, for the tests that check a worker thread survives
//! one (no real input is known to make these threads panic). Debug builds
//! only: `FERRITE_TEST_PANIC=embed,admit` makes the first unit of work at
//! each named site panic, once. In release builds [`panic_once`] is empty.

/// Panics the first time it is called for `site` if `FERRITE_TEST_PANIC`
/// (a comma-separated list, read once) names it; otherwise does nothing.
#[cfg(debug_assertions)]
pub fn panic_once(site: &str) {
    use std::sync::{Mutex, OnceLock};
    static ARMED: OnceLock<Mutex<Vec<String>>> = OnceLock::new();
    let armed = ARMED.get_or_init(|| {
        let sites = std::env::var("FERRITE_TEST_PANIC").unwrap_or_default();
        Mutex::new(
            sites
                .split(',')
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect(),
        )
    });
    let fire = {
        let mut armed = armed.lock().unwrap_or_else(|e| e.into_inner());
        let at = armed.iter().position(|s| s == site);
        at.map(|i| armed.remove(i)).is_some()
    };
    if fire {
        panic!("FERRITE_TEST_PANIC: a test panic at '{site}'");
    }
}

/// Release builds: nothing.
#[cfg(not(debug_assertions))]
#[inline(always)]
pub fn panic_once(_site: &str) {}
