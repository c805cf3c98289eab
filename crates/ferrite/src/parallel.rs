//! Splitting work across threads by output rows.
//!
//! This is the simple version: scoped threads started per call. The worker
//! pool of the speed issue replaces the inside of [`Threads::split`] without
//! changing its contract: each item is processed by exactly one thread, in a
//! fixed way that does not depend on the thread count, so results are
//! bit-identical for any number of threads.

use std::marker::PhantomData;
use std::ops::Range;

/// How many threads to use for row-parallel work.
#[derive(Clone, Debug)]
pub struct Threads {
    n: usize,
}

impl Threads {
    /// `n` threads (at least 1).
    pub fn new(n: usize) -> Threads {
        Threads { n: n.max(1) }
    }

    /// One thread per available core.
    pub fn all_cores() -> Threads {
        Threads::new(std::thread::available_parallelism().map_or(1, |n| n.get()))
    }

    pub fn count(&self) -> usize {
        self.n
    }

    /// Calls `f` on contiguous ranges that together cover `0..n_items`,
    /// concurrently, one range per thread. Returns when all are done.
    pub fn split<F: Fn(Range<usize>) + Sync>(&self, n_items: usize, f: F) {
        self.split_indexed(n_items, |_, range| f(range));
    }

    /// As [`Threads::split`], also passing the index (`0..count()`) of the
    /// thread running each range, for per-thread scratch space.
    pub fn split_indexed<F: Fn(usize, Range<usize>) + Sync>(&self, n_items: usize, f: F) {
        let n = self.n.min(n_items.max(1));
        if n == 1 {
            f(0, 0..n_items);
            return;
        }
        let per = n_items.div_ceil(n);
        std::thread::scope(|s| {
            let f = &f;
            for i in 1..n {
                let range = (i * per).min(n_items)..((i + 1) * per).min(n_items);
                s.spawn(move || f(i, range));
            }
            f(0, 0..per.min(n_items));
        });
    }
}

/// A slice that several threads write at disjoint indices.
pub struct DisjointSlice<'a, T> {
    ptr: *mut T,
    len: usize,
    _borrow: PhantomData<&'a mut [T]>,
}

// SAFETY: the wrapper only hands out writes through `write`, whose contract
// requires callers on different threads to use disjoint indices; T: Send
// makes moving values into another thread's view sound.
unsafe impl<T: Send> Sync for DisjointSlice<'_, T> {}
// SAFETY: as above.
unsafe impl<T: Send> Send for DisjointSlice<'_, T> {}

impl<'a, T> DisjointSlice<'a, T> {
    pub fn new(slice: &'a mut [T]) -> Self {
        DisjointSlice {
            ptr: slice.as_mut_ptr(),
            len: slice.len(),
            _borrow: PhantomData,
        }
    }

    /// Writes `value` at `i`.
    ///
    /// # Safety
    /// No other thread may read or write index `i` while this wrapper is
    /// alive.
    pub unsafe fn write(&self, i: usize, value: T) {
        assert!(i < self.len, "index {i} out of bounds {}", self.len);
        // SAFETY: in bounds (checked); exclusive access to index i is the
        // caller's contract; the borrow of the slice outlives self.
        unsafe { self.ptr.add(i).write(value) }
    }

    /// A mutable view of `len` values from `start`.
    ///
    /// # Safety
    /// No other thread may access any index of that range while the view
    /// is alive.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn segment(&self, start: usize, len: usize) -> &mut [T] {
        assert!(
            start <= self.len && len <= self.len - start,
            "segment out of bounds"
        );
        // SAFETY: in bounds (checked); exclusivity is the caller's contract.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(start), len) }
    }
}
