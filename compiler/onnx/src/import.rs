//! The importer's state: values by ONNX name, each either a constant known
//! at import time or an SSA value of the function being built.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

use ircc_core::builtin::FuncOp;
use ircc_core::interp::NoWeights;
use ircc_core::ir::{BlockId, OpBuilder, ValueId};
use ircc_core::limits::{MAX_ELEMENTS, MAX_FOLDED_ELEMENTS, MAX_FOLDED_WORK};
use ircc_core::stored::Bytes;
use ircc_core::{
    Attribute, Attributes, DenseAttr, Module, OpId, Registry, StoredTensor, Tensor, TensorType,
    Type,
};
use ircc_dialects::graph::GraphOp;
use prost::Message;

use crate::attrs::Attrs;
use crate::proto::{ModelProto, NodeProto};
use crate::tensor::{ExternalData, elem_type, to_stored};
use crate::{ImportError, ImportOptions, Imported, Result};

/// Integer constants up to this many elements are always inlined.
const INDEX_INLINE_LIMIT: usize = 4096;

/// An ONNX value during import. Constants are shared, so one that is used
/// in several places is placed in the IR once (keyed by its allocation).
#[derive(Clone)]
pub enum Val {
    Const(Arc<Constant>),
    Dyn(ValueId),
}

impl Val {
    pub fn constant(t: Tensor) -> Val {
        Val::Const(Arc::new(Constant::Computed(t)))
    }

    /// A constant as the model stores it (an initializer).
    pub fn stored(t: StoredTensor) -> Val {
        Val::Const(Arc::new(Constant::Stored(t)))
    }
}

/// A constant known at import: a tensor computed there, or an
/// initializer as the model stores it, decoded only when an operator is
/// evaluated on it. A weight that is only placed in the IR is never
/// decoded: its stored bytes become the weight.
pub enum Constant {
    Computed(Tensor),
    Stored(StoredTensor),
}

impl Constant {
    pub fn ty(&self) -> TensorType {
        match self {
            Constant::Computed(t) => t.ty(),
            Constant::Stored(s) => s.ty().clone(),
        }
    }

    /// The values (decoded again at each call for a stored constant, so
    /// no decoded copy outlives its use).
    pub fn value(&self) -> Tensor {
        match self {
            Constant::Computed(t) => t.clone(),
            Constant::Stored(s) => s.to_tensor(),
        }
    }

    /// The constant as a weight stores it.
    fn stored(&self) -> StoredTensor {
        match self {
            Constant::Computed(t) => StoredTensor::from_tensor(t),
            Constant::Stored(s) => s.clone(),
        }
    }
}

fn key(t: &Arc<Constant>) -> usize {
    Arc::as_ptr(t) as usize
}

/// The most elements a value computed from known inputs may have to be
/// known itself: shapes, sizes and indices, as integer constants are
/// inlined up to (a run's inputs are known, and the network is not to be
/// evaluated while importing it).
const MAX_KNOWN_ELEMENTS: i64 = 4096;

pub struct Importer<'r> {
    pub registry: &'r Registry,
    pub module: Module,
    pub block: BlockId,
    pub opset: i64,
    values: HashMap<String, Val>,
    /// Input values to specialize on (see `ImportOptions::known_inputs`),
    /// and the values of ops computed from them and constants alone.
    known: HashMap<ValueId, Tensor>,
    /// The known inputs each computed known value came from.
    known_from: HashMap<ValueId, Vec<ValueId>>,
    /// The known inputs specialized on, with the first operand each fed.
    bound: std::cell::RefCell<Vec<(String, String)>>,
    remarks: std::cell::RefCell<Vec<String>>,
    /// Constants already placed in the IR; the Arc keeps the key's address alive.
    placed: HashMap<usize, (Arc<Constant>, ValueId)>,
    /// ONNX names of constants, for the placed ops and weights.
    const_names: HashMap<usize, String>,
    weight_names: HashSet<String>,
    pub weights: Vec<(String, StoredTensor)>,
    inline_limit: usize,
    /// Scratch space for evaluating ops on constants.
    scratch: Module,
    /// The model's external-data files, relative to its folder.
    pub external: ExternalData,
    /// The nodes that inlined bodies (If, Loop, Scan) have added so far.
    pub inlined_nodes: usize,
}

/// Decodes and imports a model held in memory.
pub fn import_model(
    bytes: &[u8],
    base: &Path,
    registry: &Registry,
    options: &ImportOptions,
) -> Result<Imported> {
    import_bytes(Bytes::copy_from_slice(bytes), base, registry, options)
}

/// [`import_model`] of shared bytes, which the model's raw tensors stay
/// slices of.
pub(crate) fn import_bytes(
    bytes: Bytes,
    base: &Path,
    registry: &Registry,
    options: &ImportOptions,
) -> Result<Imported> {
    let model = ModelProto::decode(bytes)
        .map_err(|e| ImportError::invalid(format!("not a valid ONNX model: {e}")))?;
    let graph = model
        .graph
        .as_ref()
        .ok_or_else(|| ImportError::invalid("the model has no graph"))?;
    let opset = model
        .opset_import
        .iter()
        .find(|o| o.domain.is_empty() || o.domain == "ai.onnx")
        .map(|o| o.version)
        .ok_or_else(|| {
            let domains: Vec<&str> = model.opset_import.iter().map(|o| o.domain.as_str()).collect();
            ImportError::unsupported(format!("only the operator sets {domains:?} are imported; ircc supports the default ONNX domain"))
        })?;
    // 28 is the newest opset of onnx 1.23; the graph ops' semantics are
    // those of opsets 13 to 28 (older ones are converted where they differ).
    if !(7..=28).contains(&opset) {
        return Err(ImportError::unsupported(format!(
            "opset {opset} is not supported (7 to 28 are)"
        )));
    }
    let mut m = Module::new();
    let initializers: HashMap<&str, usize> = graph
        .initializer
        .iter()
        .enumerate()
        .map(|(i, t)| (t.name.as_str(), i))
        .collect();
    let mut arg_types = Vec::new();
    let mut arg_names = Vec::new();
    for input in &graph.input {
        if initializers.contains_key(input.name.as_str()) {
            continue;
        }
        if arg_names.contains(&input.name) {
            return Err(ImportError::invalid(format!(
                "the graph has two inputs named '{}'",
                input.name
            )));
        }
        arg_types.push(Type::Tensor(input_type(input, options)?));
        arg_names.push(input.name.clone());
    }
    let not_inputs = |names: &mut dyn Iterator<Item = &String>, what: &str| match names
        .filter(|n| !arg_names.contains(n))
        .min()
    {
        Some(unknown) => Err(ImportError::invalid(format!(
            "{what} '{unknown}', which is not an input of the model (inputs: {})",
            arg_names.join(", ")
        ))),
        None => Ok(()),
    };
    not_inputs(&mut options.known_inputs.keys(), "a value is bound to")?;
    not_inputs(&mut options.input_shapes.keys(), "--input-shape names")?;
    let known = known_values(&arg_names, &arg_types, options)?;
    let func = m.create_op(OpBuilder::new(FuncOp::Func.name()).regions(1));
    let body = m.body;
    m.append_op(body, func);
    let region = m.op(func).regions[0];
    let block = m.add_block(region, arg_types.clone());
    let mut imp = Importer {
        registry,
        module: m,
        block,
        opset,
        values: HashMap::new(),
        known: HashMap::new(),
        known_from: HashMap::new(),
        bound: Default::default(),
        remarks: Default::default(),
        placed: HashMap::new(),
        const_names: HashMap::new(),
        weight_names: HashSet::new(),
        weights: Vec::new(),
        inline_limit: if options.inline_limit == 0 {
            64
        } else {
            options.inline_limit
        },
        scratch: Module::new(),
        external: ExternalData::new(base),
        inlined_nodes: 0,
    };
    for (i, name) in arg_names.iter().enumerate() {
        let v = imp.module.blocks[block].args[i];
        imp.module.values[v].name = Some(name.clone());
        imp.values.insert(name.clone(), Val::Dyn(v));
        if let Some(t) = &known[i] {
            imp.known.insert(v, t.clone());
        }
    }
    let steps = graph.initializer.len() + graph.node.len();
    for (i, t) in graph.initializer.iter().enumerate() {
        options.progress.report(i, steps);
        if imp.values.contains_key(&t.name) {
            return Err(ImportError::invalid(format!(
                "the graph has two initializers named '{}'",
                t.name
            )));
        }
        let stored = to_stored(t, &imp.external)
            .map_err(|e| e.context(format!("initializer '{}'", t.name)))?;
        let c = Val::stored(stored);
        if let Val::Const(k) = &c {
            imp.const_names.insert(key(k), t.name.clone());
        }
        imp.values.insert(t.name.clone(), c);
    }
    for (i, node) in graph.node.iter().enumerate() {
        options.progress.report(graph.initializer.len() + i, steps);
        imp.import_node(i, node)?;
    }
    let mut outputs = Vec::new();
    let mut result_types = Vec::new();
    let mut res_attrs = Vec::new();
    for out in &graph.output {
        let v = imp
            .value(&out.name)
            .map_err(|e| e.context("graph output"))?;
        let v = imp.materialize(v)?;
        result_types.push(imp.module.value_type(v).clone());
        let mut d = Attributes::new();
        d.insert("ircc.name".into(), Attribute::String(out.name.clone()));
        res_attrs.push(Attribute::Dict(d));
        outputs.push(v);
    }
    let ret = imp
        .module
        .create_op(OpBuilder::new(FuncOp::Return.name()).operands(outputs));
    imp.module.append_op(block, ret);
    let mut attrs = Attributes::new();
    attrs.insert("sym_name".into(), Attribute::String("main".into()));
    attrs.insert(
        "function_type".into(),
        Attribute::Type(Type::Function {
            inputs: arg_types,
            results: result_types,
        }),
    );
    attrs.insert(
        "arg_attrs".into(),
        Attribute::Array(
            arg_names
                .iter()
                .map(|n| {
                    let mut d = Attributes::new();
                    d.insert("ircc.name".into(), Attribute::String(n.clone()));
                    Attribute::Dict(d)
                })
                .collect(),
        ),
    );
    attrs.insert("res_attrs".into(), Attribute::Array(res_attrs));
    imp.module.op_mut(func).attrs = attrs;
    Ok(Imported {
        bound: imp.bound.take(),
        remarks: imp.remarks.take(),
        module: imp.module,
        weights: imp.weights,
    })
}

/// The value known for each input: bound (each must have the input's
/// type), else given to a run by name or by position (where it has the
/// input's type).
fn known_values(
    names: &[String],
    types: &[Type],
    options: &ImportOptions,
) -> Result<Vec<Option<Tensor>>> {
    let mut known = Vec::with_capacity(names.len());
    for (i, (name, ty)) in names.iter().zip(types).enumerate() {
        if let Some(value) = options.known_inputs.get(name) {
            if Type::Tensor(value.ty()) != *ty {
                return Err(ImportError::invalid(format!(
                    "input '{name}' is {ty}, but the value bound to it is {}",
                    value.ty()
                )));
            }
            known.push(Some(value.clone()));
            continue;
        }
        let given = options
            .given
            .get(name)
            .or(options.given_in_order.get(i).and_then(Option::as_ref));
        known.push(given.filter(|v| Type::Tensor(v.ty()) == *ty).cloned());
    }
    Ok(known)
}

fn input_type(input: &crate::proto::ValueInfoProto, options: &ImportOptions) -> Result<TensorType> {
    let tt = input
        .r#type
        .as_ref()
        .and_then(|t| t.tensor_type.as_ref())
        .ok_or_else(|| {
            ImportError::unsupported(format!("input '{}' is not a tensor", input.name))
        })?;
    let elem = elem_type(tt.elem_type).map_err(|e| e.context(format!("input '{}'", input.name)))?;
    let given = options.input_shapes.get(&input.name);
    let Some(dims) = tt.shape.as_ref().map(|s| s.dim.as_slice()) else {
        // No shape at all (not even a rank): only the user can say it.
        return match given {
            Some(shape) => Ok(TensorType::new(shape.clone(), elem)),
            None => Err(ImportError::invalid(format!(
                "input '{}' has no shape: give it with --input-shape {}=...",
                input.name, input.name
            ))),
        };
    };
    if let Some(shape) = given {
        if shape.len() != dims.len() {
            return Err(ImportError::invalid(format!(
                "--input-shape gives '{}' rank {}, but the model declares rank {}",
                input.name,
                shape.len(),
                dims.len()
            )));
        }
        for (i, (d, &v)) in dims.iter().zip(shape).enumerate() {
            if let Some(fixed) = d.dim_value.filter(|&x| x >= 0)
                && fixed != v
            {
                return Err(ImportError::invalid(format!(
                    "--input-shape gives dimension {i} of '{}' as {v}, but the model fixes it at {fixed}",
                    input.name
                )));
            }
        }
        return Ok(TensorType::new(shape.clone(), elem));
    }
    let mut shape = Vec::new();
    for d in dims {
        match (d.dim_value, &d.dim_param) {
            (Some(v), _) if v >= 0 => shape.push(v),
            (_, Some(p)) => {
                return Err(ImportError::invalid(format!(
                    "input '{}' has the symbolic dimension '{p}': give its shape with --input-shape {}=...",
                    input.name, input.name
                )));
            }
            _ => {
                return Err(ImportError::invalid(format!(
                    "input '{}' has an unknown dimension",
                    input.name
                )));
            }
        }
    }
    Ok(TensorType::new(shape, elem))
}

impl Importer<'_> {
    /// Imports node `i` of a graph; an error names the node.
    pub(crate) fn import_node(&mut self, i: usize, node: &NodeProto) -> Result<()> {
        let attrs = Attrs::new(node);
        self.node(node, &attrs)
            .and_then(|()| attrs.check())
            .map_err(|e| {
                e.context(if node.name.is_empty() {
                    format!("node #{i} ({})", node.op_type)
                } else {
                    format!("node '{}' ({})", node.name, node.op_type)
                })
            })
    }

    /// The values visible by name, to restore when an inlined body ends.
    pub(crate) fn scope(&self) -> HashMap<String, Val> {
        self.values.clone()
    }

    pub(crate) fn restore_scope(&mut self, scope: HashMap<String, Val>) {
        self.values = scope;
    }

    /// Names `v` in the current scope, as a body's input or initializer.
    pub(crate) fn bind_name(&mut self, name: &str, v: Val) {
        self.values.insert(name.to_string(), v);
    }

    pub fn value(&self, name: &str) -> Result<Val> {
        self.values.get(name).cloned().ok_or_else(|| {
            ImportError::invalid(format!("value '{name}' is used before it is defined"))
        })
    }

    /// The node's input `i`, or None when it is absent (or named "").
    pub fn input(&self, node: &NodeProto, i: usize) -> Result<Option<Val>> {
        match node.input.get(i) {
            None => Ok(None),
            Some(n) if n.is_empty() => Ok(None),
            Some(n) => self.value(n).map(Some),
        }
    }

    pub fn required(&self, node: &NodeProto, i: usize) -> Result<Val> {
        self.input(node, i)?
            .ok_or_else(|| ImportError::invalid(format!("input #{i} is missing")))
    }

    /// The value's constant, if it has one: a constant, or a known input
    /// (recorded as bound, feeding `what`).
    pub fn known_constant_for(&self, v: &Val, what: &str) -> Option<Tensor> {
        match v {
            Val::Const(t) => Some(t.value()),
            Val::Dyn(id) => {
                let t = self.known.get(id).cloned()?;
                self.bind(*id, what);
                Some(t)
            }
        }
    }

    /// Whether the value is a constant or a known input.
    pub fn is_known(&self, v: &Val) -> bool {
        match v {
            Val::Const(_) => true,
            Val::Dyn(id) => self.known.contains_key(id),
        }
    }

    /// Adds a remark the driver prints before compiling: what import did
    /// that a user should know of.
    pub fn remark(&self, text: String) {
        self.remarks.borrow_mut().push(text);
    }

    /// Records that the module was specialized on known value `v`: on the
    /// inputs it was computed from.
    fn bind(&self, v: ValueId, what: &str) {
        let inputs = self.known_from.get(&v).cloned().unwrap_or_else(|| vec![v]);
        let mut bound = self.bound.borrow_mut();
        for input in inputs {
            let name = self.module.value(input).name.clone().unwrap_or_default();
            if !bound.iter().any(|(n, _)| *n == name) {
                bound.push((name, what.to_string()));
            }
        }
    }

    /// The values of `operands` where each is a constant or known, and the
    /// known inputs they come from; `None` where one is neither, or where
    /// all are constants (the op is evaluated then, not emitted).
    fn known_operands(&self, operands: &[Val]) -> Option<(Vec<Tensor>, Vec<ValueId>)> {
        // Shape-like values only: a run's inputs are known too, and the
        // network itself is not to be evaluated while importing it.
        if operands
            .iter()
            .any(|v| self.type_of(v).num_elements() > MAX_KNOWN_ELEMENTS)
        {
            return None;
        }
        let mut from: Vec<ValueId> = Vec::new();
        let values = operands
            .iter()
            .map(|v| match v {
                Val::Const(t) => Some(t.value()),
                Val::Dyn(id) => {
                    let t = self.known.get(id)?.clone();
                    for input in self.known_from.get(id).map_or(&[*id][..], |f| &f[..]) {
                        if !from.contains(input) {
                            from.push(*input);
                        }
                    }
                    Some(t)
                }
            })
            .collect::<Option<Vec<Tensor>>>()?;
        (!from.is_empty()).then_some((values, from))
    }

    /// Input `i` as a constant, for shape-like inputs.
    pub fn constant_input(&self, node: &NodeProto, i: usize, what: &str) -> Result<Option<Tensor>> {
        match self.input(node, i)? {
            None => Ok(None),
            Some(Val::Const(t)) => Ok(Some(t.value())),
            Some(Val::Dyn(v)) if self.known.contains_key(&v) => {
                self.bind(v, &format!("{}'s {what}", node.op_type));
                Ok(self.known.get(&v).cloned())
            }
            Some(Val::Dyn(_)) => Err(ImportError::unsupported(format!(
                "input '{what}' must be a constant after shape folding (it depends on the model's inputs)"
            ))),
        }
    }

    pub fn define(&mut self, node: &NodeProto, outputs: Vec<Val>) -> Result<()> {
        for (i, v) in outputs.into_iter().enumerate() {
            match node.output.get(i) {
                Some(name) if !name.is_empty() => {
                    if self.values.contains_key(name) {
                        return Err(ImportError::invalid(format!(
                            "output '{name}' is already defined (by an input, an initializer or an earlier node)"
                        )));
                    }
                    match &v {
                        Val::Dyn(id) if self.module.value(*id).name.is_none() => {
                            self.module.values[*id].name = Some(name.clone());
                        }
                        Val::Const(c) => {
                            self.const_names
                                .entry(key(c))
                                .or_insert_with(|| name.clone());
                        }
                        Val::Dyn(_) => {}
                    }
                    self.values.insert(name.clone(), v);
                }
                _ => {}
            }
        }
        Ok(())
    }

    pub fn type_of(&self, v: &Val) -> TensorType {
        match v {
            Val::Const(t) => t.ty(),
            Val::Dyn(id) => self
                .module
                .value_type(*id)
                .as_tensor()
                .cloned()
                .expect("imported values are tensors"),
        }
    }

    /// Puts a value into the IR: constants become `graph.constant` (small)
    /// or `graph.param` with a weight (large), once each.
    pub fn materialize(&mut self, v: Val) -> Result<ValueId> {
        let c = match v {
            Val::Dyn(id) => return Ok(id),
            Val::Const(c) => c,
        };
        if let Some((_, id)) = self.placed.get(&key(&c)) {
            return Ok(*id);
        }
        let name = self.const_names.get(&key(&c)).cloned();
        let ty = c.ty();
        let b = if ty.num_elements() as usize > self.inline_limit_of(ty.elem) {
            let base = name.clone().unwrap_or_else(|| "weight".to_string());
            let mut weight = base.clone();
            let mut k = 1;
            while !self.weight_names.insert(weight.clone()) {
                weight = format!("{base}_{k}");
                k += 1;
            }
            self.weights.push((weight.clone(), c.stored()));
            OpBuilder::new(GraphOp::Param.name()).attr("name", Attribute::String(weight))
        } else {
            OpBuilder::new(GraphOp::Constant.name())
                .attr("value", Attribute::Dense(c.value().to_dense()))
        };
        let op = self.module.create_op(b.results([Type::Tensor(ty)]));
        self.module.append_op(self.block, op);
        let id = self.module.op(op).results[0];
        self.module.values[id].name = name;
        self.placed.insert(key(&c), (c, id));
        Ok(id)
    }

    /// The most elements a constant of `elem` is placed inline with.
    /// Integer tensors are indices and shapes: passes need their values (a
    /// gather by constant indices becomes a view), and they are small.
    fn inline_limit_of(&self, elem: ircc_core::ElemType) -> usize {
        if elem.is_int() {
            self.inline_limit.max(INDEX_INLINE_LIMIT)
        } else {
            self.inline_limit
        }
    }

    /// An integer constant too large to inline placed as a weight of its
    /// own type (`graph.param`), so that what is computed from it stays
    /// graph ops instead of being folded into a wider constant; any other
    /// value as it is.
    pub fn kept_as_weight(&mut self, v: Val) -> Result<Val> {
        match v {
            Val::Const(t)
                if t.ty().elem.is_int()
                    && t.ty().num_elements() as usize
                        > self.inline_limit.max(INDEX_INLINE_LIMIT) =>
            {
                Ok(Val::Dyn(self.materialize(Val::Const(t))?))
            }
            v => Ok(v),
        }
    }

    /// A constant of `shape` with every element `value` (one element),
    /// placed as a splat: no storage, whatever its size.
    pub fn splat(&mut self, value: &Tensor, shape: Vec<i64>) -> Result<Val> {
        let one = value.to_dense();
        let ty = TensorType::new(shape, value.elem);
        let dense = DenseAttr::new(ty.clone(), one.values).map_err(ImportError::invalid)?;
        let op = self.module.create_op(
            OpBuilder::new(GraphOp::Constant.name())
                .attr("value", Attribute::Dense(dense))
                .results([Type::Tensor(ty)]),
        );
        self.module.append_op(self.block, op);
        Ok(Val::Dyn(self.module.op(op).results[0]))
    }

    /// Emits a graph op, or evaluates it when every operand is a constant
    /// and its results stay within [`MAX_FOLDED_ELEMENTS`].
    pub fn emit(
        &mut self,
        op: GraphOp,
        operands: Vec<Val>,
        attrs: Attributes,
        results: usize,
    ) -> Result<Vec<Val>> {
        if operands.iter().all(|v| matches!(v, Val::Const(_))) && !operands.is_empty() {
            let args: Vec<Tensor> = operands
                .iter()
                .map(|v| match v {
                    Val::Const(t) => t.value(),
                    Val::Dyn(_) => unreachable!("checked above"),
                })
                .collect();
            if let Some(ts) = self.evaluate(op, args, attrs.clone(), results)? {
                return Ok(ts.into_iter().map(Val::constant).collect());
            }
        }
        // An op of known inputs (and constants) stays in the IR, computed
        // from its inputs as they are given, but its values are known too,
        // for an op downstream that needs a constant (a window's size
        // through a Cast, a Range's limit through a Sub).
        let known = self.known_operands(&operands);
        let kind = op;
        let mut ids = Vec::new();
        for v in operands {
            ids.push(self.materialize(v)?);
        }
        let op = self.module.create_op(
            OpBuilder::new(kind.name())
                .operands(ids)
                .attrs(attrs.clone())
                .results(vec![Type::Index; results]),
        );
        infer(&mut self.module, self.registry, op)?;
        self.module.append_op(self.block, op);
        let out = self.module.op(op).results.clone();
        let small = out.iter().all(|&r| {
            self.module
                .value_type(r)
                .as_tensor()
                .is_some_and(|t| t.num_elements() <= MAX_KNOWN_ELEMENTS)
        });
        if let Some((args, from)) = known.filter(|_| small)
            && let Ok(Some(values)) = self.evaluate(kind, args, attrs, results)
        {
            for (r, t) in out.iter().zip(values) {
                self.known.insert(*r, t);
                self.known_from.insert(*r, from.clone());
            }
        }
        Ok(out.into_iter().map(Val::Dyn).collect())
    }

    /// Runs a graph op on constants through its interpret hook; `None`
    /// when a result would be larger than a folded constant may be.
    fn evaluate(
        &mut self,
        kind: GraphOp,
        args: Vec<Tensor>,
        attrs: Attributes,
        results: usize,
    ) -> Result<Option<Vec<Tensor>>> {
        let s = &mut self.scratch;
        let holder = s.create_op(
            OpBuilder::new("import.args").results(args.iter().map(|t| Type::Tensor(t.ty()))),
        );
        let operands = s.op(holder).results.clone();
        let name = kind.name();
        let op = s.create_op(
            OpBuilder::new(name)
                .operands(operands)
                .attrs(attrs)
                .results(vec![Type::Index; results]),
        );
        infer(s, self.registry, op)?;
        let too_large = s.op(op).results.iter().any(|&r| match s.value_type(r) {
            Type::Tensor(t) => t.num_elements() > MAX_FOLDED_ELEMENTS,
            _ => false,
        });
        if too_large || folding_work(kind, &args, s, op) > MAX_FOLDED_WORK {
            return Ok(None);
        }
        let view = self
            .registry
            .view(s, op)
            .ok_or_else(|| ImportError::unsupported(format!("'{name}' is not registered")))?;
        let def = self.registry.get(name).expect("registered");
        let interpret = def
            .hooks
            .interpret
            .ok_or_else(|| ImportError::unsupported(format!("'{name}' cannot be evaluated")))?;
        interpret(&view, &args, &mut NoWeights)
            .map(Some)
            .map_err(ImportError::invalid)
    }
}

/// About how many multiply-adds evaluating `op` takes: its result size
/// times the length of the products behind each element (the contraction
/// of a matmul or gemm, a convolution's window over its input channels).
fn folding_work(kind: GraphOp, args: &[Tensor], m: &Module, op: OpId) -> i64 {
    let out: i64 = m
        .op(op)
        .results
        .iter()
        .map(|&r| match m.value_type(r) {
            Type::Tensor(t) => t.num_elements(),
            _ => 1,
        })
        .fold(0, i64::saturating_add);
    let product = match kind {
        GraphOp::Matmul | GraphOp::Gemm => args
            .first()
            .map_or(1, |a| a.shape().iter().copied().max().unwrap_or(1)),
        GraphOp::Conv | GraphOp::ConvTranspose => args.get(1).map_or(1, |w| {
            w.len() / w.shape().first().copied().unwrap_or(1).max(1)
        }),
        // Each result element reads every key: its scores and its values.
        GraphOp::Attention => args
            .get(1)
            .map_or(1, |k| 2 * k.shape().iter().skip(2).product::<usize>()),
        _ => 1,
    };
    out.saturating_mul(product as i64)
}

/// Sets the result types of `op` from its infer hook, checking its verifier
/// and that no result is larger than a tensor may be.
fn infer(module: &mut Module, registry: &Registry, op: OpId) -> Result<()> {
    if registry.get(&module.op(op).name).is_none() {
        return Err(ImportError::unsupported(format!(
            "'{}' is not registered",
            module.op(op).name
        )));
    }
    registry
        .infer_result_types(module, op)
        .map_err(ImportError::invalid)?;
    for &r in &module.op(op).results {
        if let Type::Tensor(t) = module.value_type(r)
            && t.num_elements() > MAX_ELEMENTS
        {
            return Err(ImportError::invalid(format!(
                "the result {t} has more than the supported {MAX_ELEMENTS} elements"
            )));
        }
    }
    Ok(())
}

pub fn i64s(t: &Tensor) -> Vec<i64> {
    t.to_i64().iter().copied().collect()
}

/// A one-element tensor's value as an integer, or an error naming `what`.
pub fn scalar_i64(t: &Tensor, what: &str) -> Result<i64> {
    match i64s(t)[..] {
        [v] => Ok(v),
        _ => Err(ImportError::invalid(format!(
            "{what} must hold one value, not {}",
            t.len()
        ))),
    }
}

pub fn scalar_f64(t: &Tensor) -> Option<f64> {
    t.to_f64().iter().next().copied()
}
