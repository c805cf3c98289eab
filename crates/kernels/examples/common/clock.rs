//! A clock for the measurements: on Linux the thread's CPU time, so that
//! other processes on a shared machine do not count; elsewhere wall time.

use std::time::Duration;

#[cfg(target_os = "linux")]
pub const NAME: &str = "thread CPU time";
#[cfg(not(target_os = "linux"))]
pub const NAME: &str = "wall time";

#[cfg(target_os = "linux")]
pub fn now() -> Duration {
    #[repr(C)]
    struct Timespec {
        sec: i64,
        nsec: i64,
    }
    extern "C" {
        fn clock_gettime(clock: i32, t: *mut Timespec) -> i32;
    }
    const CLOCK_THREAD_CPUTIME_ID: i32 = 3;
    let mut t = Timespec { sec: 0, nsec: 0 };
    // SAFETY: `clock_gettime` from the C library std links against,
    // writing one `struct timespec` (two i64 on 64-bit Linux) to `t`.
    let rc = unsafe { clock_gettime(CLOCK_THREAD_CPUTIME_ID, &mut t) };
    assert_eq!(rc, 0, "clock_gettime");
    Duration::new(t.sec as u64, t.nsec as u32)
}

#[cfg(not(target_os = "linux"))]
pub fn now() -> Duration {
    use std::sync::OnceLock;
    use std::time::Instant;
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed()
}
