//! The kernel dialect's verifiers: what the spec's counts and kinds cannot
//! say (types of loads and stores, map arities, where an op may stand).

use ircc_core::registry::{OpHooks, OpView};
use ircc_core::{Attribute, ElemType, Module, OpId, Type, ValueId};

use super::KernelOp;
use super::matrix::{MatrixRole, MatrixType};

fn ty(m: &Module, v: ValueId) -> &Type {
    m.value_type(v)
}

fn map_of<'a>(v: &OpView<'a>, results: usize) -> Result<&'a ircc_core::AffineMap, String> {
    match v.attr("map") {
        Some(Attribute::AffineMap(map)) if map.num_results() == results && map.num_syms == 0 => {
            Ok(map)
        }
        _ => Err(format!(
            "'map' must be an affine map with {results} result(s) and no symbols"
        )),
    }
}

fn check_indices(v: &OpView, first: usize, results: usize) -> Result<(), String> {
    let o = v.module.op(v.op);
    let map = map_of(v, results)?;
    let indices = &o.operands[first.min(o.operands.len())..];
    if map.num_dims as usize != indices.len() {
        return Err(format!(
            "the map takes {} indices but {} are given",
            map.num_dims,
            indices.len()
        ));
    }
    if let Some(i) = indices
        .iter()
        .position(|&x| *ty(v.module, x) != Type::Index)
    {
        return Err(format!("index operand #{i} is not an index"));
    }
    Ok(())
}

fn memory_elem(m: &Module, v: ValueId) -> Result<ElemType, String> {
    match ty(m, v) {
        Type::Tensor(t) => Ok(t.elem),
        other => Err(format!(
            "memory must be a tensor argument or kernel.alloc, not {other}"
        )),
    }
}

fn verify_load(v: &OpView) -> Result<(), String> {
    let o = v.module.op(v.op);
    let elem = memory_elem(v.module, o.operands[0])?;
    if *ty(v.module, o.results[0]) != Type::Scalar(elem) {
        return Err(format!("a load from {elem} memory gives {elem}"));
    }
    check_indices(v, 1, 1)
}

fn verify_store(v: &OpView) -> Result<(), String> {
    let o = v.module.op(v.op);
    let elem = memory_elem(v.module, o.operands[1])?;
    // Bytes live in words that several invocations share: no kernel
    // writes them (`kernel::storage` keeps written buffers i32).
    if matches!(elem, ElemType::I8 | ElemType::U8) {
        return Err(format!("{elem} memory is read-only"));
    }
    if *ty(v.module, o.operands[0]) != Type::Scalar(elem) {
        return Err(format!("only {elem} values can be stored to {elem} memory"));
    }
    check_indices(v, 2, 1)
}

/// Whether `memory` is workgroup memory (a kernel.alloc).
fn is_alloc(m: &Module, memory: ValueId) -> bool {
    m.defining_op(memory)
        .is_some_and(|d| KernelOp::of(m, d) == Some(KernelOp::Alloc))
}

fn verify_store4(v: &OpView) -> Result<(), String> {
    let (m, o) = (v.module, v.module.op(v.op));
    let memory = o.operands[4];
    let Some(t) = ty(m, memory).as_tensor().filter(|_| is_alloc(m, memory)) else {
        return Err("store4 writes workgroup memory (a kernel.alloc)".to_string());
    };
    // Bytes live in words (`verify_store`): no vector of them is written.
    if matches!(t.elem, ElemType::I8 | ElemType::U8) {
        return Err(format!("store4 cannot write {} memory", t.elem));
    }
    // Printers may declare such memory an array of vectors: its last
    // vector must be whole.
    if t.num_elements() % 4 != 0 {
        return Err("store4 writes memory of a multiple of four elements".to_string());
    }
    if o.operands[..4]
        .iter()
        .any(|&x| *ty(m, x) != Type::Scalar(t.elem))
    {
        return Err(format!(
            "only four {} values can be stored to {} memory",
            t.elem, t.elem
        ));
    }
    check_indices(v, 5, 1)
}

fn verify_load4(v: &OpView) -> Result<(), String> {
    let (m, o) = (v.module, v.module.op(v.op));
    let memory = o.operands[0];
    let alloc = is_alloc(m, memory);
    let argument = matches!(
        m.value(memory).def,
        ircc_core::ir::ValueDef::BlockArg { .. }
    );
    let Some(t) = ty(m, memory).as_tensor().filter(|_| alloc || argument) else {
        return Err(
            "load4 reads workgroup memory (a kernel.alloc) or a tensor argument".to_string(),
        );
    };
    // A buffer of bytes is read out of words (`load`), not as vectors.
    if matches!(t.elem, ElemType::I8 | ElemType::U8) {
        return Err(format!("load4 cannot read {} memory", t.elem));
    }
    // Printers declare such memory an array of vectors: its last vector
    // must be whole.
    if t.num_elements() % 4 != 0 {
        return Err("load4 reads memory of a multiple of four elements".to_string());
    }
    // A buffer's vectors are whole vectors of it, and its offset must
    // show that it is one's first element (workgroup offsets are the
    // templates' own, computed through other ops).
    if argument {
        let offset = super::address::expanded(m, map_of(v, 1)?, &o.operands[1..], 8);
        if offset.known_divisor() % 4 != 0 {
            return Err(format!(
                "a load4 from a tensor argument at {offset}, not known to be a multiple of four"
            ));
        }
    }
    if o.results.iter().any(|&r| *ty(m, r) != Type::Scalar(t.elem)) {
        return Err(format!(
            "a load4 from {} memory gives four {}",
            t.elem, t.elem
        ));
    }
    check_indices(v, 1, 1)
}

fn matrix_of(m: &Module, v: ValueId) -> Result<MatrixType, String> {
    MatrixType::of(ty(m, v))
}

fn verify_matrix_zero(v: &OpView) -> Result<(), String> {
    let t = matrix_of(v.module, v.module.op(v.op).results[0])?;
    if t.role != MatrixRole::C {
        return Err("zeros are an accumulator: a matrix of role c".to_string());
    }
    verify_in_kernel(v)
}

/// A matrix load or store: memory of the matrix's element type, a
/// positive stride of at least a row.
fn verify_matrix_memory(v: &OpView, matrix: ValueId, memory: ValueId) -> Result<(), String> {
    let t = matrix_of(v.module, matrix)?;
    let elem = memory_elem(v.module, memory)?;
    if elem != t.elem {
        return Err(format!(
            "a matrix of {} is in {} memory, not {elem}",
            t.elem, t.elem
        ));
    }
    match v.attr("stride").and_then(Attribute::as_i64) {
        Some(s) if s >= t.cols => Ok(()),
        _ => Err(format!(
            "'stride' must be an integer of at least the matrix's {} columns",
            t.cols
        )),
    }
}

fn verify_matrix_load(v: &OpView) -> Result<(), String> {
    let o = v.module.op(v.op);
    verify_matrix_memory(v, o.results[0], o.operands[0])?;
    check_indices(v, 1, 1)
}

fn verify_matrix_store(v: &OpView) -> Result<(), String> {
    let o = v.module.op(v.op);
    verify_matrix_memory(v, o.operands[0], o.operands[1])?;
    check_indices(v, 2, 1)
}

/// `a` (r x k) times `b` (k x c) plus `c` (r x c), roles as named, `a`
/// and `b` of one element type; the result is `c`'s type.
fn verify_matrix_multiply_add(v: &OpView) -> Result<(), String> {
    let (m, o) = (v.module, v.module.op(v.op));
    let [a, b, c] = [0, 1, 2].map(|i| matrix_of(m, o.operands[i]));
    let (a, b, c) = (a?, b?, c?);
    let roles = [a.role, b.role, c.role];
    if roles != [MatrixRole::A, MatrixRole::B, MatrixRole::C] {
        return Err("the operands are matrices of roles a, b and c, in order".to_string());
    }
    if a.cols != b.rows || a.rows != c.rows || b.cols != c.cols || a.elem != b.elem {
        return Err(format!(
            "{}x{} times {}x{} plus {}x{}: the shapes or operand types disagree",
            a.rows, a.cols, b.rows, b.cols, c.rows, c.cols
        ));
    }
    if *ty(m, o.results[0]) != c.to_type() {
        return Err("the result has the accumulator's type".to_string());
    }
    verify_in_kernel(v)
}

fn verify_texture_load(v: &OpView) -> Result<(), String> {
    let o = v.module.op(v.op);
    let elem = memory_elem(v.module, o.operands[0])?;
    if !elem.is_float() || *ty(v.module, o.results[0]) != Type::Scalar(elem) {
        return Err("a texture holds floats, and a load gives its element type".to_string());
    }
    check_indices(v, 1, 3)
}

fn verify_texture_store(v: &OpView) -> Result<(), String> {
    let o = v.module.op(v.op);
    let elem = memory_elem(v.module, o.operands[4])?;
    if !elem.is_float()
        || o.operands[..4]
            .iter()
            .any(|&x| *ty(v.module, x) != Type::Scalar(elem))
    {
        return Err(format!("a texel of a {elem} texture is four {elem} lanes"));
    }
    check_indices(v, 5, 2)
}

fn verify_apply(v: &OpView) -> Result<(), String> {
    let o = v.module.op(v.op);
    if *ty(v.module, o.results[0]) != Type::Index {
        return Err("an apply gives an index".to_string());
    }
    check_indices(v, 0, 1)
}

fn same_types(v: &OpView, operands: std::ops::Range<usize>) -> Result<(), String> {
    let o = v.module.op(v.op);
    let first = ty(v.module, o.operands[operands.start]);
    if o.operands[operands]
        .iter()
        .any(|&x| ty(v.module, x) != first)
    {
        return Err("operands must have one type".to_string());
    }
    Ok(())
}

fn verify_binary(v: &OpView) -> Result<(), String> {
    same_types(v, 0..2)?;
    let o = v.module.op(v.op);
    if ty(v.module, o.results[0]) != ty(v.module, o.operands[0]) {
        return Err("the result has the operands' type".to_string());
    }
    Ok(())
}

fn verify_cmp(v: &OpView) -> Result<(), String> {
    same_types(v, 0..2)?;
    let o = v.module.op(v.op);
    if *ty(v.module, o.results[0]) != Type::Scalar(ElemType::I1) {
        return Err("a comparison gives i1".to_string());
    }
    Ok(())
}

fn verify_select(v: &OpView) -> Result<(), String> {
    let o = v.module.op(v.op);
    if *ty(v.module, o.operands[0]) != Type::Scalar(ElemType::I1) {
        return Err("the condition is i1".to_string());
    }
    same_types(v, 1..3)
}

fn parent_op(m: &Module, op: OpId) -> Option<OpId> {
    m.op(op)
        .parent
        .and_then(|b| m.blocks[b].parent)
        .and_then(|r| m.regions[r].parent)
}

fn verify_for(v: &OpView) -> Result<(), String> {
    let (m, o) = (v.module, v.module.op(v.op));
    if v.i64("step")? <= 0 {
        return Err("the step must be positive".to_string());
    }
    let block = m
        .entry_block(v.op)
        .ok_or("a kernel.for needs a body block")?;
    let args = &m.blocks[block].args;
    let inits: Vec<&Type> = o.operands.iter().map(|&x| ty(m, x)).collect();
    let results: Vec<&Type> = o.results.iter().map(|&x| ty(m, x)).collect();
    if args.is_empty()
        || *ty(m, args[0]) != Type::Index
        || args[1..].iter().map(|&a| ty(m, a)).collect::<Vec<_>>() != inits
        || results != inits
    {
        return Err(
            "the body takes the index then the carried values, which the results match".to_string(),
        );
    }
    Ok(())
}

fn verify_yield(v: &OpView) -> Result<(), String> {
    let m = v.module;
    let parent = parent_op(m, v.op).ok_or("a kernel.yield ends a loop or if body")?;
    let expected: Vec<&Type> = match KernelOp::of(m, parent) {
        Some(KernelOp::For) => m.op(parent).results.iter().map(|&r| ty(m, r)).collect(),
        Some(KernelOp::If) => Vec::new(),
        _ => {
            return Err(format!(
                "a kernel.yield cannot end a '{}' body",
                m.op(parent).name
            ));
        }
    };
    let given: Vec<&Type> = m.op(v.op).operands.iter().map(|&x| ty(m, x)).collect();
    if given != expected {
        return Err("a kernel.yield gives the loop's carried types".to_string());
    }
    Ok(())
}

fn verify_if(v: &OpView) -> Result<(), String> {
    let o = v.module.op(v.op);
    if *ty(v.module, o.operands[0]) != Type::Scalar(ElemType::I1) || o.regions.len() != 1 {
        return Err("a kernel.if takes an i1 condition and one region".to_string());
    }
    Ok(())
}

fn verify_id(v: &OpView) -> Result<(), String> {
    if !(0..3).contains(&v.i64("axis")?) {
        return Err("axis is 0, 1 or 2".to_string());
    }
    Ok(())
}

fn three(v: &OpView, name: &str) -> Result<Vec<i64>, String> {
    match v.i64s(name)? {
        Some(x) if x.len() == 3 && x.iter().all(|&d| d >= 1) => Ok(x),
        _ => Err(format!("'{name}' must be three positive integers")),
    }
}

fn verify_func(v: &OpView) -> Result<(), String> {
    let (m, o) = (v.module, v.module.op(v.op));
    let wg = three(v, "workgroup_size")?;
    three(v, "grid")?;
    let most = super::Target::webgpu().max_workgroup_invocations;
    if wg.iter().product::<i64>() > most {
        return Err(format!("a workgroup has at most {most} invocations"));
    }
    let block = m.entry_block(v.op).ok_or("a kernel.func needs a body")?;
    let args = &m.blocks[block].args;
    if args.iter().any(|&a| ty(m, a).as_tensor().is_none()) {
        return Err("kernel arguments are tensors".to_string());
    }
    let outputs = v.i64("outputs")?;
    if outputs < 1 || outputs as usize > args.len() {
        return Err("a kernel writes between one and all of its arguments".to_string());
    }
    match m.blocks[block].ops.last() {
        Some(&last) if KernelOp::of(m, last) == Some(KernelOp::Return) => {}
        _ => return Err("the body ends with kernel.return".to_string()),
    }
    if o.regions.len() != 1 {
        return Err("a kernel.func has one region".to_string());
    }
    Ok(())
}

fn verify_launch(v: &OpView) -> Result<(), String> {
    let m = v.module;
    let name = match v.attr("kernel") {
        Some(Attribute::SymbolRef(path)) if path.len() == 1 => &path[0],
        _ => return Err("'kernel' must name a kernel.func".to_string()),
    };
    let func = m
        .lookup_symbol(name)
        .filter(|&f| KernelOp::of(m, f) == Some(KernelOp::Func))
        .ok_or_else(|| format!("no kernel.func @{name}"))?;
    let block = m.entry_block(func).ok_or("the kernel has no body")?;
    let o = m.op(v.op);
    let args = m.blocks[block].args.len();
    if o.operands.len() + o.results.len() != args {
        return Err(format!(
            "@{name} takes {args} tensors but the launch gives {} inputs and {} outputs",
            o.operands.len(),
            o.results.len()
        ));
    }
    Ok(())
}

fn verify_in_kernel(v: &OpView) -> Result<(), String> {
    let mut op = v.op;
    while let Some(p) = parent_op(v.module, op) {
        if KernelOp::of(v.module, p) == Some(KernelOp::Func) {
            return Ok(());
        }
        op = p;
    }
    Err(format!("'{}' must be inside a kernel.func", v.name()))
}

fn checked(verify: fn(&OpView) -> Result<(), String>) -> OpHooks {
    OpHooks {
        infer: None,
        verify: Some(verify),
        interpret: None,
    }
}

/// The hooks of every kernel op: verifiers, and the interpreter of
/// `kernel.launch`, which runs its kernel.func.
pub(super) fn op_hooks(op: KernelOp) -> OpHooks {
    use KernelOp as K;
    if op == K::Launch {
        return OpHooks {
            infer: None,
            verify: Some(verify_launch),
            interpret: Some(super::interpret::interpret_launch),
        };
    }
    checked(match op {
        K::Func => verify_func,
        K::Launch => verify_launch,
        K::Id => verify_id,
        K::Apply => verify_apply,
        K::Load => verify_load,
        K::Store => verify_store,
        K::Load4 => verify_load4,
        K::Store4 => verify_store4,
        K::TextureLoad => verify_texture_load,
        K::MatrixZero => verify_matrix_zero,
        K::MatrixLoad => verify_matrix_load,
        K::MatrixStore => verify_matrix_store,
        K::MatrixMultiplyAdd => verify_matrix_multiply_add,
        K::TextureStore => verify_texture_store,
        K::Binary => verify_binary,
        K::Cmp => verify_cmp,
        K::Select => verify_select,
        K::For => verify_for,
        K::If => verify_if,
        K::Yield => verify_yield,
        K::Constant | K::Unary | K::Cast | K::Barrier | K::Alloc | K::Return => verify_in_kernel,
    })
}
