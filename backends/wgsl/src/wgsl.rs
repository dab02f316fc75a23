//! `kernel.func` to WGSL. One kernel is one shader module with one entry
//! point, `main`; argument `i` is binding `i` of group 0, workgroup
//! arrays are module-scope
//! `var<workgroup>`s. Index values are `i32`; kernel.lower guarantees that
//! floordiv and mod see non-negative left sides, so `/` and `%` are exact.

use std::collections::{BTreeSet, HashMap};
use std::fmt::Write;

use ircc_codegen::{
    Language, Memory, Offset, Options, R, Space, vector_arguments, workgroup_arrays,
};
use ircc_core::{ElemType, Module, OpId, Type};
use ircc_dialects::kernel::ops::{self, BinaryFn, IdKind, UnaryFn};
use ircc_dialects::kernel::{MatrixRole, MatrixType, Target, texture_args};

fn scalar(t: &Type) -> R<&'static str> {
    Ok(match t {
        Type::Scalar(ElemType::F32) => "f32",
        Type::Scalar(ElemType::F16) => "f16",
        // Bytes are read out of words into i32 (`load`).
        Type::Scalar(ElemType::I32 | ElemType::I8 | ElemType::U8) | Type::Index => "i32",
        Type::Scalar(ElemType::I1) => "bool",
        other => return Err(format!("no WGSL type for {other}")),
    })
}

/// The element type of a storage buffer: WGSL has no bytes, so a buffer
/// of them is an array of words.
fn elem_name(e: ElemType) -> R<&'static str> {
    match e {
        ElemType::I8 | ElemType::U8 => Ok("u32"),
        e => scalar(&Type::Scalar(e)),
    }
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
        // The shortest decimal that rounds to the f32 may lie past f32's
        // largest value (3.4028235e38), which Tint, the browsers' WGSL
        // compiler, refuses as not representable: there, the f32's exact
        // value.
        let x = x as f32;
        let shortest = format!("{x:?}");
        if shortest
            .parse::<f64>()
            .is_ok_and(|d| d.abs() > f32::MAX as f64)
        {
            format!("{:?}{suffix}", x as f64)
        } else {
            format!("{shortest}{suffix}")
        }
    }
}

/// Helper code a kernel may need, each emitted once before `main`.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Helper {
    Erf,
    NonFinite,
    IntPow,
    Pow,
}

impl Helper {
    fn text(self) -> &'static str {
        match self {
            Helper::Erf => ERF,
            Helper::NonFinite => NON_FINITE,
            Helper::IntPow => INT_POW,
            Helper::Pow => POW,
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

const POW: &str = "
// C's pow, which ONNX's Pow is: WGSL's is exp2(b * log2(a)), undefined
// for a <= 0 and NaN where C's gives 1, 0 or inf.
fn ircc_pow(a: f32, b: f32) -> f32 {
    if (b == 0.0 || a == 1.0) { return 1.0; }
    if (!(a == a) || !(b == b)) { return a + b; }
    let inf = bitcast<f32>(ircc_inf_bits);
    let m = abs(a);
    if (abs(b) == inf) {
        if (m == 1.0) { return 1.0; }
        return select(0.0, inf, (m > 1.0) == (b > 0.0));
    }
    let integer = floor(b) == b;
    if (a < 0.0 && m != inf && !integer) { return bitcast<f32>(ircc_nan_bits); }
    var r = pow(m, b);
    if (m == 0.0 || m == inf) { r = select(0.0, inf, (m == 0.0) == (b < 0.0)); }
    // An odd integer b keeps a's sign (that of -0 too).
    let odd = integer && abs(b) < 16777216.0 && fract(b * 0.5) != 0.0;
    let negative = (bitcast<u32>(a) >> 31u) == 1u;
    return select(r, -r, negative && odd);
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

/// Whether `memory` is declared an array of vec4.
fn vectors(memory: &Memory) -> bool {
    matches!(
        memory.space,
        Space::Workgroup { vec4: true } | Space::Buffer { vec4: true }
    )
}

/// The vector of memory of vectors whose first element `offset` is.
fn vector_at(memory: &Memory, offset: Offset) -> String {
    let m = &memory.name;
    match offset.vectors {
        Some((q, 0)) => format!("{m}[{q}]"),
        _ => format!("{m}[({}) / 4]", offset.words),
    }
}

/// Where a matrix op addresses `memory` at `offset`, and its stride, in
/// the units of the memory's array.
fn matrix_at(memory: &Memory, offset: Offset, stride: i64) -> (String, i64) {
    if vectors(memory) {
        (vector_at(memory, offset), stride / 4)
    } else {
        (format!("{}[{}]", memory.name, offset.words), stride)
    }
}

/// WGSL's spelling of kernel code, and the helpers a kernel used.
#[derive(Default)]
struct Wgsl {
    helpers: BTreeSet<Helper>,
    /// Whether a cooperative matrix type was printed.
    matrices: bool,
}

impl Language for Wgsl {
    fn type_name(&self, t: &Type) -> R<&'static str> {
        scalar(t)
    }

    fn int(&self, c: i64) -> String {
        // WGSL negates a literal after reading it, and 2147483648i is
        // not an i32.
        if c == i64::from(i32::MIN) {
            return "(-2147483647i - 1i)".to_string();
        }
        format!("{c}i")
    }

    fn float(&mut self, x: f64, ty: &str) -> String {
        if !x.is_finite() {
            self.helpers.insert(Helper::NonFinite);
        }
        float_literal(x, ty)
    }

    fn declare(&self, name: &str, ty: &str, value: &str) -> String {
        format!("let {name}: {ty} = {value};")
    }

    fn var(&self, name: &str, ty: &str, value: &str) -> String {
        format!("var {name}: {ty} = {value};")
    }

    fn id(&self, kind: IdKind, axis: usize) -> String {
        let var = match kind {
            IdKind::Global => "gid",
            IdKind::Local => "lid",
            IdKind::Workgroup => "wid",
        };
        format!("i32({var}.{})", ["x", "y", "z"][axis])
    }

    /// Memory that `load4` reads is an array of vec4, indexed by vector
    /// and lane. Reads outside a buffer are left to Vulkan's robust buffer
    /// access, which wgpu turns on.
    fn load(&mut self, memory: &Memory, offset: Offset, _in_bounds: bool) -> String {
        let m = &memory.name;
        let (vector, lane) = match offset.vectors {
            Some((q, r)) => (q.to_string(), r.to_string()),
            None => (
                format!("({}) / 4", offset.words),
                format!("({}) % 4", offset.words),
            ),
        };
        let shift = || match offset.vectors {
            Some((_, r)) => format!("{}u", 8 * r),
            None => format!("u32(8 * (({}) % 4))", offset.words),
        };
        let word = format!("{m}[{vector}]");
        let buffer = matches!(memory.space, Space::Buffer { .. });
        match memory.elem {
            _ if vectors(memory) => format!("{m}[{vector}][{lane}]"),
            // Byte k of a little-endian word, moved to the top and back
            // down with the sign, or masked.
            ElemType::I8 if buffer => {
                format!("(bitcast<i32>({word} << (24u - {})) >> 24u)", shift())
            }
            ElemType::U8 if buffer => {
                format!("i32(({word} >> {}) & 255u)", shift())
            }
            _ => format!("{m}[{}]", offset.words),
        }
    }

    fn store(&mut self, memory: &Memory, offset: Offset, value: &str) -> String {
        format!("{} = {value};", self.load(memory, offset, true))
    }

    fn store4(
        &mut self,
        memory: &Memory,
        offset: Offset,
        lanes: &[String],
        ty: &str,
    ) -> Vec<String> {
        if vectors(memory) {
            let lanes = lanes.join(", ");
            return vec![format!(
                "{} = vec4<{ty}>({lanes});",
                vector_at(memory, offset)
            )];
        }
        let m = &memory.name;
        lanes
            .iter()
            .enumerate()
            .map(|(k, x)| match k {
                0 => format!("{m}[{}] = {x};", offset.words),
                k => format!("{m}[{} + {k}] = {x};", offset.words),
            })
            .collect()
    }

    fn load4(&mut self, memory: &Memory, offset: Offset) -> String {
        let m = &memory.name;
        if vectors(memory) {
            return vector_at(memory, offset);
        }
        let at = |k: i64| match k {
            0 => format!("{m}[{}]", offset.words),
            k => format!("{m}[{} + {k}]", offset.words),
        };
        format!("vec4({}, {}, {}, {})", at(0), at(1), at(2), at(3))
    }

    fn vec4_type(&self, ty: &str) -> String {
        format!("vec4<{ty}>")
    }

    fn splat(&self, x: &str, ty: &str) -> String {
        format!("vec4<{ty}>({x})")
    }

    fn texture_lane(&mut self, memory: &Memory, x: &str, y: &str, lane: &str, ty: &str) -> String {
        let texel = format!(
            "textureLoad({}, vec2<i32>({x}, {y}), 0)[{lane}]",
            memory.name
        );
        if ty == "f32" {
            texel
        } else {
            format!("{ty}({texel})")
        }
    }

    fn texture_store(
        &mut self,
        memory: &Memory,
        x: &str,
        y: &str,
        lanes: &[String],
        ty: &str,
    ) -> String {
        let lanes = lanes.join(", ");
        // Texels are four f32 lanes to the shader whatever the format.
        let texel = match ty {
            "f32" => format!("vec4<f32>({lanes})"),
            lane => format!("vec4<f32>(vec4<{lane}>({lanes}))"),
        };
        format!(
            "textureStore({}, vec2<i32>({x}, {y}), {texel});",
            memory.name
        )
    }

    fn unary(&mut self, f: UnaryFn, x: &str, ty: &str) -> String {
        match f {
            UnaryFn::Neg => format!("-{x}"),
            UnaryFn::Not if ty == "bool" => format!("!{x}"),
            UnaryFn::Not => format!("~{x}"),
            UnaryFn::Rsqrt => format!("inverseSqrt({x})"),
            // Past the bound tanh is ±1 to f32's precision (and where
            // drivers compute it from e^2x, NaN); a NaN stays one.
            UnaryFn::Tanh => {
                let c = Target::webgpu().tanh_input_clamp;
                let c = float_literal(c, ty);
                format!("select(tanh({x}), sign({x}), abs({x}) > {c})")
            }
            // Drivers' sign, atan and atan2 (lavapipe's) may make a NaN
            // a number; ONNX keeps it.
            UnaryFn::Sign if ty == "f32" || ty == "f16" => {
                format!("select({x}, sign({x}), {})", self.is_number(x, ty))
            }
            UnaryFn::Atan => format!("select({x}, atan({x}), {})", self.is_number(x, ty)),
            // Through atan2, which drivers compute more precisely than
            // asin and acos (lavapipe's are off by 4e-4); NaN outside
            // [-1, 1], and for a NaN.
            UnaryFn::Asin | UnaryFn::Acos => {
                let root = format!("sqrt((1.0 - {x}) * (1.0 + {x}))");
                let angle = if f == UnaryFn::Asin {
                    format!("atan2({x}, {root})")
                } else {
                    format!("atan2({root}, {x})")
                };
                let nan = self.float(f64::NAN, ty);
                format!("select({angle}, {nan}, !(abs({x}) <= 1.0))")
            }
            UnaryFn::Erf => {
                self.helpers.insert(Helper::Erf);
                if ty == "f32" {
                    format!("ircc_erf({x})")
                } else {
                    format!("{ty}(ircc_erf(f32({x})))")
                }
            }
            UnaryFn::Abs
            | UnaryFn::Exp
            | UnaryFn::Log
            | UnaryFn::Sqrt
            | UnaryFn::Floor
            | UnaryFn::Ceil
            | UnaryFn::Round
            | UnaryFn::Sin
            | UnaryFn::Cos
            | UnaryFn::Tan
            | UnaryFn::Sinh
            | UnaryFn::Cosh
            | UnaryFn::Asinh
            | UnaryFn::Acosh
            | UnaryFn::Atanh
            | UnaryFn::Sign => format!("{}({x})", f.name()),
        }
    }

    fn binary(&mut self, f: BinaryFn, a: &str, b: &str, ty: &str) -> String {
        match f {
            BinaryFn::Add => format!("{a} + {b}"),
            BinaryFn::Sub => format!("{a} - {b}"),
            BinaryFn::Mul => format!("{a} * {b}"),
            BinaryFn::Div => format!("{a} / {b}"),
            BinaryFn::And if ty == "bool" => format!("{a} && {b}"),
            BinaryFn::Or if ty == "bool" => format!("{a} || {b}"),
            BinaryFn::Xor if ty == "bool" => format!("{a} != {b}"),
            BinaryFn::And => format!("{a} & {b}"),
            BinaryFn::Or => format!("{a} | {b}"),
            BinaryFn::Xor => format!("{a} ^ {b}"),
            // WGSL shifts by a u32 count, taken modulo the width.
            BinaryFn::Shl => format!("{a} << u32({b})"),
            BinaryFn::Shr => format!("{a} >> u32({b})"),
            BinaryFn::Pow if ty == "i32" => {
                self.helpers.insert(Helper::IntPow);
                format!("ircc_ipow({a}, i32({b}))")
            }
            BinaryFn::Pow => {
                self.helpers.insert(Helper::Pow);
                self.helpers.insert(Helper::NonFinite);
                if ty == "f32" {
                    format!("ircc_pow({a}, {b})")
                } else {
                    format!("{ty}(ircc_pow(f32({a}), f32({b})))")
                }
            }
            BinaryFn::Max | BinaryFn::Min => format!("{}({a}, {b})", f.name()),
        }
    }

    /// By the bits: NVIDIA's compiler folds `x == x` in a select into a
    /// max that drops the NaN. An f16 widens to f32, which keeps a NaN.
    fn is_number(&mut self, x: &str, ty: &str) -> String {
        let x = if ty == "f32" {
            x.to_string()
        } else {
            format!("f32({x})")
        };
        format!("(bitcast<u32>({x}) & 0x7fffffffu) <= 0x7f800000u")
    }

    fn select(&self, cond: &str, a: &str, b: &str) -> String {
        format!("select({b}, {a}, {cond})")
    }

    fn cast(&self, x: &str, _from: &str, to: &str) -> String {
        format!("{to}({x})")
    }

    fn for_head(&self, iv: &str, lower: i64, upper: i64, step: i64) -> String {
        format!("for (var {iv}: i32 = {lower}i; {iv} < {upper}i; {iv} = {iv} + {step}i) {{")
    }

    fn barrier(&self) -> &'static str {
        "workgroupBarrier();"
    }

    /// naga's `wgpu_cooperative_matrix` extension: square matrices of 8
    /// or 16, roles in capitals.
    fn matrix_type(&mut self, t: &MatrixType) -> R<String> {
        if t.rows != t.cols || !matches!(t.rows, 8 | 16) {
            return Err(format!(
                "WGSL's cooperative matrices are 8x8 or 16x16, not {}x{}",
                t.rows, t.cols
            ));
        }
        self.matrices = true;
        let role = match t.role {
            MatrixRole::A => "A",
            MatrixRole::B => "B",
            MatrixRole::C => "C",
        };
        Ok(format!(
            "coop_mat{0}x{0}<{1}, {role}>",
            t.rows,
            scalar(&Type::Scalar(t.elem))?
        ))
    }

    fn matrix_zero(&self, ty: &str) -> String {
        format!("{ty}()")
    }

    /// In memory of vectors, through a pointer to the first element's
    /// vector, the stride counted in vectors (SPIR-V's cooperative loads
    /// count both in the pointer's type).
    fn matrix_load(&self, memory: &Memory, offset: Offset, stride: i64, ty: &str) -> String {
        let (at, stride) = matrix_at(memory, offset, stride);
        format!("coopLoadT<{ty}>(&{at}, {stride}u)")
    }

    fn matrix_store(&self, memory: &Memory, offset: Offset, stride: i64, value: &str) -> String {
        let (at, stride) = matrix_at(memory, offset, stride);
        format!("coopStoreT({value}, &{at}, {stride}u);")
    }

    fn matrix_multiply_add(&self, a: &str, b: &str, c: &str) -> String {
        format!("coopMultiplyAdd({a}, {b}, {c})")
    }
}

/// The WGSL of kernel.func `func`; `read_only[i]` declares argument `i`
/// read-only (missing entries are read_write); `options` are the device's.
pub fn kernel_to_wgsl(m: &Module, func: OpId, read_only: &[bool], options: Options) -> R<String> {
    let kernel = ops::Func::new(m, func).ok_or("not a kernel.func")?;
    let block = m.entry_block(func).ok_or("a kernel without a body")?;
    let args = m.blocks[block].args.clone();
    let wg = kernel.workgroup_size();
    let mut memories = HashMap::new();
    let mut header = String::new();
    let mut uses_f16 = false;
    let textures = texture_args(m, func)?;
    let outputs = kernel.outputs() as usize;
    let vector_args = vector_arguments(m, block);
    for (i, &a) in args.iter().enumerate() {
        let vec4 = vector_args.contains(&a);
        let t = m
            .value_type(a)
            .as_tensor()
            .ok_or("kernel arguments are tensors")?;
        uses_f16 |= t.elem == ElemType::F16;
        let is_texture = textures.iter().any(|t| t.arg == i);
        if is_texture {
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
        } else {
            let access = if read_only.get(i).copied().unwrap_or(false) {
                "read"
            } else {
                "read_write"
            };
            let elem = elem_name(t.elem)?;
            let _ = if vec4 {
                writeln!(
                    header,
                    "@group(0) @binding({i}) var<storage, {access}> a{i}: array<vec4<{elem}>>;"
                )
            } else {
                writeln!(
                    header,
                    "@group(0) @binding({i}) var<storage, {access}> a{i}: array<{elem}>;"
                )
            };
        }
        let space = if is_texture {
            Space::Texture
        } else {
            Space::Buffer { vec4 }
        };
        memories.insert(
            a,
            Memory {
                name: format!("a{i}"),
                elem: t.elem,
                space,
                len: t.num_elements(),
            },
        );
    }
    for (k, (alloc, vec4)) in workgroup_arrays(m, block).into_iter().enumerate() {
        let Some(t) = m.value_type(alloc).as_tensor() else {
            continue;
        };
        let elem = elem_name(t.elem).unwrap_or("f32");
        let n = t.num_elements();
        let _ = if vec4 {
            writeln!(
                header,
                "var<workgroup> w{k}: array<vec4<{elem}>, {}>;",
                n / 4
            )
        } else {
            writeln!(header, "var<workgroup> w{k}: array<{elem}, {n}>;")
        };
        let space = Space::Workgroup { vec4 };
        memories.insert(
            alloc,
            Memory {
                name: format!("w{k}"),
                elem: t.elem,
                space,
                len: t.num_elements(),
            },
        );
    }
    let mut f16_inside = false;
    m.walk_block(block, &mut |op| {
        for &r in &m.op(op).results {
            let t = m.value_type(r);
            f16_inside |= *t == Type::Scalar(ElemType::F16)
                || t.as_tensor().is_some_and(|t| t.elem == ElemType::F16)
                || MatrixType::of(t).is_ok_and(|t| t.elem == ElemType::F16);
        }
    });
    let mut wgsl = Wgsl::default();
    let body = ircc_codegen::body(m, func, memories, options, &mut wgsl)?;
    let mut s = String::new();
    if uses_f16 || f16_inside {
        s.push_str("enable f16;\n");
    }
    if wgsl.matrices {
        s.push_str("enable wgpu_cooperative_matrix;\n");
    }
    if uses_f16 || f16_inside || wgsl.matrices {
        s.push('\n');
    }
    let name = kernel.sym_name();
    let _ = writeln!(s, "// kernel {name}\n{header}");
    for h in &wgsl.helpers {
        s.push_str(h.text());
        s.push('\n');
    }
    let _ = writeln!(
        s,
        "@compute @workgroup_size({}, {}, {})\nfn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {{",
        wg[0], wg[1], wg[2]
    );
    s.push_str(&body);
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

#[cfg(test)]
mod tests {
    use super::float_literal;

    /// Every f32 literal, read back as a real number, lies within f32's
    /// range (Tint refuses one past it) and rounds to the value printed.
    #[test]
    fn f32_literals_stay_within_the_range_of_f32() {
        for x in [
            f64::from(f32::MAX),
            f64::from(f32::MIN),
            1e39,
            -1e39,
            0.1,
            3.0,
            -2.5e-38,
        ] {
            let text = float_literal(x, "f32");
            let value: f64 = text.trim_end_matches('f').parse().unwrap();
            assert!(value.abs() <= f64::from(f32::MAX), "{text}");
            assert_eq!(
                value as f32,
                x.clamp(f32::MIN.into(), f32::MAX.into()) as f32,
                "{text}"
            );
        }
        assert_eq!(float_literal(0.1, "f32"), "0.1f");
    }
}
