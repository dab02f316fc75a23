//! The IR: a module owns arenas of operations, values, blocks and regions
//! that refer to each other by handle. Every value keeps its use list, so
//! "replace all uses" and dead-code checks are cheap.
//!
//! Invariants (checked by `verify`):
//! - an operation is in at most one block, and `parent` says which;
//! - `Value::uses` lists exactly the operand slots that read the value;
//! - erased operations stay in the arena but are in no block.

use std::collections::HashMap;

use crate::arena::{Arena, Handle};
use crate::attr::{Attribute, Attributes};
use crate::diag::Location;
use crate::types::Type;
use crate::uses::Uses;

pub type OpId = Handle<Operation>;
pub type ValueId = Handle<Value>;
pub type BlockId = Handle<Block>;
pub type RegionId = Handle<Region>;

#[derive(Clone, Debug)]
pub struct Operation {
    /// Full name, `dialect.op`.
    pub name: String,
    pub operands: Vec<ValueId>,
    pub results: Vec<ValueId>,
    pub attrs: Attributes,
    pub regions: Vec<RegionId>,
    pub parent: Option<BlockId>,
    pub loc: Location,
}

impl Operation {
    pub fn dialect(&self) -> &str {
        self.name.split_once('.').map_or("", |(d, _)| d)
    }

    pub fn attr(&self, name: &str) -> Option<&Attribute> {
        self.attrs.get(name)
    }
}

/// Where a value is defined.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueDef {
    OpResult { op: OpId, index: u32 },
    BlockArg { block: BlockId, index: u32 },
}

/// One reading of a value: operand `index` of `op`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Use {
    pub op: OpId,
    pub index: u32,
}

#[derive(Clone, Debug)]
pub struct Value {
    pub ty: Type,
    pub def: ValueDef,
    /// A short list, a set once many ops read the value (see [`Uses`]).
    pub uses: Uses,
    /// The name it had in the source (`%x`), used again when printing.
    pub name: Option<String>,
}

#[derive(Clone, Debug, Default)]
pub struct Block {
    pub args: Vec<ValueId>,
    pub ops: Vec<OpId>,
    pub parent: Option<RegionId>,
}

#[derive(Clone, Debug, Default)]
pub struct Region {
    pub blocks: Vec<BlockId>,
    pub parent: Option<OpId>,
}

/// A module: the top-level container, with its own attributes
/// (`module attributes {ircc.weights = "w.safetensors"}`) and one block of
/// operations, usually `func.func`s.
#[derive(Clone, Debug)]
pub struct Module {
    pub ops: Arena<Operation>,
    pub values: Arena<Value>,
    pub blocks: Arena<Block>,
    pub regions: Arena<Region>,
    pub body: BlockId,
    pub name: Option<String>,
    pub attrs: Attributes,
    pub loc: Location,
}

impl Default for Module {
    fn default() -> Self {
        Self::new()
    }
}

/// What a new operation looks like before it is inserted.
#[derive(Clone, Debug)]
pub struct OpBuilder {
    pub name: String,
    pub operands: Vec<ValueId>,
    pub result_types: Vec<Type>,
    pub attrs: Attributes,
    pub regions: usize,
    pub loc: Location,
}

impl OpBuilder {
    pub fn new(name: impl Into<String>) -> Self {
        OpBuilder {
            name: name.into(),
            operands: Vec::new(),
            result_types: Vec::new(),
            attrs: Attributes::new(),
            regions: 0,
            loc: Location::unknown(),
        }
    }

    pub fn operands(mut self, operands: impl IntoIterator<Item = ValueId>) -> Self {
        self.operands.extend(operands);
        self
    }

    pub fn results(mut self, types: impl IntoIterator<Item = Type>) -> Self {
        self.result_types.extend(types);
        self
    }

    pub fn attr(mut self, name: impl Into<String>, value: Attribute) -> Self {
        self.attrs.insert(name.into(), value);
        self
    }

    pub fn attrs(mut self, attrs: Attributes) -> Self {
        self.attrs.extend(attrs);
        self
    }

    pub fn regions(mut self, count: usize) -> Self {
        self.regions = count;
        self
    }

    pub fn loc(mut self, loc: Location) -> Self {
        self.loc = loc;
        self
    }
}

impl Module {
    pub fn new() -> Self {
        let mut blocks = Arena::new();
        let body = blocks.append(Block::default());
        Module {
            ops: Arena::new(),
            values: Arena::new(),
            blocks,
            regions: Arena::new(),
            body,
            name: None,
            attrs: Attributes::new(),
            loc: Location::unknown(),
        }
    }

    pub fn op(&self, op: OpId) -> &Operation {
        &self.ops[op]
    }

    pub fn op_mut(&mut self, op: OpId) -> &mut Operation {
        &mut self.ops[op]
    }

    pub fn value(&self, v: ValueId) -> &Value {
        &self.values[v]
    }

    pub fn value_type(&self, v: ValueId) -> &Type {
        &self.values[v].ty
    }

    /// Creates an operation (with fresh result values and empty regions)
    /// that is not yet in any block.
    pub fn create_op(&mut self, b: OpBuilder) -> OpId {
        let op = self.ops.append(Operation {
            name: b.name,
            operands: Vec::new(),
            results: Vec::new(),
            attrs: b.attrs,
            regions: Vec::new(),
            parent: None,
            loc: b.loc,
        });
        for (i, ty) in b.result_types.into_iter().enumerate() {
            let v = self.values.append(Value {
                ty,
                def: ValueDef::OpResult {
                    op,
                    index: i as u32,
                },
                uses: Uses::default(),
                name: None,
            });
            self.ops[op].results.push(v);
        }
        for _ in 0..b.regions {
            let r = self.regions.append(Region {
                blocks: Vec::new(),
                parent: Some(op),
            });
            self.ops[op].regions.push(r);
        }
        for v in b.operands {
            self.push_operand(op, v);
        }
        op
    }

    pub fn push_operand(&mut self, op: OpId, v: ValueId) {
        let index = self.ops[op].operands.len() as u32;
        self.ops[op].operands.push(v);
        self.values[v].uses.insert(Use { op, index });
    }

    /// Points operand `index` of `op` at `new`, keeping use lists right.
    pub fn set_operand(&mut self, op: OpId, index: usize, new: ValueId) {
        let old = self.ops[op].operands[index];
        let u = Use {
            op,
            index: index as u32,
        };
        self.values[old].uses.swap_remove(&u);
        self.ops[op].operands[index] = new;
        self.values[new].uses.insert(u);
    }

    pub fn replace_all_uses(&mut self, old: ValueId, new: ValueId) {
        if old == new {
            return;
        }
        let uses = std::mem::take(&mut self.values[old].uses);
        for u in &uses {
            self.ops[u.op].operands[u.index as usize] = new;
        }
        self.values[new].uses.extend(uses);
    }

    /// Appends a block to a region.
    pub fn add_block(&mut self, region: RegionId, arg_types: Vec<Type>) -> BlockId {
        let block = self.blocks.append(Block {
            args: Vec::new(),
            ops: Vec::new(),
            parent: Some(region),
        });
        for (i, ty) in arg_types.into_iter().enumerate() {
            let v = self.values.append(Value {
                ty,
                def: ValueDef::BlockArg {
                    block,
                    index: i as u32,
                },
                uses: Uses::default(),
                name: None,
            });
            self.blocks[block].args.push(v);
        }
        self.regions[region].blocks.push(block);
        block
    }

    /// Appends an argument of type `ty` to `block`.
    pub fn add_block_arg(&mut self, block: BlockId, ty: Type) -> ValueId {
        let index = self.blocks[block].args.len() as u32;
        let v = self.values.append(Value {
            ty,
            def: ValueDef::BlockArg { block, index },
            uses: Uses::default(),
            name: None,
        });
        self.blocks[block].args.push(v);
        v
    }

    /// Reorders the arguments of `block` to `order` (a permutation of them).
    pub fn permute_block_args(&mut self, block: BlockId, order: Vec<ValueId>) {
        debug_assert_eq!(order.len(), self.blocks[block].args.len());
        for (i, &v) in order.iter().enumerate() {
            self.values[v].def = ValueDef::BlockArg {
                block,
                index: i as u32,
            };
        }
        self.blocks[block].args = order;
    }

    pub fn append_op(&mut self, block: BlockId, op: OpId) {
        self.ops[op].parent = Some(block);
        self.blocks[block].ops.push(op);
    }

    /// Inserts `op` into the block of `anchor`, just before it.
    pub fn insert_before(&mut self, anchor: OpId, op: OpId) {
        let block = self.ops[anchor]
            .parent
            .expect("anchor operation is in a block");
        let pos = self.blocks[block]
            .ops
            .iter()
            .position(|&o| o == anchor)
            .expect("anchor in its block");
        self.blocks[block].ops.insert(pos, op);
        self.ops[op].parent = Some(block);
    }

    /// Detaches `op` from its block and drops its operand uses (and those of
    /// everything nested in it). Its results must have no uses left.
    pub fn erase_op(&mut self, op: OpId) {
        let block = self.ops[op].parent;
        self.erase_op_later(op);
        if let Some(block) = block {
            self.blocks[block].ops.retain(|&o| o != op);
        }
    }

    /// Erases `op` as [`Module::erase_op`] does, but leaves it listed in its
    /// block (with no parent) until [`Module::sweep_block`]: erasing many
    /// ops of a large block one by one would scan the block each time.
    pub fn erase_op_later(&mut self, op: OpId) {
        debug_assert!(
            self.ops[op]
                .results
                .iter()
                .all(|&r| self.values[r].uses.is_empty())
        );
        self.ops[op].parent = None;
        self.drop_uses(op);
    }

    /// Rebuilds `block` in one pass: the ops erased by
    /// [`Module::erase_op_later`] or moved to another block leave it (their
    /// parent is no longer `block`), and the ops of `insert[anchor]` go
    /// just before `anchor`.
    pub fn sweep_block(&mut self, block: BlockId, insert: &HashMap<OpId, Vec<OpId>>) {
        let old = std::mem::take(&mut self.blocks[block].ops);
        let mut ops = Vec::with_capacity(old.len());
        for op in old {
            for &new in insert.get(&op).into_iter().flatten() {
                self.ops[new].parent = Some(block);
                ops.push(new);
            }
            if self.ops[op].parent == Some(block) {
                ops.push(op);
            }
        }
        self.blocks[block].ops = ops;
    }

    fn drop_uses(&mut self, op: OpId) {
        let operands = std::mem::take(&mut self.ops[op].operands);
        for (i, v) in operands.into_iter().enumerate() {
            let u = Use {
                op,
                index: i as u32,
            };
            self.values[v].uses.swap_remove(&u);
        }
        for r in self.ops[op].regions.clone() {
            for b in self.regions[r].blocks.clone() {
                for o in self.blocks[b].ops.clone() {
                    self.drop_uses(o);
                }
            }
        }
    }

    /// The operations of the module's top-level block.
    pub fn top_ops(&self) -> &[OpId] {
        &self.blocks[self.body].ops
    }

    /// Finds a top-level operation by its `sym_name`.
    pub fn lookup_symbol(&self, name: &str) -> Option<OpId> {
        self.top_ops()
            .iter()
            .copied()
            .find(|&op| self.ops[op].attr("sym_name").and_then(Attribute::as_str) == Some(name))
    }

    /// The `func.func`s of the module, in order.
    pub fn functions(&self) -> Vec<OpId> {
        self.top_ops()
            .iter()
            .copied()
            .filter(|&op| self.ops[op].name == crate::builtin::FuncOp::Func.name())
            .collect()
    }

    /// The entry block of an operation's first region.
    pub fn entry_block(&self, op: OpId) -> Option<BlockId> {
        let r = *self.ops[op].regions.first()?;
        self.regions[r].blocks.first().copied()
    }

    /// Every operation nested in `block`, in pre-order.
    pub fn walk_block(&self, block: BlockId, f: &mut impl FnMut(OpId)) {
        for &op in &self.blocks[block].ops {
            f(op);
            for &r in &self.ops[op].regions {
                for &b in &self.regions[r].blocks {
                    self.walk_block(b, f);
                }
            }
        }
    }

    /// Every operation in the module, in pre-order.
    pub fn walk(&self, mut f: impl FnMut(OpId)) {
        self.walk_block(self.body, &mut f);
    }

    /// Number of operations in the module, nested ones included.
    pub fn op_count(&self) -> usize {
        let mut n = 0;
        self.walk(|_| n += 1);
        n
    }

    /// The operation that defines `v`, if it is an operation result.
    pub fn defining_op(&self, v: ValueId) -> Option<OpId> {
        match self.values[v].def {
            ValueDef::OpResult { op, .. } => Some(op),
            ValueDef::BlockArg { .. } => None,
        }
    }

    /// Whether `op` is nested in a region of `ancestor`, at any depth.
    pub fn is_inside(&self, op: OpId, ancestor: OpId) -> bool {
        let mut at = op;
        loop {
            let Some(block) = self.ops[at].parent else {
                return false;
            };
            let Some(region) = self.blocks[block].parent else {
                return false;
            };
            let Some(parent) = self.regions[region].parent else {
                return false;
            };
            if parent == ancestor {
                return true;
            }
            at = parent;
        }
    }
}
