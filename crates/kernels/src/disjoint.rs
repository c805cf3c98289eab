//! [`DisjointSlice`]: one output slice that several threads write at
//! disjoint places (each thread its own rows of a product).

use std::marker::PhantomData;

/// A slice that several threads write at disjoint indices.
pub struct DisjointSlice<'a, T> {
    ptr: *mut T,
    len: usize,
    _borrow: PhantomData<&'a mut [T]>,
}

// SAFETY: the wrapper only hands out writes through `write` / `segment`,
// whose contracts require callers on different threads to use disjoint
// indices; T: Send makes moving values into another thread's view sound.
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

    /// The start of the slice, for kernels that write disjoint strided
    /// places (e.g. some columns of every row) through raw pointers. Every
    /// write through it falls under the same contract as [`Self::write`].
    pub fn as_mut_ptr(&self) -> *mut T {
        self.ptr
    }

    /// The length of the slice.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
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
