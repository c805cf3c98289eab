//! Memory for repacked weights ([`Packed`]): slices of large anonymous
//! mappings shared by the matrices loaded one after the other, for which
//! Linux is asked to use transparent huge pages.

use std::sync::{Arc, Mutex, Weak};

/// Bytes of one shared mapping. A matrix of more than a quarter of this
/// gets a mapping of its own.
const CHUNK: usize = 64 << 20;

/// Where each matrix starts in a shared mapping: page-aligned, as a
/// mapping of its own would be.
const ALIGN: usize = 4096;

/// Repacked weights: `len` bytes at `start` of a mapping (zero pages that
/// only become resident as they are written), which Linux is asked to back
/// with transparent huge pages. Decoding streams every weight once per
/// token; with 2 MiB pages the hardware prefetchers are not stopped at
/// every 4 KiB page boundary and the TLB covers far more of the stream.
///
/// Small matrices share mappings (up to [`CHUNK`] bytes, in the order they
/// are loaded): a mapping of its own per matrix got huge pages for almost
/// none of them (a page is used only where its whole aligned 2 MiB lies in
/// the mapping when it is first written), so a mixture of experts'
/// hundreds of 300 KB expert matrices were read through 4 KiB pages.
pub struct Packed {
    map: Arc<Map>,
    start: usize,
    len: usize,
}

/// One anonymous mapping and the address of its first byte.
struct Map {
    ptr: *mut u8,
    len: usize,
    _map: memmap2::MmapMut,
}

// SAFETY: `Map` owns its mapping; `ptr` only gives access to it, and
// `Packed` hands out disjoint parts of it (see `Packed::alloc`).
unsafe impl Send for Map {}
// SAFETY: as above; shared access goes through `Packed`'s borrows.
unsafe impl Sync for Map {}

impl Map {
    fn new(len: usize) -> Option<Map> {
        let mut map = memmap2::MmapMut::map_anon(len.max(1)).ok()?;
        #[cfg(target_os = "linux")]
        {
            // A hint: without huge page support the pages stay small.
            let _ = map.advise(memmap2::Advice::HugePage);
        }
        Some(Map {
            ptr: map.as_mut_ptr(),
            len: map.len(),
            _map: map,
        })
    }
}

/// The shared mapping being filled and its first free byte (held weakly:
/// it goes away with the last matrix in it).
static SHARED: Mutex<(Weak<Map>, usize)> = Mutex::new((Weak::new(), 0));

impl Packed {
    /// `len` zero bytes, or None if the OS refuses the mapping.
    pub(super) fn zeroed(len: usize) -> Option<Packed> {
        if len > CHUNK / 4 {
            let map = Arc::new(Map::new(len)?);
            return Some(Packed { map, start: 0, len });
        }
        let mut shared = SHARED.lock().unwrap_or_else(|e| e.into_inner());
        let (weak, used) = &mut *shared;
        let start = used.next_multiple_of(ALIGN);
        let map = match weak.upgrade() {
            Some(map) if start + len <= map.len => map,
            _ => {
                let map = Arc::new(Map::new(CHUNK)?);
                *weak = Arc::downgrade(&map);
                *used = len;
                return Some(Packed { map, start: 0, len });
            }
        };
        *used = start + len;
        Some(Packed { map, start, len })
    }
}

impl std::ops::Deref for Packed {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: start..start + len lies in the mapping (checked when it
        // was handed out), which lives as long as `self.map`; no other
        // `Packed` covers these bytes, and `&self` excludes `&mut self`.
        unsafe { std::slice::from_raw_parts(self.map.ptr.add(self.start), self.len) }
    }
}

impl std::ops::DerefMut for Packed {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`; these bytes belong to this `Packed` only
        // (each is handed out once, past the previous one's end), and
        // `&mut self` is unique.
        unsafe { std::slice::from_raw_parts_mut(self.map.ptr.add(self.start), self.len) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Matrices share a mapping without overlapping, each zeroed and
    /// page-aligned; a large one gets its own.
    #[test]
    fn packed_parts_are_disjoint_and_zeroed() {
        let mut parts: Vec<Packed> = (1..40).map(|i| Packed::zeroed(i * 1000).unwrap()).collect();
        for (i, p) in parts.iter_mut().enumerate() {
            assert_eq!(p.len(), (i + 1) * 1000);
            assert!(p.iter().all(|&b| b == 0));
            assert_eq!(p.as_ptr() as usize % ALIGN, 0);
            p.fill(i as u8 + 1);
        }
        for (i, p) in parts.iter().enumerate() {
            assert!(p.iter().all(|&b| b == i as u8 + 1), "part {i} overwritten");
        }
        let big = Packed::zeroed(CHUNK / 2).unwrap();
        assert_eq!(big.start, 0);
        assert_eq!(big.len(), CHUNK / 2);
    }
}
