//! What a kernel spends on addresses: the operations of the affine maps of
//! its loads, stores and `kernel.apply`s (Romou's address calculations),
//! counted as printed and as executed by one invocation (each loop's body
//! times its trip count). `kernel.ace` lowers both; `ircc stats` reports
//! them.

use ircc_core::{AffineExpr, Attribute, BlockId, Module, OpId, ValueId};

use super::{KernelOp, ops};

/// Where the index operands of an op with an address map start, for the
/// ops that have one.
pub fn index_operands(kind: KernelOp) -> Option<usize> {
    Some(match kind {
        KernelOp::Apply => 0,
        KernelOp::Load | KernelOp::Load4 | KernelOp::TextureLoad | KernelOp::MatrixLoad => 1,
        KernelOp::Store | KernelOp::MatrixStore => 2,
        KernelOp::TextureStore | KernelOp::Store4 => 5,
        _ => return None,
    })
}

/// The first result of `map` over `operands`, each operand a kernel.apply
/// computes replaced by its expression, `depth` applies deep: what an
/// address pass moved out of a map still shows what the map's value is a
/// multiple of (the other operands stand as dimensions).
pub fn expanded(
    m: &Module,
    map: &ircc_core::AffineMap,
    operands: &[ValueId],
    depth: usize,
) -> AffineExpr {
    let dims: Vec<AffineExpr> = operands
        .iter()
        .enumerate()
        .map(|(i, &x)| {
            let apply = m
                .defining_op(x)
                .filter(|&d| depth > 0 && KernelOp::of(m, d) == Some(KernelOp::Apply));
            match apply.map(|d| (m.op(d).attr("map"), &m.op(d).operands)) {
                Some((Some(Attribute::AffineMap(inner)), inner_operands))
                    if inner.num_results() == 1 =>
                {
                    expanded(m, inner, inner_operands, depth - 1)
                }
                _ => AffineExpr::dim(i as u32),
            }
        })
        .collect();
    map.results[0].substitute(&dims, &[])
}

/// What the element offset that `op` (a load, store or matrix op)
/// addresses is known to be a multiple of, looking through the
/// kernel.applys that compute its indices: 1 where nothing is known.
pub fn offset_divisor(m: &Module, op: OpId) -> i64 {
    let o = m.op(op);
    let Some(first) = KernelOp::of(m, op).and_then(index_operands) else {
        return 1;
    };
    match o.attr("map") {
        Some(Attribute::AffineMap(map)) if map.num_results() >= 1 => {
            expanded(m, map, &o.operands[first.min(o.operands.len())..], 8).known_divisor()
        }
        _ => 1,
    }
}

/// Address arithmetic of one kernel.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AddressCounts {
    /// `floordiv`, `ceildiv` and `mod` operations in the kernel's text.
    pub divmod: u64,
    /// Every operation (`+`, `*`, division, modulo) in the kernel's text.
    pub addr_ops: u64,
    /// `divmod` as one invocation executes them.
    pub divmod_executed: u64,
    /// `addr_ops` as one invocation executes them.
    pub addr_ops_executed: u64,
}

impl std::ops::AddAssign for AddressCounts {
    fn add_assign(&mut self, o: AddressCounts) {
        self.divmod += o.divmod;
        self.addr_ops += o.addr_ops;
        self.divmod_executed += o.divmod_executed;
        self.addr_ops_executed += o.addr_ops_executed;
    }
}

/// Operations of an affine expression.
pub fn op_count(e: &AffineExpr) -> u64 {
    match e {
        AffineExpr::Dim(_) | AffineExpr::Sym(_) | AffineExpr::Const(_) => 0,
        AffineExpr::Add(a, b)
        | AffineExpr::Mul(a, b)
        | AffineExpr::FloorDiv(a, b)
        | AffineExpr::CeilDiv(a, b)
        | AffineExpr::Mod(a, b) => 1 + op_count(a) + op_count(b),
    }
}

/// The address counts of kernel.func `func`.
pub fn address_counts(m: &Module, func: OpId) -> AddressCounts {
    let mut counts = AddressCounts::default();
    if let Some(body) = m.entry_block(func) {
        count_block(m, body, 1, &mut counts);
    }
    counts
}

fn count_block(m: &Module, block: BlockId, trips: u64, counts: &mut AddressCounts) {
    for &op in &m.blocks[block].ops {
        let kind = KernelOp::of(m, op);
        if kind.and_then(index_operands).is_some()
            && let Some(Attribute::AffineMap(map)) = m.op(op).attr("map")
        {
            for e in &map.results {
                let (divmod, ops) = (e.div_mod_count() as u64, op_count(e));
                counts.divmod += divmod;
                counts.addr_ops += ops;
                counts.divmod_executed += divmod * trips;
                counts.addr_ops_executed += ops * trips;
            }
        }
        let inner = match ops::For::new(m, op) {
            Some(f) if f.step() > 0 => {
                trips * ((f.upper() - f.lower()).max(0) as u64).div_ceil(f.step() as u64)
            }
            _ => trips,
        };
        for &r in &m.op(op).regions {
            for &b in &m.regions[r].blocks {
                count_block(m, b, inner, counts);
            }
        }
    }
}
