//! The kernel dialect (see `spec/dialects/kernel.toml`): the level just
//! above WGSL and OpenCL C. A `kernel.func` is what one invocation does;
//! `kernel.launch` in the host function runs it: on a GPU through a
//! backend, or in the kernel interpreter (`interpret.rs`), so kernel IR is
//! checked against the graph level like every other level.

pub mod address;
pub mod builder;
mod device;
mod interpret;
mod target;
mod verify;

pub use device::{DeviceProfile, PROFILES, profiles_table};
pub use target::Target;

use ircc_core::ElemType;
use ircc_core::{Diagnostic, Registry};

pub const SPEC: &str = include_str!("../../../spec/dialects/kernel.toml");

/// Typed views of the kernel ops, generated from the spec by `ircc-ods`.
pub mod ops {
    include!(concat!(env!("OUT_DIR"), "/kernel_ops.rs"));
}

pub use ops::KernelOp;

pub fn register(registry: &mut Registry) -> Result<(), Diagnostic> {
    let hooks: Vec<_> = KernelOp::ALL
        .iter()
        .map(|&op| (op.name(), verify::op_hooks(op)))
        .collect();
    registry.add_dialect(SPEC, &hooks)
}

/// A `kernel.func` argument held in a 2.5D texture instead of a buffer,
/// with the layout of the tensor in it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TextureArg {
    pub arg: usize,
    pub width: u32,
    pub height: u32,
    /// The tensor's index -> `(x, y, lane)`.
    pub layout: ircc_core::AffineMap,
}

/// The texture arguments of kernel.func `func`, from its `textures`
/// attribute of `(argument, width, height)` triples and the layout maps of
/// `texture_layouts`.
pub fn texture_args(
    m: &ircc_core::Module,
    func: ircc_core::OpId,
) -> Result<Vec<TextureArg>, String> {
    let Some(f) = ops::Func::new(m, func) else {
        return Ok(Vec::new());
    };
    let Some(x) = f.textures() else {
        return Ok(Vec::new());
    };
    if x.len() % 3 != 0 || x.iter().any(|&v| v < 0 || v > u32::MAX as i64) {
        return Err("'textures' must be (argument, width, height) triples".to_string());
    }
    let maps: Vec<&ircc_core::AffineMap> = match f.texture_layouts() {
        Some(ircc_core::Attribute::Array(a)) => a
            .iter()
            .filter_map(|m| match m {
                ircc_core::Attribute::AffineMap(m) => Some(m),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    };
    if maps.len() != x.len() / 3 || maps.iter().any(|m| m.num_results() != 3) {
        return Err("'texture_layouts' must hold one map to (x, y, lane) per texture".to_string());
    }
    Ok(x.chunks(3)
        .zip(maps)
        .map(|(c, layout)| TextureArg {
            arg: c[0] as usize,
            width: c[1] as u32,
            height: c[2] as u32,
            layout: layout.clone(),
        })
        .collect())
}

/// The byte type a read-only buffer (an input, a weight, a constant) of
/// `elem` is stored as, where `elem` is an integer of 8 bits or fewer:
/// quantized weights then take a byte an element on the device, as in
/// the model, instead of the i32 kernels compute in. Buffers a kernel
/// writes hold i32, since a byte cannot be written alone.
pub fn byte_stored(elem: ElemType) -> Option<ElemType> {
    match elem {
        ElemType::I8 | ElemType::I4 | ElemType::I2 => Some(ElemType::I8),
        ElemType::U8 | ElemType::U4 | ElemType::U2 => Some(ElemType::U8),
        _ => None,
    }
}
