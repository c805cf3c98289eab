//! Fuzzes the GGUF header parser: any input must give `Ok` or `Err`, never a
//! panic, an abort, an allocation far beyond the input's size, or a hang.
//! On success, every tensor view is sliced (through `GgufFile::from_vec`) and
//! read, so a header that passes validation but describes data outside the
//! file would crash here.

#![no_main]

use ferrite::formats::gguf::{parse_header, GgufFile};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(header) = parse_header(data, "fuzz-input") else {
        return;
    };
    let file = GgufFile::from_vec("fuzz-input", data.to_vec())
        .expect("from_vec must accept what parse_header accepted");
    // Not `file.header == header`: a NaN in the metadata is unequal to itself.
    assert_eq!(file.header().tensors, header.tensors);
    assert_eq!(file.header().data_offset, header.data_offset);
    assert_eq!(file.metadata().len(), header.metadata.len());
    let mut n = 0usize;
    for view in file.tensors() {
        assert_eq!(view.data.len() as u64, view.info.size);
        assert_eq!(
            view.info.size,
            view.info.ty.bytes_for(view.info.n_elements()).unwrap()
        );
        // Touch the first and last byte of the slice.
        if let (Some(a), Some(b)) = (view.data.first(), view.data.last()) {
            n = n.wrapping_add(usize::from(*a) + usize::from(*b));
        }
        assert!(file.tensor(&view.info.name).is_some());
    }
    std::hint::black_box(n);
});
