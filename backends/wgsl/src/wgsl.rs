//! `kernel.func` to WGSL. One kernel is one shader module with one entry
//! point, `main`; argument `i` is binding `i` of group 0, workgroup
//! arrays are module-scope
//! `var<workgroup>`s. Index values are `i32`; kernel.lower guarantees that
//! floordiv and mod see non-negative left sides, so `/` and `%` are exact.

use std::collections::{HashMap, HashSet};
use std::fmt::Write;

use ircc_core::{AffineExpr, Attribute, ElemType, Module, OpId, Type, ValueId};
use ircc_dialects::kernel::ops::{self, BinaryFn, CmpPred, IdKind, UnaryFn};
use ircc_dialects::kernel::{KernelOp, KernelOp as K, Target, texture_args};

type R<T> = Result<T, String>;

fn scalar(t: &Type) -> R<&'static str> {
    Ok(match t {
        Type::Scalar(ElemType::F32) => "f32",
        Type::Scalar(ElemType::F16) => "f16",
        Type::Scalar(ElemType::I32) | Type::Index => "i32",
        Type::Scalar(ElemType::I1) => "bool",
        other => return Err(format!("no WGSL type for {other}")),
    })
}

fn elem_name(e: ElemType) -> R<&'static str> {
    scalar(&Type::Scalar(e))
}

/// A float value of type `ty`. WGSL has no non-finite constants, so
/// infinities and NaN come from the bits in [`NON_FINITE`] at run time.
fn float_literal(x: f64, ty: &str) -> String {
    let runtime = |bits: &str| {
        if ty == "f32" {
            format!("bitcast<f32>({bits})")
        } else {
            format!("{ty}(bitcast<f32>({bits}))")
        }
    };
    if x.is_nan() {
        return runtime("ircc_nan_bits");
    }
    if x.is_infinite() {
        let inf = runtime("ircc_inf_bits");
        return if x > 0.0 { inf } else { format!("(-{inf})") };
    }
    let (max, suffix) = if ty == "f16" {
        (65504.0, "h")
    } else {
        (f32::MAX as f64, "f")
    };
    // Finite values beyond the type's range round to its largest value.
    let x = x.clamp(-max, max);
    if ty == "f16" {
        format!("{:?}{suffix}", half::f16::from_f64(x).to_f32())
    } else {
        format!("{:?}{suffix}", x as f32)
    }
}

/// Helper code a kernel may need, each emitted once before `main`.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Helper {
    Erf,
    NonFinite,
    IntPow,
}

impl Helper {
    fn text(self) -> &'static str {
        match self {
            Helper::Erf => ERF,
            Helper::NonFinite => NON_FINITE,
            Helper::IntPow => INT_POW,
        }
    }
}

const ERF: &str = "
// erf by Abramowitz and Stegun 7.1.26 (|error| < 1.5e-7).
fn ircc_erf(x: f32) -> f32 {
    let a = abs(x);
    let t = 1.0 / (1.0 + 0.3275911 * a);
    let p = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))));
    return sign(x) * (1.0 - p * exp(-a * a));
}
";

const NON_FINITE: &str = "
// Bits of +inf and NaN, read at run time: a non-finite constant is an error.
var<private> ircc_inf_bits: u32 = 0x7f800000u;
var<private> ircc_nan_bits: u32 = 0x7fc00000u;
";

const INT_POW: &str = "
// x^n for integers by squaring (WGSL's pow is for floats); a negative n
// truncates toward zero as the real power would.
fn ircc_ipow(x: i32, n: i32) -> i32 {
    if (n < 0) {
        if (x == 1) { return 1; }
        if (x == -1) { return select(-1, 1, (n & 1) == 0); }
        return 0;
    }
    var r = 1;
    var b = x;
    var e = n;
    for (var i = 0; i < 31 && e > 0; i = i + 1) {
        if ((e & 1) == 1) { r = r * b; }
        b = b * b;
        e = e >> 1u;
    }
    return r;
}
";

struct Printer<'m> {
    m: &'m Module,
    names: HashMap<ValueId, String>,
    next: usize,
    out: String,
    helpers: std::collections::BTreeSet<Helper>,
    /// Workgroup arrays declared as vec4 arrays (read by load4).
    vec4_allocs: HashSet<ValueId>,
}

impl Printer<'_> {
    fn name(&self, v: ValueId) -> R<&str> {
        self.names
            .get(&v)
            .map(String::as_str)
            .ok_or_else(|| "a value used before it is defined".to_string())
    }

    fn fresh(&mut self, prefix: &str, v: ValueId) -> String {
        let n = format!("{prefix}{}", self.next);
        self.next += 1;
        self.names.insert(v, n.clone());
        n
    }

    fn expr(&self, e: &AffineExpr, operands: &[ValueId]) -> R<String> {
        use AffineExpr as E;
        let bin = |a: &E, op: &str, b: &E| -> R<String> {
            Ok(format!(
                "({} {op} {})",
                self.expr(a, operands)?,
                self.expr(b, operands)?
            ))
        };
        match e {
            E::Dim(i) => Ok(self.name(operands[*i as usize])?.to_string()),
            E::Sym(_) => Err("symbols cannot appear in kernel maps".to_string()),
            E::Const(c) if *c < 0 => Ok(format!("({c}i)")),
            E::Const(c) => Ok(format!("{c}i")),
            E::Add(a, b) => bin(a, "+", b),
            E::Mul(a, b) => bin(a, "*", b),
            E::FloorDiv(a, b) => bin(a, "/", b),
            E::Mod(a, b) => bin(a, "%", b),
            E::CeilDiv(a, b) => {
                let (x, y) = (self.expr(a, operands)?, self.expr(b, operands)?);
                Ok(format!("(({x} + {y} - 1i) / {y})"))
            }
        }
    }

    /// Element `offset` of `memory`: workgroup arrays that `load4` reads
    /// are arrays of vec4, indexed by vector and lane.
    fn element(&self, memory: ValueId, offset: &str) -> R<String> {
        let m = self.name(memory)?;
        Ok(if self.vec4_allocs.contains(&memory) {
            format!("{m}[({offset}) / 4][({offset}) % 4]")
        } else {
            format!("{m}[{offset}]")
        })
    }

    fn map_expr(&self, op: OpId, first: usize) -> R<String> {
        Ok(self.map_exprs(op, first)?.swap_remove(0))
    }

    /// Every result of the op's map over its operands from `first`.
    fn map_exprs(&self, op: OpId, first: usize) -> R<Vec<String>> {
        let o = self.m.op(op);
        let map = match o.attr("map") {
            Some(Attribute::AffineMap(map)) if map.num_results() > 0 => map,
            _ => return Err(format!("'{}' lacks its map", o.name)),
        };
        map.results
            .iter()
            .map(|e| self.expr(e, &o.operands[first..]))
            .collect()
    }

    fn block(&mut self, block: ircc_core::BlockId, indent: usize) -> R<()> {
        for &op in &self.m.blocks[block].ops.clone() {
            self.op(op, indent)?;
        }
        Ok(())
    }

    fn line(&mut self, indent: usize, text: &str) {
        let _ = writeln!(self.out, "{:w$}{text}", "", w = indent * 4);
    }

    fn op(&mut self, op: OpId, indent: usize) -> R<()> {
        let m = self.m;
        let o = m.op(op);
        let result = o.results.first().copied();
        let ty = match result {
            Some(r) => scalar(m.value_type(r)).unwrap_or("i32"),
            None => "",
        };
        let arg = |i: usize| self.name(o.operands[i]).map(str::to_string);
        let malformed = || format!("malformed '{}'", o.name);
        let kind =
            KernelOp::of(m, op).ok_or_else(|| format!("'{}' cannot appear in a kernel", o.name))?;
        let value = match kind {
            K::Id => {
                let id = ops::Id::new(m, op).ok_or_else(malformed)?;
                let var = match id.kind() {
                    IdKind::Global => "gid",
                    IdKind::Local => "lid",
                    IdKind::Workgroup => "wid",
                };
                let axis = ["x", "y", "z"]
                    .get(id.axis() as usize)
                    .ok_or_else(malformed)?;
                format!("i32({var}.{axis})")
            }
            K::Constant => match o.attr("value") {
                Some(Attribute::Float(x, _)) => {
                    if !x.is_finite() {
                        self.helpers.insert(Helper::NonFinite);
                    }
                    float_literal(*x, ty)
                }
                Some(Attribute::Int(x, _)) => format!("{x}i"),
                Some(Attribute::Bool(b)) => b.to_string(),
                _ => return Err("a kernel.constant lacks its value".to_string()),
            },
            K::Apply => self.map_expr(op, 0)?,
            K::Load => self.element(o.operands[0], &self.map_expr(op, 1)?)?,
            K::Store => {
                let target = self.element(o.operands[1], &self.map_expr(op, 2)?)?;
                let line = format!("{target} = {};", arg(0)?);
                self.line(indent, &line);
                return Ok(());
            }
            K::Load4 => {
                let offset = self.map_expr(op, 1)?;
                let memory = arg(0)?;
                let name = format!("v{}", self.next);
                self.next += 1;
                let line = format!("let {name}: vec4<{ty}> = {memory}[({offset}) / 4];");
                self.line(indent, &line);
                for (&r, lane) in o.results.iter().zip(["x", "y", "z", "w"]) {
                    self.names.insert(r, format!("{name}.{lane}"));
                }
                return Ok(());
            }
            K::TextureLoad => {
                let [x, y, lane] = <[String; 3]>::try_from(self.map_exprs(op, 1)?)
                    .map_err(|_| "a texture load maps to (x, y, lane)")?;
                let texel = format!("textureLoad({}, vec2<i32>({x}, {y}), 0)[{lane}]", arg(0)?);
                if ty == "f32" {
                    texel
                } else {
                    format!("{ty}({texel})")
                }
            }
            K::TextureStore => {
                let [x, y] = <[String; 2]>::try_from(self.map_exprs(op, 5)?)
                    .map_err(|_| "a texture store maps to (x, y)")?;
                let lanes = (0..4).map(arg).collect::<R<Vec<_>>>()?.join(", ");
                let texel = match scalar(self.m.value_type(o.operands[0]))? {
                    "f32" => format!("vec4<f32>({lanes})"),
                    lane => format!("vec4<f32>(vec4<{lane}>({lanes}))"),
                };
                let line = format!("textureStore({}, vec2<i32>({x}, {y}), {texel});", arg(4)?);
                self.line(indent, &line);
                return Ok(());
            }
            K::Unary => {
                let x = arg(0)?;
                match ops::Unary::new(m, op).ok_or_else(malformed)?.fn_() {
                    UnaryFn::Neg => format!("-{x}"),
                    UnaryFn::Not => format!("!{x}"),
                    UnaryFn::Rsqrt => format!("inverseSqrt({x})"),
                    UnaryFn::Tanh => {
                        let c = Target::webgpu().tanh_input_clamp;
                        format!(
                            "tanh(clamp({x}, {}, {}))",
                            float_literal(-c, ty),
                            float_literal(c, ty)
                        )
                    }
                    UnaryFn::Erf => {
                        self.helpers.insert(Helper::Erf);
                        if ty == "f32" {
                            format!("ircc_erf({x})")
                        } else {
                            format!("{ty}(ircc_erf(f32({x})))")
                        }
                    }
                    f @ (UnaryFn::Abs
                    | UnaryFn::Exp
                    | UnaryFn::Log
                    | UnaryFn::Sqrt
                    | UnaryFn::Floor
                    | UnaryFn::Ceil
                    | UnaryFn::Round) => format!("{}({x})", f.name()),
                }
            }
            K::Binary => {
                let (a, b) = (arg(0)?, arg(1)?);
                match ops::Binary::new(m, op).ok_or_else(malformed)?.fn_() {
                    BinaryFn::Add => format!("{a} + {b}"),
                    BinaryFn::Sub => format!("{a} - {b}"),
                    BinaryFn::Mul => format!("{a} * {b}"),
                    BinaryFn::Div => format!("{a} / {b}"),
                    BinaryFn::And => format!("{a} && {b}"),
                    BinaryFn::Or => format!("{a} || {b}"),
                    BinaryFn::Pow if ty == "i32" => {
                        self.helpers.insert(Helper::IntPow);
                        format!("ircc_ipow({a}, i32({b}))")
                    }
                    f @ (BinaryFn::Max | BinaryFn::Min | BinaryFn::Pow) => {
                        format!("{}({a}, {b})", f.name())
                    }
                }
            }
            K::Cmp => {
                let p = match ops::Cmp::new(m, op).ok_or_else(malformed)?.pred() {
                    CmpPred::Lt => "<",
                    CmpPred::Le => "<=",
                    CmpPred::Gt => ">",
                    CmpPred::Ge => ">=",
                    CmpPred::Eq => "==",
                    CmpPred::Ne => "!=",
                };
                format!("{} {p} {}", arg(0)?, arg(1)?)
            }
            K::Select => format!("select({}, {}, {})", arg(2)?, arg(1)?, arg(0)?),
            K::Cast => format!("{ty}({})", arg(0)?),
            K::For => return self.for_loop(op, indent),
            K::If => {
                let cond = arg(0)?;
                self.line(indent, &format!("if ({cond}) {{"));
                let body = m.entry_block(op).ok_or("a kernel.if without a body")?;
                self.block(body, indent + 1)?;
                self.line(indent, "}");
                return Ok(());
            }
            K::Barrier => {
                self.line(indent, "workgroupBarrier();");
                return Ok(());
            }
            K::Alloc | K::Return | K::Yield => return Ok(()),
            K::Func | K::Launch => return Err(format!("'{kind}' cannot appear in a kernel")),
        };
        let r = result.ok_or("an expression op without a result")?;
        let name = self.fresh("v", r);
        self.line(indent, &format!("let {name}: {ty} = {value};"));
        Ok(())
    }

    fn for_loop(&mut self, op: OpId, indent: usize) -> R<()> {
        let m = self.m;
        let o = m.op(op);
        let body = m.entry_block(op).ok_or("a kernel.for without a body")?;
        let args = m.blocks[body].args.clone();
        let mut carried = Vec::new();
        for (i, &init) in o.operands.iter().enumerate() {
            let var = format!("c{}", self.next);
            self.next += 1;
            let ty = scalar(m.value_type(init))?;
            let line = format!("var {var}: {ty} = {};", self.name(init)?);
            self.line(indent, &line);
            self.names.insert(o.results[i], var.clone());
            carried.push(var);
        }
        // Not `i`: the 32nd name would be `i32`, a type.
        let iv = self.fresh("k", args[0]);
        let for_op = ops::For::new(m, op).ok_or("malformed kernel.for")?;
        let (lo, hi, step) = (for_op.lower(), for_op.upper(), for_op.step());
        self.line(
            indent,
            &format!("for (var {iv}: i32 = {lo}i; {iv} < {hi}i; {iv} = {iv} + {step}i) {{"),
        );
        // Snapshots, so the yields below assign all carried values at once.
        for (k, &a) in args[1..].iter().enumerate() {
            let ty = scalar(m.value_type(a))?;
            let snap = self.fresh("p", a);
            self.line(indent + 1, &format!("let {snap}: {ty} = {};", carried[k]));
        }
        self.block(body, indent + 1)?;
        let last = *m.blocks[body].ops.last().ok_or("an empty loop body")?;
        for (k, &y) in m.op(last).operands.iter().enumerate() {
            let line = format!("{} = {};", carried[k], self.name(y)?);
            self.line(indent + 1, &line);
        }
        self.line(indent, "}");
        Ok(())
    }
}

/// The WGSL of kernel.func `func`; `read_only[i]` declares argument `i`
/// read-only (missing entries are read_write).
pub fn kernel_to_wgsl(m: &Module, func: OpId, read_only: &[bool]) -> R<String> {
    let kernel = ops::Func::new(m, func).ok_or("not a kernel.func")?;
    let block = m.entry_block(func).ok_or("a kernel without a body")?;
    let args = m.blocks[block].args.clone();
    let wg = kernel.workgroup_size();
    let mut names = HashMap::new();
    let mut header = String::new();
    let mut uses_f16 = false;
    let textures = texture_args(m, func)?;
    let outputs = kernel.outputs() as usize;
    for (i, &a) in args.iter().enumerate() {
        let t = m
            .value_type(a)
            .as_tensor()
            .ok_or("kernel arguments are tensors")?;
        uses_f16 |= t.elem == ElemType::F16;
        if textures.iter().any(|t| t.arg == i) {
            // Texels are four f32 lanes to the shader whatever the
            // format; rgba16float stores them as f16.
            let decl = if i + outputs >= args.len() {
                let format = if t.elem == ElemType::F16 {
                    "rgba16float"
                } else {
                    "rgba32float"
                };
                format!("texture_storage_2d<{format}, write>")
            } else {
                "texture_2d<f32>".to_string()
            };
            let _ = writeln!(header, "@group(0) @binding({i}) var a{i}: {decl};");
            names.insert(a, format!("a{i}"));
            continue;
        }
        let access = if read_only.get(i).copied().unwrap_or(false) {
            "read"
        } else {
            "read_write"
        };
        let _ = writeln!(
            header,
            "@group(0) @binding({i}) var<storage, {access}> a{i}: array<{}>;",
            elem_name(t.elem)?
        );
        names.insert(a, format!("a{i}"));
    }
    let mut vec4_allocs = HashSet::new();
    m.walk_block(block, &mut |op| {
        if KernelOp::of(m, op) == Some(K::Load4) {
            vec4_allocs.insert(m.op(op).operands[0]);
        }
    });
    let mut allocs = 0;
    let mut f16_inside = false;
    m.walk_block(block, &mut |op| {
        let o = m.op(op);
        for &r in &o.results {
            f16_inside |= *m.value_type(r) == Type::Scalar(ElemType::F16);
        }
        if KernelOp::of(m, op) == Some(K::Alloc)
            && let Some(t) = m.value_type(o.results[0]).as_tensor()
        {
            let elem = elem_name(t.elem).unwrap_or("f32");
            let n = t.num_elements();
            let _ = if vec4_allocs.contains(&o.results[0]) {
                writeln!(
                    header,
                    "var<workgroup> w{allocs}: array<vec4<{elem}>, {}>;",
                    n / 4
                )
            } else {
                writeln!(header, "var<workgroup> w{allocs}: array<{elem}, {n}>;")
            };
            names.insert(o.results[0], format!("w{allocs}"));
            allocs += 1;
        }
    });
    let mut p = Printer {
        m,
        names,
        next: 0,
        out: String::new(),
        helpers: Default::default(),
        vec4_allocs,
    };
    p.block(block, 1)?;
    let mut s = String::new();
    if uses_f16 || f16_inside {
        s.push_str("enable f16;\n\n");
    }
    let name = kernel.sym_name();
    let _ = writeln!(s, "// kernel {name}\n{header}");
    for h in &p.helpers {
        s.push_str(h.text());
        s.push('\n');
    }
    let _ = writeln!(
        s,
        "@compute @workgroup_size({}, {}, {})\nfn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {{",
        wg[0], wg[1], wg[2]
    );
    s.push_str(&p.out);
    s.push_str("}\n");
    Ok(s)
}

/// The kernel.funcs of a module in order, with their names.
pub fn kernels(m: &Module) -> Vec<(String, OpId)> {
    m.blocks[m.body]
        .ops
        .iter()
        .filter_map(|&op| ops::Func::new(m, op).map(|k| (k.sym_name().to_string(), op)))
        .collect()
}
