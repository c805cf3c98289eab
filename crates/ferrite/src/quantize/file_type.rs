//! llama.cpp's file types (`llama_ftype`) ferrite writes: their names as
//! `llama-quantize` takes them, their ids and default tensor types.

use ferrite_kernels::GgmlType;

/// A llama.cpp file type (`llama_ftype`): a name as `llama-quantize` takes
/// it, the id stored in `general.file_type`, and the default tensor type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileType {
    /// The name, as `llama-quantize` takes it (`Q4_K_M`).
    pub name: &'static str,
    /// The id stored in `general.file_type`.
    pub id: u32,
    /// The type most tensors get.
    pub default: GgmlType,
}

macro_rules! ftypes {
    ($($c:ident = $name:literal, $id:literal, $ty:ident;)*) => {
        $(#[allow(non_upper_case_globals, dead_code)] pub(super) const $c: u32 = $id;)*
        /// Every file type ferrite writes, named as `llama-quantize` names
        /// them (its aliases `Q3_K`, `Q4_K`, `Q5_K` included).
        pub const FILE_TYPES: &[FileType] = &[
            $(FileType { name: $name, id: $id, default: GgmlType::$ty },)*
        ];
    };
}

ftypes! {
    F_Q4_0 = "Q4_0", 2, Q4_0;
    F_Q4_1 = "Q4_1", 3, Q4_1;
    F_Q5_0 = "Q5_0", 8, Q5_0;
    F_Q5_1 = "Q5_1", 9, Q5_1;
    F_Q2_K = "Q2_K", 10, Q2K;
    F_Q3_K_S = "Q3_K_S", 11, Q3K;
    F_Q3_K_M = "Q3_K_M", 12, Q3K;
    F_Q3_K_L = "Q3_K_L", 13, Q3K;
    F_Q4_K_S = "Q4_K_S", 14, Q4K;
    F_Q4_K_M = "Q4_K_M", 15, Q4K;
    F_Q5_K_S = "Q5_K_S", 16, Q5K;
    F_Q5_K_M = "Q5_K_M", 17, Q5K;
    F_Q6_K = "Q6_K", 18, Q6K;
    F_Q8_0 = "Q8_0", 7, Q8_0;
    F_IQ4_NL = "IQ4_NL", 25, Iq4Nl;
    F_IQ4_XS = "IQ4_XS", 30, Iq4Xs;
    F_MXFP4_MOE = "MXFP4_MOE", 38, Mxfp4;
    F_F16 = "F16", 1, F16;
    F_BF16 = "BF16", 32, Bf16;
    F_F32 = "F32", 0, F32;
}

impl FileType {
    /// The file type named `name` (case-insensitive; `Q3_K`, `Q4_K` and
    /// `Q5_K` are `llama-quantize`'s aliases of the `_M` mixes).
    pub fn from_name(name: &str) -> Option<FileType> {
        let name = match name.to_ascii_uppercase().as_str() {
            "Q3_K" => "Q3_K_M",
            "Q4_K" => "Q4_K_M",
            "Q5_K" => "Q5_K_M",
            _ => {
                return FILE_TYPES
                    .iter()
                    .copied()
                    .find(|f| f.name.eq_ignore_ascii_case(name))
            }
        };
        FILE_TYPES.iter().copied().find(|f| f.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_aliases() {
        assert_eq!(FileType::from_name("q4_k").unwrap().name, "Q4_K_M");
        assert_eq!(FileType::from_name("Q4_K_S").unwrap().id, 14);
        assert_eq!(FileType::from_name("bf16").unwrap().id, 32);
        assert!(FileType::from_name("Q4_K_X").is_none());
        assert!(FileType::from_name("IQ2_XXS").is_none());
        assert_eq!(FileType::from_name("iq4_xs").unwrap().id, 30);
    }
}
