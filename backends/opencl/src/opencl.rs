//! `kernel.func` to OpenCL C. A module's kernels are one program: a
//! prelude (the `half_t` type and the helpers any kernel uses), then one
//! `__kernel` function per kernel.func. Argument `i` of a kernel is its
//! `i`-th parameter: `__global` pointers for buffers (`const` and
//! `restrict` for the inputs: the plan never binds a kernel's outputs
//! over memory it reads), `image2d_t` for textures, read with
//! `read_imagef` at integer coordinates and no sampler. f16 tensors are
//! stored as `half` and read and written with `vload_half` /
//! `vstore_half`; f16 arithmetic is `half` where the device has
//! `cl_khr_fp16` and `float` elsewhere. Workgroup arrays are `__local`
//! at kernel scope; `load4` is `vload4`.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt::Write;

use ircc_codegen::{Language, Memory, Offset, Options, R, Space, workgroup_arrays};
use ircc_core::{ElemType, Module, OpId, Type};
use ircc_dialects::kernel::ops::{self, BinaryFn, IdKind, UnaryFn};
use ircc_dialects::kernel::{MatrixType, Target, texture_args};

/// The OpenCL C type of a scalar or index value.
fn scalar(t: &Type) -> R<&'static str> {
    Ok(match t {
        Type::Scalar(ElemType::F32) => "float",
        Type::Scalar(ElemType::F16) => "half_t",
        // Bytes are read into int.
        Type::Scalar(ElemType::I32 | ElemType::I8 | ElemType::U8) | Type::Index => "int",
        Type::Scalar(ElemType::I1) => "bool",
        other => return Err(format!("no OpenCL C type for {other}")),
    })
}

/// The element type of a `__global` buffer.
fn storage(e: ElemType) -> R<&'static str> {
    Ok(match e {
        ElemType::F32 => "float",
        ElemType::F16 => "half",
        ElemType::I32 => "int",
        ElemType::I8 => "char",
        ElemType::U8 => "uchar",
        other => return Err(format!("no OpenCL C buffer of {other}")),
    })
}

/// Code the program may need, each printed once in the prelude.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Helper {
    Half,
    TexelLane,
    IntDiv,
    IntPow,
}

impl Helper {
    fn text(self) -> &'static str {
        match self {
            Helper::Half => HALF,
            Helper::TexelLane => TEXEL_LANE,
            Helper::IntDiv => INT_DIV,
            Helper::IntPow => INT_POW,
        }
    }
}

const HALF: &str = "
// f16 values: half arithmetic where the device has it, float elsewhere
// (the tensors stay f16 in memory either way).
#ifdef cl_khr_fp16
#pragma OPENCL EXTENSION cl_khr_fp16 : enable
typedef half half_t;
typedef half4 half4_t;
#else
typedef float half_t;
typedef float4 half4_t;
#endif
";

const TEXEL_LANE: &str = "
// Lane `i` of a texel: OpenCL C has no vector index that is not a constant.
float texel_lane(float4 t, int i) {
    return i == 0 ? t.x : i == 1 ? t.y : i == 2 ? t.z : t.w;
}
";

const INT_DIV: &str = "
// x / y as WGSL defines it for every input (C leaves y == 0 and
// INT_MIN / -1 undefined): x in those cases.
int int_div(int x, int y) {
    return (y == 0 || (x == INT_MIN && y == -1)) ? x : x / y;
}
";

const INT_POW: &str = "
// x^n for integers by squaring; a negative n truncates toward zero as the
// real power would.
int int_pow(int x, int n) {
    if (n < 0) {
        return x == 1 ? 1 : x == -1 ? ((n & 1) == 0 ? 1 : -1) : 0;
    }
    int r = 1;
    for (int i = 0; i < 31 && n > 0; i++) {
        if (n & 1) r *= x;
        x *= x;
        n >>= 1;
    }
    return r;
}
";

/// OpenCL C's spelling of kernel code.
#[derive(Default)]
struct OpenCl {
    helpers: BTreeSet<Helper>,
}

impl Language for OpenCl {
    fn type_name(&self, t: &Type) -> R<&'static str> {
        scalar(t)
    }

    fn int(&self, c: i64) -> String {
        // C negates a literal after reading it, and 2147483648 is a long.
        if c == i64::from(i32::MIN) {
            return "(-2147483647 - 1)".to_string();
        }
        c.to_string()
    }

    fn float(&mut self, x: f64, ty: &str) -> String {
        let literal = if x.is_nan() {
            "NAN".to_string()
        } else if x.is_infinite() {
            if x > 0.0 { "INFINITY" } else { "(-INFINITY)" }.to_string()
        } else if ty == "half_t" {
            // Finite values beyond the type's range round to its largest.
            format!(
                "{:?}f",
                half::f16::from_f64(x.clamp(-65504.0, 65504.0)).to_f32()
            )
        } else {
            format!(
                "{:?}f",
                x.clamp(-f64::from(f32::MAX), f64::from(f32::MAX)) as f32
            )
        };
        if ty == "float" {
            literal
        } else {
            format!("({ty}){literal}")
        }
    }

    fn declare(&self, name: &str, ty: &str, value: &str) -> String {
        format!("const {ty} {name} = {value};")
    }

    fn var(&self, name: &str, ty: &str, value: &str) -> String {
        format!("{ty} {name} = {value};")
    }

    fn id(&self, kind: IdKind, axis: usize) -> String {
        let f = match kind {
            IdKind::Global => "get_global_id",
            IdKind::Local => "get_local_id",
            IdKind::Workgroup => "get_group_id",
        };
        format!("(int){f}({axis})")
    }

    /// A read that may fall outside its buffer is clamped into it: what
    /// it reads there is discarded, and OpenCL, unlike Vulkan, has no
    /// robust buffer access to make the read itself safe.
    fn load(&mut self, memory: &Memory, offset: Offset, in_bounds: bool) -> String {
        let (m, offset) = (&memory.name, offset.words);
        let clamped;
        let offset = if in_bounds || !matches!(memory.space, Space::Buffer { .. }) {
            offset
        } else {
            clamped = format!("clamp({offset}, 0, {})", memory.len - 1);
            &clamped
        };
        if matches!(memory.space, Space::Buffer { .. }) && memory.elem == ElemType::F16 {
            self.helpers.insert(Helper::Half);
            format!("(half_t)vload_half({offset}, {m})")
        } else {
            format!("{m}[{offset}]")
        }
    }

    fn store(&mut self, memory: &Memory, offset: Offset, value: &str) -> String {
        let (m, offset) = (&memory.name, offset.words);
        if matches!(memory.space, Space::Buffer { .. }) && memory.elem == ElemType::F16 {
            format!("vstore_half({value}, {offset}, {m});")
        } else {
            format!("{m}[{offset}] = {value};")
        }
    }

    fn store4(
        &mut self,
        memory: &Memory,
        offset: Offset,
        lanes: &[String],
        ty: &str,
    ) -> Vec<String> {
        vec![format!(
            "vstore4(({})({}), 0, {} + {});",
            self.vec4_type(ty),
            lanes.join(", "),
            memory.name,
            offset.words
        )]
    }

    /// From a buffer, four loads each clamped as [`Language::load`]
    /// clamps (a product's last tile reads past its operand).
    fn load4(&mut self, memory: &Memory, offset: Offset) -> String {
        let offset = offset.words;
        if matches!(memory.space, Space::Buffer { .. }) {
            let lanes: Vec<String> = (0..4)
                .map(|k| match k {
                    0 => self.load(memory, Offset::words(offset), false),
                    k => self.load(memory, Offset::words(&format!("{offset} + {k}")), false),
                })
                .collect();
            let ty = scalar(&Type::Scalar(memory.elem)).unwrap_or("float");
            return format!("({})({})", self.vec4_type(ty), lanes.join(", "));
        }
        format!("vload4(0, {} + {offset})", memory.name)
    }

    fn vec4_type(&self, ty: &str) -> String {
        match ty {
            "half_t" => "half4_t".to_string(),
            other => format!("{other}4"),
        }
    }

    fn splat(&self, x: &str, ty: &str) -> String {
        format!("({})({x})", self.vec4_type(ty))
    }

    fn texture_lane(&mut self, memory: &Memory, x: &str, y: &str, lane: &str, ty: &str) -> String {
        let texel = format!("read_imagef({}, (int2)({x}, {y}))", memory.name);
        let value = match lane.parse::<usize>() {
            Ok(i @ 0..4) => format!("{texel}.{}", ["x", "y", "z", "w"][i]),
            _ => {
                self.helpers.insert(Helper::TexelLane);
                format!("texel_lane({texel}, {lane})")
            }
        };
        if ty == "float" {
            value
        } else {
            format!("({ty}){value}")
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
        let lanes: Vec<String> = if ty == "float" {
            lanes.to_vec()
        } else {
            lanes.iter().map(|l| format!("(float){l}")).collect()
        };
        format!(
            "write_imagef({}, (int2)({x}, {y}), (float4)({}));",
            memory.name,
            lanes.join(", ")
        )
    }

    fn unary(&mut self, f: UnaryFn, x: &str, ty: &str) -> String {
        match f {
            UnaryFn::Neg => format!("-{x}"),
            UnaryFn::Not if ty == "bool" => format!("!{x}"),
            UnaryFn::Not => format!("~{x}"),
            // sign() is for floats only in OpenCL C.
            UnaryFn::Sign if ty == "int" => format!("(({x} > 0) - ({x} < 0))"),
            // ±1 past the bound, exactly (PoCL's tanh stops an ulp short,
            // and ±inf · 0 must stay NaN as onnxruntime's); a NaN stays.
            UnaryFn::Tanh => {
                let c = Target::webgpu().tanh_input_clamp;
                format!("(fabs({x}) > {c:?}f ? copysign(({ty})1, {x}) : tanh({x}))")
            }
            // OpenCL's sign of a NaN is 0; ONNX's is the NaN.
            UnaryFn::Sign => format!("(isnan({x}) ? {x} : sign({x}))"),
            // abs of an int is a uint in OpenCL C.
            UnaryFn::Abs if ty == "int" => format!("(int)abs({x})"),
            UnaryFn::Abs => format!("fabs({x})"),
            // Half to even, as ONNX rounds.
            UnaryFn::Round => format!("rint({x})"),
            UnaryFn::Exp
            | UnaryFn::Log
            | UnaryFn::Sqrt
            | UnaryFn::Rsqrt
            | UnaryFn::Erf
            | UnaryFn::Floor
            | UnaryFn::Ceil
            | UnaryFn::Sin
            | UnaryFn::Cos
            | UnaryFn::Tan
            | UnaryFn::Asin
            | UnaryFn::Acos
            | UnaryFn::Atan
            | UnaryFn::Sinh
            | UnaryFn::Cosh
            | UnaryFn::Asinh
            | UnaryFn::Acosh
            | UnaryFn::Atanh => format!("{}({x})", f.name()),
        }
    }

    fn binary(&mut self, f: BinaryFn, a: &str, b: &str, ty: &str) -> String {
        let int = ty == "int";
        match f {
            BinaryFn::Add => format!("{a} + {b}"),
            BinaryFn::Sub => format!("{a} - {b}"),
            BinaryFn::Mul => format!("{a} * {b}"),
            BinaryFn::Div if int => {
                self.helpers.insert(Helper::IntDiv);
                format!("int_div({a}, {b})")
            }
            BinaryFn::Div => format!("{a} / {b}"),
            BinaryFn::And if ty == "bool" => format!("{a} && {b}"),
            BinaryFn::Or if ty == "bool" => format!("{a} || {b}"),
            BinaryFn::Xor if ty == "bool" => format!("{a} != {b}"),
            BinaryFn::And => format!("{a} & {b}"),
            BinaryFn::Or => format!("{a} | {b}"),
            BinaryFn::Xor => format!("{a} ^ {b}"),
            // OpenCL C takes the shift count modulo the width.
            BinaryFn::Shl => format!("{a} << {b}"),
            BinaryFn::Shr => format!("{a} >> {b}"),
            BinaryFn::Pow if int => {
                self.helpers.insert(Helper::IntPow);
                format!("int_pow({a}, {b})")
            }
            BinaryFn::Pow => format!("pow({a}, {b})"),
            BinaryFn::Max if int => format!("max({a}, {b})"),
            BinaryFn::Min if int => format!("min({a}, {b})"),
            BinaryFn::Max => format!("fmax({a}, {b})"),
            BinaryFn::Min => format!("fmin({a}, {b})"),
        }
    }

    fn select(&self, cond: &str, a: &str, b: &str) -> String {
        format!("{cond} ? {a} : {b}")
    }

    fn cast(&self, x: &str, from: &str, to: &str) -> String {
        match (from, to) {
            // Toward zero and saturating, as WGSL converts.
            ("float" | "half_t", "int") => format!("convert_int_sat({x})"),
            _ => format!("({to})({x})"),
        }
    }

    fn for_head(&self, iv: &str, lower: i64, upper: i64, step: i64) -> String {
        format!("for (int {iv} = {lower}; {iv} < {upper}; {iv} += {step}) {{")
    }

    fn barrier(&self) -> &'static str {
        "barrier(CLK_LOCAL_MEM_FENCE);"
    }

    fn matrix_type(&mut self, t: &MatrixType) -> R<String> {
        Err(format!(
            "OpenCL C has no cooperative matrices ({}x{} {}): compile for a target whose profile lists none, or run through wgpu",
            t.rows, t.cols, t.elem
        ))
    }

    // Never reached: every matrix op has a matrix operand or result, whose
    // type is refused first.
    fn matrix_zero(&self, _: &str) -> String {
        String::new()
    }

    fn matrix_load(&self, _: &Memory, _: Offset, _: i64, _: &str) -> String {
        String::new()
    }

    fn matrix_store(&self, _: &Memory, _: Offset, _: i64, _: &str) -> String {
        String::new()
    }

    fn matrix_multiply_add(&self, _: &str, _: &str, _: &str) -> String {
        String::new()
    }
}

/// The C identifier of kernel symbol `sym`: invalid characters become
/// `_`, and a name not of kernel.lower's form `k<digit>...` gains the
/// prefix `k_`, so no kernel can be named like a builtin, a keyword or a
/// helper. `taken` makes names unique.
pub fn entry_name(sym: &str, taken: &mut HashSet<String>) -> String {
    let mut name: String = sym
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    let lowered = name.starts_with('k') && name[1..].starts_with(|c: char| c.is_ascii_digit());
    if !lowered {
        name = format!("k_{name}");
    }
    let mut unique = name.clone();
    let mut n = 2;
    while !taken.insert(unique.clone()) {
        unique = format!("{name}_{n}");
        n += 1;
    }
    unique
}

/// One kernel of a program: its name in the program and its text.
struct Printed {
    text: String,
    helpers: BTreeSet<Helper>,
}

fn kernel(m: &Module, func: OpId, entry: &str, options: Options) -> R<Printed> {
    let kernel = ops::Func::new(m, func).ok_or("not a kernel.func")?;
    let block = m.entry_block(func).ok_or("a kernel without a body")?;
    let args = m.blocks[block].args.clone();
    let textures = texture_args(m, func)?;
    let outputs = kernel.outputs() as usize;
    let mut memories = HashMap::new();
    let mut params = Vec::new();
    let mut lang = OpenCl::default();
    for (i, &a) in args.iter().enumerate() {
        let t = m
            .value_type(a)
            .as_tensor()
            .ok_or("kernel arguments are tensors")?;
        let written = i + outputs >= args.len();
        let name = format!("a{i}");
        let space = if textures.iter().any(|t| t.arg == i) {
            let access = if written {
                "__write_only"
            } else {
                "__read_only"
            };
            params.push(format!("{access} image2d_t {name}"));
            Space::Texture
        } else {
            let elem = storage(t.elem)?;
            params.push(if written {
                format!("__global {elem}* restrict {name}")
            } else {
                format!("__global const {elem}* restrict {name}")
            });
            // OpenCL's vload4 reads a scalar pointer: no declaration changes.
            Space::Buffer { vec4: false }
        };
        if t.elem == ElemType::F16 {
            lang.helpers.insert(Helper::Half);
        }
        memories.insert(
            a,
            Memory {
                name,
                elem: t.elem,
                space,
                len: t.num_elements(),
            },
        );
    }
    let mut locals = String::new();
    for (k, (alloc, vec4)) in workgroup_arrays(m, block).into_iter().enumerate() {
        let Some(t) = m.value_type(alloc).as_tensor() else {
            continue;
        };
        let ty = scalar(&Type::Scalar(t.elem))?;
        let name = format!("w{k}");
        let _ = writeln!(locals, "    __local {ty} {name}[{}];", t.num_elements());
        let space = Space::Workgroup { vec4 };
        memories.insert(
            alloc,
            Memory {
                name,
                elem: t.elem,
                space,
                len: t.num_elements(),
            },
        );
    }
    let mut f16_inside = false;
    m.walk_block(block, &mut |op| {
        for &r in &m.op(op).results {
            f16_inside |= *m.value_type(r) == Type::Scalar(ElemType::F16);
        }
    });
    if f16_inside {
        lang.helpers.insert(Helper::Half);
    }
    let body = ircc_codegen::body(m, func, memories, options, &mut lang)?;
    let wg = kernel.workgroup_size();
    let mut text = String::new();
    let _ = writeln!(
        text,
        "__kernel __attribute__((reqd_work_group_size({}, {}, {})))\nvoid {entry}({})\n{{\n{locals}{body}}}",
        wg[0],
        wg[1],
        wg[2],
        params.join(", ")
    );
    Ok(Printed {
        text,
        helpers: lang.helpers,
    })
}

/// The OpenCL C program of `kernels`, each `(kernel.func, entry name)`,
/// with the device's `options`.
pub fn program(m: &Module, kernels: &[(OpId, String)], options: Options) -> R<String> {
    let mut helpers = BTreeSet::new();
    let mut texts = Vec::new();
    for (func, entry) in kernels {
        let sym = ops::Func::new(m, *func)
            .map(|k| k.sym_name().to_string())
            .unwrap_or_default();
        let printed =
            kernel(m, *func, entry, options).map_err(|e| format!("kernel @{sym}: {e}"))?;
        helpers.extend(printed.helpers);
        texts.push(printed.text);
    }
    let mut s = format!(
        "// OpenCL C from ircc: {} kernel{}.\n",
        texts.len(),
        if texts.len() == 1 { "" } else { "s" }
    );
    for h in helpers {
        s.push_str(h.text());
    }
    for t in texts {
        s.push('\n');
        s.push_str(&t);
    }
    Ok(s)
}
