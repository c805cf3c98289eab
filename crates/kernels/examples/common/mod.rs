//! Shared by the examples that time by CPU time.

/// This thread's CPU time in seconds (0 where it cannot be read).
pub fn thread_cpu_secs() -> f64 {
    #[cfg(all(target_os = "linux", target_pointer_width = "64"))]
    {
        #[repr(C)]
        struct Timespec {
            tv_sec: i64,
            tv_nsec: i64,
        }
        extern "C" {
            fn clock_gettime(clock: i32, tp: *mut Timespec) -> i32;
        }
        // Linux's CLOCK_THREAD_CPUTIME_ID.
        const THREAD_CPU: i32 = 3;
        let mut t = Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `t` is a valid, writable timespec (two 64-bit fields on
        // 64-bit Linux), and clock_gettime writes only it.
        if unsafe { clock_gettime(THREAD_CPU, &mut t) } == 0 {
            return t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9;
        }
    }
    0.0
}
