//! The GGUF reader and writer on the two real model files.

mod common;

use ferrite::formats::gguf::{write_gguf, GgufFile, TensorToWrite};

fn round_trip(short_name: &str) {
    let path = common::real_model(short_name);
    let file = GgufFile::open(&path).unwrap();
    let tensors: Vec<TensorToWrite> = file
        .tensors()
        .map(|t| TensorToWrite {
            name: &t.info.name,
            dims: &t.info.dims,
            ty: t.info.ty,
            data: t.data,
        })
        .collect();
    let mut out = Vec::new();
    write_gguf(&mut out, file.header().version, file.metadata(), &tensors).unwrap();
    assert_eq!(out.len(), file.bytes().len(), "written size differs");
    assert!(
        out == file.bytes(),
        "written bytes differ from {}",
        path.display()
    );
    let again = GgufFile::from_vec("round-trip", out).unwrap();
    assert_eq!(again.header(), file.header());
}

#[test]
fn smollm2_round_trips_byte_identical() {
    round_trip("smollm2");
}

#[test]
fn gemma3_round_trips_byte_identical() {
    round_trip("gemma3-270m");
}
