//! `graph.fuse`: DNNFusion's fusion plan (Listing 1). Seeds are One-to-One
//! ops, smallest result first; a seed's group grows through its consumers,
//! then its producers, as far as the mapping-type table allows: red
//! (fuse_break) stops, green (fuse_through) goes, yellow (fuse_depend) goes
//! unless the new op duplicates data (One-to-Many), the cost model until
//! measured profiles exist. A group keeps one anchor (at most one
//! Many-to-Many op, besides the normalizations spec/fusion.toml's
//! `[prologues]` lets a product take as its prologue), a bounded size, and
//! stays convex (no path leaves the group and comes back), so it can run
//! as one kernel. An op joins a product's group as its prologue, which the
//! product recomputes per reuse, only where it cannot instead end a
//! Many-to-Many producer as its epilogue, computed once. Each group of two or
//! more ops becomes a `graph.fused` op whose region holds them; views that
//! only feed a group go into it, since they cost the kernel nothing.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet};

use crate::decl::GraphFuseOptions;
use ircc_core::diag::{Diagnostic, Diagnostics};
use ircc_core::ir::{BlockId, OpBuilder, ValueId};
use ircc_core::pass::{FunctionPass, PassContext, PassResult};
use ircc_core::registry::MappingType;
use ircc_core::{Attribute, Module, OpId, Type};
use ircc_dialects::graph::GraphOp;
use ircc_dialects::index::is_view;
use ircc_dialects::is_data;

use super::classify;
use super::tables::{Color, Tables};

pub struct Fuse {
    tables: Tables,
    max_ops: usize,
}

impl Fuse {
    pub fn new(options: GraphFuseOptions, tables: Tables) -> Self {
        Fuse {
            tables,
            max_ops: options.max_ops.max(1) as usize,
        }
    }
}

struct Group {
    ops: Vec<OpId>,
    mapping: MappingType,
    /// The group's Many-to-Many op, if it has one (besides the
    /// normalizations it takes as its prologue).
    anchor: Option<OpId>,
}

/// The fusion state of one block.
struct Plan<'a> {
    module: &'a Module,
    /// The most buffers one group's kernel may bind ([`buffer_limit`]).
    max_buffers: i64,
    position: HashMap<OpId, usize>,
    mapping: HashMap<OpId, MappingType>,
    group_of: HashMap<OpId, usize>,
}

impl Plan<'_> {
    /// The ops that read `op`'s results, looking through views (a view is
    /// part of its reader's index computation, not a kernel).
    fn consumers(&self, op: OpId) -> Vec<OpId> {
        let mut out = Vec::new();
        let mut stack: Vec<OpId> = vec![op];
        while let Some(o) = stack.pop() {
            for &r in &self.module.op(o).results {
                for u in &self.module.value(r).uses {
                    if is_view(self.module, u.op) {
                        stack.push(u.op);
                    } else {
                        out.push(u.op);
                    }
                }
            }
        }
        out.sort_by_key(|o| self.position.get(o).copied().unwrap_or(usize::MAX));
        out.dedup();
        out
    }

    /// The shape of `op`'s first result, if it is a tensor.
    fn result_shape(&self, op: OpId) -> Option<Vec<i64>> {
        let m = self.module;
        let r = *m.op(op).results.first()?;
        m.value_type(r).as_tensor().map(|t| t.shape.clone())
    }

    /// The ops whose results `op` reads, looking through views.
    fn producers(&self, op: OpId) -> Vec<OpId> {
        let mut out = Vec::new();
        let mut stack: Vec<OpId> = self
            .module
            .op(op)
            .operands
            .iter()
            .filter_map(|&v| self.module.defining_op(v))
            .collect();
        while let Some(p) = stack.pop() {
            if is_view(self.module, p) {
                stack.extend(
                    self.module
                        .op(p)
                        .operands
                        .iter()
                        .filter_map(|&v| self.module.defining_op(v)),
                );
            } else {
                out.push(p);
            }
        }
        out.sort_by_key(|o| self.position.get(o).copied().unwrap_or(usize::MAX));
        out.dedup();
        out
    }

    /// The buffers a kernel of `members` would bind: the stored tensors
    /// its members read from outside it (through any views), and its
    /// results read outside it.
    fn bindings(&self, members: &HashSet<OpId>) -> usize {
        let m = self.module;
        let mut inputs = HashSet::new();
        let mut outputs = 0;
        for &op in members {
            for &v in &m.op(op).operands {
                let (stored, _) = ircc_dialects::index::through_views(m, v);
                if m.defining_op(stored).is_none_or(|d| !members.contains(&d)) {
                    inputs.insert(stored);
                }
            }
            outputs += m
                .op(op)
                .results
                .iter()
                .filter(|&&r| m.value(r).uses.iter().any(|u| !members.contains(&u.op)))
                .count();
        }
        inputs.len() + outputs
    }

    /// Whether `members` is convex: no path leaves it and comes back.
    fn convex(&self, members: &HashSet<OpId>) -> bool {
        let last = members.iter().map(|o| self.position[o]).max().unwrap_or(0);
        let mut stack: Vec<OpId> = members
            .iter()
            .flat_map(|&m| self.consumers(m))
            .filter(|c| !members.contains(c))
            .collect();
        let mut seen = HashSet::new();
        while let Some(op) = stack.pop() {
            match self.position.get(&op) {
                Some(&p) if p < last && seen.insert(op) => {
                    for c in self.consumers(op) {
                        if members.contains(&c) {
                            return false;
                        }
                        stack.push(c);
                    }
                }
                _ => {}
            }
        }
        true
    }
}

impl Fuse {
    /// Tries to add `op` to `group`; `first` is the mapping type of what
    /// runs first in the pair (the group when growing forwards).
    fn try_add(&self, plan: &Plan, group: &mut Group, op: OpId, forwards: bool) -> bool {
        let Some(&kind) = plan.mapping.get(&op) else {
            return false;
        };
        if plan.group_of.contains_key(&op) || group.ops.len() >= self.max_ops {
            return false;
        }
        let anchor = kind == MappingType::ManyToMany;
        let prologue = !forwards && self.prologue_of(plan, group, op);
        let (mapping, color) = if prologue {
            (group.mapping, Color::Green)
        } else if forwards {
            self.tables.fuse(group.mapping, kind)
        } else {
            self.tables.fuse(kind, group.mapping)
        };
        let allowed = match color {
            Color::Green => true,
            Color::Yellow => kind != MappingType::OneToMany,
            Color::Red => false,
        };
        if !allowed || (anchor && group.anchor.is_some() && !prologue) {
            return false;
        }
        // Constraint check: a group joins a matrix product or convolution
        // as its prologue, which the product recomputes on every reuse of
        // an element (once per column tile), only when it cannot instead
        // end a Many-to-Many producer as its epilogue, computed once.
        let reuses = matches!(
            GraphOp::of(plan.module, op),
            Some(GraphOp::Matmul | GraphOp::Gemm | GraphOp::Conv)
        );
        if anchor && forwards && reuses && self.producer_anchor(plan, group).is_some() {
            return false;
        }
        // The same, growing backwards: an op joins a product's group as its
        // prologue only when it cannot end a Many-to-Many producer of its
        // own (GELU between two linear layers ends the first).
        let product_group = group.anchor.is_some_and(|a| {
            matches!(
                GraphOp::of(plan.module, a),
                Some(GraphOp::Matmul | GraphOp::Gemm | GraphOp::Conv)
            )
        });
        if !forwards && !anchor && product_group && self.ends_free_producer(plan, op) {
            return false;
        }
        let mut members: HashSet<OpId> = group.ops.iter().copied().collect();
        members.insert(op);
        // A kernel binds a buffer per tensor it reads and writes, within
        // the target's limit (GridSample's taps read many).
        if !plan.convex(&members) || plan.bindings(&members) as i64 > plan.max_buffers {
            return false;
        }
        group.ops.push(op);
        group.mapping = mapping;
        if anchor && !prologue {
            group.anchor = Some(op);
        }
        true
    }

    /// Whether `op` joins `group` as its anchor's prologue.
    fn prologue_of(&self, plan: &Plan, group: &Group, op: OpId) -> bool {
        group.anchor.is_some() && self.prologue_product(plan, op) == group.anchor
    }

    /// The product that can take `op` as its prologue (the `[prologues]`
    /// table): `op` is a normalization only the product reads, along its
    /// K axis.
    fn prologue_product(&self, plan: &Plan, op: OpId) -> Option<OpId> {
        let m = plan.module;
        let [product] = plan.consumers(op)[..] else {
            return None;
        };
        (self.tables.prologue(&m.op(op).name, &m.op(product).name)
            && super::row_norm_prologue(m, product) == Some(op))
        .then_some(product)
    }

    /// Whether `op` could end an ungrouped Many-to-Many producer as its
    /// epilogue: it reaches one through ungrouped One-to-One producers of
    /// its shape.
    fn ends_free_producer(&self, plan: &Plan, op: OpId) -> bool {
        let shape = |op: OpId| plan.result_shape(op);
        let want = shape(op);
        let epilogue_fuses = self
            .tables
            .fuse(MappingType::ManyToMany, MappingType::OneToOne)
            .1
            == Color::Green;
        let mut stack = vec![op];
        let mut seen = HashSet::new();
        while let Some(o) = stack.pop() {
            for p in plan.producers(o) {
                if plan.group_of.contains_key(&p) || shape(p) != want || !seen.insert(p) {
                    continue;
                }
                match plan.mapping.get(&p) {
                    Some(MappingType::ManyToMany) if epilogue_fuses => return true,
                    Some(MappingType::OneToOne) => stack.push(p),
                    _ => {}
                }
            }
        }
        false
    }

    /// An ungrouped Many-to-Many producer of `group` that the group could
    /// take as its anchor when it grows backwards, computing its ops in the
    /// producer's own iteration space (same shape: an epilogue behind a
    /// layout change would need a kernel of its own).
    fn producer_anchor(&self, plan: &Plan, group: &Group) -> Option<OpId> {
        let shape = |op: OpId| plan.result_shape(op);
        group
            .ops
            .iter()
            .flat_map(|&g| plan.producers(g))
            .filter(|p| !group.ops.contains(p) && !plan.group_of.contains_key(p))
            .find(|&p| {
                plan.mapping.get(&p) == Some(&MappingType::ManyToMany)
                    && self.tables.fuse(MappingType::ManyToMany, group.mapping).1 == Color::Green
                    && group.ops.iter().all(|&g| shape(g) == shape(p))
            })
    }

    fn plan(
        &self,
        module: &Module,
        ctx: &PassContext,
        block: BlockId,
        max_buffers: i64,
    ) -> Vec<Group> {
        let ops = &module.blocks[block].ops;
        let mut plan = Plan {
            module,
            max_buffers,
            position: HashMap::new(),
            mapping: HashMap::new(),
            group_of: HashMap::new(),
        };
        for (i, &op) in ops.iter().enumerate() {
            plan.position.insert(op, i);
            if GraphOp::of(module, op).is_some()
                && !is_data(module, op)
                && module.op(op).regions.is_empty()
                && let Some((m, _)) = classify(module, ctx.registry, &self.tables, op)
            {
                plan.mapping.insert(op, m);
            }
        }
        let size = |op: OpId| -> i64 {
            module
                .op(op)
                .results
                .iter()
                .filter_map(|&r| module.value_type(r).as_tensor())
                .map(|t| t.num_elements())
                .sum()
        };
        let mut seeds: Vec<OpId> = ops
            .iter()
            .copied()
            .filter(|o| plan.mapping.get(o) == Some(&MappingType::OneToOne))
            .collect();
        seeds.sort_by_key(|&o| (size(o), plan.position[&o]));
        let mut groups = Vec::new();
        for seed in seeds {
            if plan.group_of.contains_key(&seed) {
                continue;
            }
            let mut group = Group {
                ops: vec![seed],
                mapping: MappingType::OneToOne,
                anchor: None,
            };
            for forwards in [true, false] {
                let mut grew = true;
                while grew {
                    grew = false;
                    let neighbours: Vec<OpId> = group
                        .ops
                        .iter()
                        .flat_map(|&m| {
                            if forwards {
                                plan.consumers(m)
                            } else {
                                plan.producers(m)
                            }
                        })
                        .filter(|n| !group.ops.contains(n))
                        .collect();
                    for n in neighbours {
                        if !group.ops.contains(&n) && self.try_add(&plan, &mut group, n, forwards) {
                            grew = true;
                        }
                    }
                }
            }
            for &op in &group.ops {
                plan.group_of.insert(op, groups.len());
            }
            groups.push(group);
        }
        // A normalization left out of every group (its product has no
        // One-to-One neighbour to seed one) still joins its product.
        for &op in ops {
            let Some(product) = self.prologue_product(&plan, op) else {
                continue;
            };
            if plan.group_of.contains_key(&op) {
                continue;
            }
            let group = match plan.group_of.get(&product) {
                Some(&g) if groups[g].anchor == Some(product) => g,
                Some(_) => continue,
                None => {
                    plan.group_of.insert(product, groups.len());
                    groups.push(Group {
                        ops: vec![product],
                        mapping: MappingType::ManyToMany,
                        anchor: Some(product),
                    });
                    groups.len() - 1
                }
            };
            if groups[group].ops.len() >= self.max_ops {
                continue;
            }
            let members: HashSet<OpId> = groups[group].ops.iter().copied().chain([op]).collect();
            if plan.convex(&members) && plan.bindings(&members) as i64 <= plan.max_buffers {
                groups[group].ops.push(op);
                plan.group_of.insert(op, group);
            }
        }
        groups.retain(|g| g.ops.len() > 1);
        groups
    }
}

/// The most buffers one group's kernel may bind: the target's
/// `max_kernel_buffers`, and the device's `max_storage_buffers` where its
/// profile knows it. A group's count takes in the tensors that will be
/// textures, which WebGPU bounds apart; what kernel.lower adds (a split
/// product's partials, a stored anchor) may pass it, and a bundle's plan
/// says so (`webgpu.limits`).
fn buffer_limit(m: &Module) -> Result<i64, String> {
    let target = ircc_dialects::kernel::Target::webgpu().max_kernel_buffers;
    let device = ircc_dialects::kernel::target_profile(m)?;
    Ok(device
        .max_storage_buffers
        .map_or(target, |n| target.min(i64::from(n))))
}

/// Turns one group into a `graph.fused` op, to be placed at its last
/// member (returned with it); the members move into it, and leave the
/// block when the caller sweeps it. `position` orders the block's ops.
fn outline(module: &mut Module, position: &HashMap<OpId, usize>, group: &Group) -> (OpId, OpId) {
    let mut members: HashSet<OpId> = group.ops.iter().copied().collect();
    // Views between members (a member reads a view of another member's
    // result) are part of the group's index math and go inside; those that
    // outside ops read too are copied, the original staying for them.
    let mut views: HashSet<OpId> = HashSet::new();
    loop {
        let mut grew = false;
        let inside: HashSet<OpId> = members.union(&views).copied().collect();
        for &op in &inside {
            for &v in &module.op(op).operands {
                let Some(p) = module.defining_op(v) else {
                    continue;
                };
                if !is_view(module, p) || inside.contains(&p) {
                    continue;
                }
                let source_inside = module
                    .defining_op(module.op(p).operands[0])
                    .is_some_and(|s| inside.contains(&s));
                let only_here = module
                    .op(p)
                    .results
                    .iter()
                    .all(|&r| module.value(r).uses.iter().all(|u| inside.contains(&u.op)));
                if only_here {
                    members.insert(p);
                    grew = true;
                } else if source_inside {
                    views.insert(p);
                    grew = true;
                }
            }
        }
        if !grew {
            break;
        }
    }
    let body_ops: HashSet<OpId> = members.union(&views).copied().collect();
    let mut ordered: Vec<OpId> = body_ops.iter().copied().collect();
    ordered.sort_by_key(|o| position[o]);
    let mut inputs: Vec<ValueId> = Vec::new();
    for &op in &ordered {
        for &v in &module.op(op).operands {
            let inside = module.defining_op(v).is_some_and(|p| body_ops.contains(&p));
            if !inside && !inputs.contains(&v) {
                inputs.push(v);
            }
        }
    }
    let mut outputs: Vec<ValueId> = Vec::new();
    for &op in ordered.iter().filter(|op| members.contains(op)) {
        for &r in &module.op(op).results {
            if module
                .value(r)
                .uses
                .iter()
                .any(|u| !members.contains(&u.op))
            {
                outputs.push(r);
            }
        }
    }
    let anchor = module.op(group.anchor.unwrap_or(group.ops[0])).name.clone();
    let last = *ordered.last().expect("a group has ops");
    let fused = module.create_op(
        OpBuilder::new(GraphOp::Fused.name())
            .operands(inputs.clone())
            .results(
                outputs
                    .iter()
                    .map(|&r| module.value_type(r).clone())
                    .collect::<Vec<Type>>(),
            )
            .attr("anchor", Attribute::String(anchor))
            .attr(
                "mapping",
                Attribute::String(group.mapping.name().to_string()),
            )
            .regions(1)
            .loc(module.op(last).loc.clone()),
    );
    let region = module.op(fused).regions[0];
    let body = module.add_block(
        region,
        inputs
            .iter()
            .map(|&v| module.value_type(v).clone())
            .collect(),
    );
    let mut mapped: HashMap<ValueId, ValueId> = inputs
        .iter()
        .copied()
        .zip(module.blocks[body].args.clone())
        .collect();
    // A member moves into the body, reading the body's arguments for what
    // comes from outside (a chain of 10^6 ops is not held twice); a view
    // stays where it is and is copied.
    for &op in &ordered {
        if members.contains(&op) {
            for (i, v) in module.op(op).operands.clone().into_iter().enumerate() {
                let inner = mapped[&v];
                if inner != v {
                    module.set_operand(op, i, inner);
                }
            }
            module.append_op(body, op);
            for r in module.op(op).results.clone() {
                mapped.insert(r, r);
            }
            continue;
        }
        let o = module.op(op).clone();
        let clone = module.create_op(
            OpBuilder::new(o.name)
                .operands(o.operands.iter().map(|v| mapped[v]))
                .results(o.results.iter().map(|&r| module.value_type(r).clone()))
                .attrs(o.attrs)
                .loc(o.loc),
        );
        module.append_op(body, clone);
        for (&old, &new) in o.results.iter().zip(&module.op(clone).results.clone()) {
            module.values[new].name = module.value(old).name.clone();
            mapped.insert(old, new);
        }
    }
    let terminator = module.create_op(
        OpBuilder::new(GraphOp::Yield.name()).operands(outputs.iter().map(|v| mapped[v])),
    );
    module.append_op(body, terminator);
    // Readers outside the fused op read its results instead.
    for (i, &r) in outputs.iter().enumerate() {
        let new = module.op(fused).results[i];
        module.values[new].name = module.value(r).name.clone();
        let outside: Vec<_> = module
            .value(r)
            .uses
            .iter()
            .filter(|u| !module.is_inside(u.op, fused))
            .copied()
            .collect();
        for u in outside {
            module.set_operand(u.op, u.index as usize, new);
        }
    }
    (last, fused)
}

/// The groups, less those that would leave the fused block with a cycle:
/// two groups that are each convex can still read each other (a1 -> b1
/// and b2 -> a2), which no order of the fused ops satisfies. One
/// topological sort of the groups and the ops outside them finds such a
/// cycle; the last group formed on it is dropped, and the sort repeated.
/// Views count as part of their readers, as the plan sees them.
fn without_cycles(module: &Module, block: BlockId, mut groups: Vec<Group>) -> Vec<Group> {
    let ops = &module.blocks[block].ops;
    loop {
        // A node per group, then one per op outside every group.
        let mut node: HashMap<OpId, usize> = HashMap::new();
        for (g, group) in groups.iter().enumerate() {
            node.extend(group.ops.iter().map(|&op| (op, g)));
        }
        for (i, &op) in ops.iter().enumerate() {
            node.entry(op).or_insert(groups.len() + i);
        }
        let count = groups.len() + ops.len();
        let mut readers: Vec<Vec<usize>> = vec![Vec::new(); count];
        let mut sources: Vec<Vec<usize>> = vec![Vec::new(); count];
        // Views are index computations their readers take in: an edge
        // runs from what a view reads to the view's reader.
        let source = |v| {
            let mut d = module.defining_op(v)?;
            while is_view(module, d) {
                d = module.defining_op(*module.op(d).operands.first()?)?;
            }
            Some(d)
        };
        for &op in ops.iter().filter(|&&op| !is_view(module, op)) {
            let to = node[&op];
            for &v in &module.op(op).operands {
                if let Some(from) = source(v).and_then(|d| node.get(&d).copied())
                    && from != to
                {
                    readers[from].push(to);
                    sources[to].push(from);
                }
            }
        }
        // Peel nodes with nothing left before them, then (of the rest)
        // those with nothing left after them: what remains lies on cycles.
        let peel = |next: &Vec<Vec<usize>>, prev: &Vec<Vec<usize>>, alive: &mut Vec<bool>| {
            let mut waiting: Vec<usize> = (0..count)
                .map(|n| prev[n].iter().filter(|&&p| alive[p]).count())
                .collect();
            let mut ready: Vec<usize> = (0..count)
                .filter(|&n| alive[n] && waiting[n] == 0)
                .collect();
            while let Some(n) = ready.pop() {
                alive[n] = false;
                for &r in &next[n] {
                    waiting[r] -= 1;
                    if waiting[r] == 0 && alive[r] {
                        ready.push(r);
                    }
                }
            }
        };
        let mut alive = vec![true; count];
        peel(&readers, &sources, &mut alive);
        if !alive.contains(&true) {
            return groups;
        }
        peel(&sources, &readers, &mut alive);
        let on_cycle = (0..groups.len())
            .rev()
            .find(|&g| alive[g])
            .expect("a cycle of the fused block passes through a group");
        groups.remove(on_cycle);
    }
}

/// Reorders a block so every value is defined before it is used, keeping
/// the original order wherever it already is.
fn sort_topologically(module: &mut Module, block: BlockId) {
    let ops = module.blocks[block].ops.clone();
    let position: HashMap<OpId, usize> = ops.iter().enumerate().map(|(i, &o)| (o, i)).collect();
    let mut waiting: HashMap<OpId, usize> = HashMap::new();
    let mut readers: HashMap<OpId, Vec<OpId>> = HashMap::new();
    for &op in &ops {
        let deps: HashSet<OpId> = module
            .op(op)
            .operands
            .iter()
            .filter_map(|&v| module.defining_op(v))
            .filter(|p| position.contains_key(p))
            .collect();
        waiting.insert(op, deps.len());
        for d in deps {
            readers.entry(d).or_default().push(op);
        }
    }
    let mut ready: BinaryHeap<Reverse<(usize, OpId)>> = ops
        .iter()
        .filter(|o| waiting[o] == 0)
        .map(|&o| Reverse((position[&o], o)))
        .collect();
    let mut sorted = Vec::with_capacity(ops.len());
    while let Some(Reverse((_, op))) = ready.pop() {
        sorted.push(op);
        for &r in readers.get(&op).map(Vec::as_slice).unwrap_or_default() {
            let w = waiting.get_mut(&r).expect("a reader waits");
            *w -= 1;
            if *w == 0 {
                ready.push(Reverse((position[&r], r)));
            }
        }
    }
    if sorted.len() == ops.len() {
        module.blocks[block].ops = sorted;
    }
}

impl FunctionPass for Fuse {
    fn name(&self) -> &str {
        GraphFuseOptions::NAME
    }

    fn run_on_body(&mut self, module: &mut Module, body: BlockId, ctx: &PassContext) -> PassResult {
        let max_buffers = buffer_limit(module).map_err(|e| {
            Diagnostics(vec![Diagnostic::plain(format!(
                "{}: {e}",
                GraphFuseOptions::NAME
            ))])
        })?;
        let groups = without_cycles(module, body, self.plan(module, ctx, body, max_buffers));
        let position: HashMap<OpId, usize> = module.blocks[body]
            .ops
            .iter()
            .enumerate()
            .map(|(i, &o)| (o, i))
            .collect();
        let mut placed: HashMap<OpId, Vec<OpId>> = HashMap::new();
        for g in &groups {
            let (last, fused) = outline(module, &position, g);
            placed.entry(last).or_default().push(fused);
        }
        module.sweep_block(body, &placed);
        sort_topologically(module, body);
        Ok(())
    }
}
