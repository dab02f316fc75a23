//! The kernel dialect (see `spec/dialects/kernel.toml`): the level just
//! above WGSL and OpenCL C. A `kernel.func` is what one invocation does;
//! `kernel.launch` in the host function runs it: on a GPU through a
//! backend, or in the kernel interpreter (`interpret.rs`), so kernel IR is
//! checked against the graph level like every other level.

pub mod address;
pub mod builder;
mod device;
mod interpret;
mod matrix;
mod module_target;
mod schedule;
mod target;
mod verify;

pub use device::{AdapterPattern, CooperativeMatrix, DeviceProfile, PROFILES, profiles_table};
pub use matrix::{MatrixRole, MatrixType};
pub use module_target::{Adapter, DEFAULT_DEVICE, ModuleTarget, TARGET_ATTR, target_profile};
pub use schedule::{
    AttentionCooperativeSchedule, AttentionRowsSchedule, ColumnSchedule, CooperativeSchedule,
    DepthwiseSchedule, GroupedSchedule, MatmulSchedule, PRECISION_ATTR, SCHEDULE_ATTR, Schedule,
    precision,
};
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

/// What a buffer of `elem` holds on the device, for kernels computing
/// floats in `float`: floats in `float`, integers and booleans as i32 —
/// but a `read_only` buffer (an input, a weight, a constant) of an integer
/// of 8 bits or fewer as bytes, so quantized weights take a byte an
/// element, as in the model. A buffer a kernel writes holds i32, since a
/// byte cannot be written alone. `kernel.lower` and the host plan both
/// decide by this.
pub fn storage(elem: ElemType, float: ElemType, read_only: bool) -> ElemType {
    match elem {
        e if e.is_float() => float,
        e => match ircc_core::tensor::byte_storage(e) {
            b @ (ElemType::I8 | ElemType::U8) if read_only => b,
            _ => ElemType::I32,
        },
    }
}
