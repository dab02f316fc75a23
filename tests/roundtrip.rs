//! The textual format round-trips: printing, parsing and printing again is
//! a fixed point, in both forms, for random modules and for every file in
//! the repository.

mod common;

use ircc_core::ir::OpBuilder;
use ircc_core::{
    AffineExpr, AffineMap, Attribute, Attributes, DenseAttr, DenseValues, ElemType, Form, Module,
    TensorType, Type,
};
use ircc_core::{parse_module, print_module};
use proptest::prelude::*;

fn elem_type() -> impl Strategy<Value = ElemType> {
    proptest::sample::select(ElemType::ALL.to_vec())
}

fn tensor_type() -> impl Strategy<Value = TensorType> {
    (proptest::collection::vec(0i64..5, 0..4), elem_type())
        .prop_map(|(shape, elem)| TensorType::new(shape, elem))
}

fn any_type() -> impl Strategy<Value = Type> {
    prop_oneof![
        4 => tensor_type().prop_map(Type::Tensor),
        1 => (proptest::collection::vec(1i64..5, 1..3), elem_type()).prop_map(|(shape, elem)| Type::Vector { shape, elem }),
        1 => elem_type().prop_map(Type::Scalar),
        1 => Just(Type::Index),
        1 => ("[a-z]{1,4}", "[a-z][a-z0-9_]{0,4}").prop_map(|(d, n)| Type::Opaque { dialect: format!("x{d}"), name: n, body: None }),
    ]
}

fn affine_expr(dims: u32, syms: u32) -> impl Strategy<Value = AffineExpr> {
    let leaf = prop_oneof![
        (0..dims.max(1)).prop_map(move |d| if dims == 0 {
            AffineExpr::Const(d as i64)
        } else {
            AffineExpr::Dim(d)
        }),
        (0..syms.max(1)).prop_map(move |s| if syms == 0 {
            AffineExpr::Const(s as i64)
        } else {
            AffineExpr::Sym(s)
        }),
        (-20i64..20).prop_map(AffineExpr::Const),
    ];
    leaf.prop_recursive(4, 24, 2, |inner| {
        prop_oneof![
            (inner.clone(), inner.clone()).prop_map(|(a, b)| a + b),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| a - b),
            (inner.clone(), -9i64..9).prop_map(|(a, c)| a * AffineExpr::Const(c)),
            (inner.clone(), 1i64..9).prop_map(|(a, c)| a.floor_div(AffineExpr::Const(c))),
            (inner.clone(), 1i64..9).prop_map(|(a, c)| a.ceil_div(AffineExpr::Const(c))),
            (inner.clone(), 1i64..9).prop_map(|(a, c)| a.modulo(AffineExpr::Const(c))),
            inner.prop_map(|a| -a),
        ]
    })
}

fn affine_map() -> impl Strategy<Value = AffineMap> {
    (0u32..4, 0u32..3).prop_flat_map(|(d, s)| {
        proptest::collection::vec(affine_expr(d, s), 0..4)
            .prop_map(move |r| AffineMap::new(d, s, r))
    })
}

fn float_for(elem: ElemType) -> impl Strategy<Value = f64> {
    prop_oneof![
        any::<f32>().prop_map(|x| x as f64),
        Just(f64::INFINITY),
        Just(0.1),
        Just(-0.0),
    ]
    .prop_map(move |x| ircc_core::attr::round_to(x, elem))
}

fn dense() -> impl Strategy<Value = DenseAttr> {
    (proptest::collection::vec(1i64..4, 0..3), elem_type()).prop_flat_map(|(shape, elem)| {
        let n = shape.iter().product::<i64>() as usize;
        let ty = TensorType::new(shape, elem);
        let values = if elem.is_float() {
            proptest::collection::vec(float_for(elem), n)
                .prop_map(|v| DenseValues::Float(v.into()))
                .boxed()
        } else if elem.is_bool() {
            proptest::collection::vec(any::<bool>(), n)
                .prop_map(|v| DenseValues::Bool(v.into()))
                .boxed()
        } else {
            // Values of the type: wrapped to its width and signedness (u64
            // held as its bit pattern).
            proptest::collection::vec(any::<i64>(), n)
                .prop_map(move |v| {
                    DenseValues::Int(
                        v.iter()
                            .map(|&x| ircc_core::tensor::wrap_int(x, elem))
                            .collect::<Vec<_>>()
                            .into(),
                    )
                })
                .boxed()
        };
        values.prop_map(move |v| DenseAttr::new(ty.clone(), v).unwrap())
    })
}

fn attribute() -> impl Strategy<Value = Attribute> {
    let leaf = prop_oneof![
        Just(Attribute::Unit),
        any::<bool>().prop_map(Attribute::Bool),
        any::<i64>().prop_map(Attribute::i64),
        any::<i32>().prop_map(|v| Attribute::Int(v as i64, Type::Scalar(ElemType::I32))),
        any::<f64>().prop_map(|v| Attribute::Float(v, Type::Scalar(ElemType::F64))),
        any::<f32>().prop_map(|v| Attribute::Float(v as f64, Type::Scalar(ElemType::F32))),
        "\\PC{0,12}".prop_map(Attribute::String),
        proptest::collection::vec(any::<i64>(), 0..5).prop_map(Attribute::DenseI64Array),
        proptest::collection::vec(any::<f32>().prop_map(|x| x as f64), 0..4)
            .prop_map(|v| Attribute::DenseFloatArray(ElemType::F32, v)),
        any_type().prop_map(Attribute::Type),
        dense().prop_map(Attribute::Dense),
        proptest::collection::vec("[a-z_][a-z0-9_]{0,5}|[a-z ]{1,4}", 1..3)
            .prop_map(Attribute::SymbolRef),
        affine_map().prop_map(Attribute::AffineMap),
    ];
    leaf.prop_recursive(2, 12, 3, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..3).prop_map(Attribute::Array),
            proptest::collection::vec(("[a-z][a-z0-9_.]{0,6}|[A-Z ]{1,3}", inner), 0..3)
                .prop_map(|kv| Attribute::Dict(kv.into_iter().collect())),
        ]
    })
}

/// One random operation: name, operand picks, attributes, result types,
/// whether it holds a region, and name hints.
#[derive(Debug, Clone)]
struct OpRecipe {
    name: String,
    operands: Vec<prop::sample::Index>,
    attrs: Vec<(String, Attribute)>,
    results: Vec<Type>,
    region: bool,
    hint: Option<String>,
}

fn op_recipe() -> impl Strategy<Value = OpRecipe> {
    (
        "(ext|graph|my_dialect)\\.[a-z][a-z0-9_]{0,6}",
        proptest::collection::vec(any::<prop::sample::Index>(), 0..3),
        proptest::collection::vec(("[a-z][a-z0-9_]{0,5}(\\.[a-z]{1,3})?", attribute()), 0..3),
        proptest::collection::vec(any_type(), 0..3),
        proptest::bool::weighted(0.15),
        proptest::option::of("[a-z_][a-z0-9_.$-]{0,5}|[0-9]{1,2}|arg[0-9]|[a-z]+::[a-z]+"),
    )
        .prop_map(|(name, operands, attrs, results, region, hint)| OpRecipe {
            name,
            operands,
            attrs,
            results,
            region,
            hint,
        })
}

fn build_module(
    args: Vec<Type>,
    ops: Vec<OpRecipe>,
    module_attrs: Vec<(String, Attribute)>,
) -> Module {
    let mut m = Module::new();
    m.attrs = module_attrs
        .into_iter()
        .map(|(k, v)| (format!("ircc.{k}"), v))
        .collect();
    let results: Vec<Type> = Vec::new();
    let mut fattrs = Attributes::new();
    fattrs.insert("sym_name".into(), Attribute::String("main".into()));
    fattrs.insert(
        "function_type".into(),
        Attribute::Type(Type::Function {
            inputs: args.clone(),
            results: results.clone(),
        }),
    );
    let f = m.create_op(OpBuilder::new("func.func").attrs(fattrs).regions(1));
    let body = m.body;
    m.append_op(body, f);
    let region = m.op(f).regions[0];
    let entry = m.add_block(region, args);
    let mut available = m.blocks[entry].args.clone();
    for r in ops {
        let operands: Vec<_> = if available.is_empty() {
            Vec::new()
        } else {
            r.operands.iter().map(|i| *i.get(&available)).collect()
        };
        let mut attrs = Attributes::new();
        for (k, v) in r.attrs {
            attrs.insert(k, v);
        }
        let op = m.create_op(
            OpBuilder::new(r.name)
                .operands(operands)
                .results(r.results)
                .attrs(attrs)
                .regions(r.region as usize),
        );
        m.append_op(entry, op);
        if r.region {
            // A nested block that reads an outer value and has its own argument.
            let region = m.op(op).regions[0];
            let b = m.add_block(region, vec![Type::Index]);
            let inner =
                m.create_op(OpBuilder::new("ext.yield").operands(available.first().copied()));
            m.append_op(b, inner);
        }
        for &v in &m.op(op).results.clone() {
            m.values[v].name = r.hint.clone();
            available.push(v);
        }
    }
    let ret = m.create_op(OpBuilder::new("func.return"));
    m.append_op(entry, ret);
    m
}

fn assert_fixed_point(m: &Module, form: Form) -> Result<(), TestCaseError> {
    let first = print_module(m, form);
    let parsed = parse_module(&first, Some("printed.ir"));
    prop_assert!(
        parsed.is_ok(),
        "printed module does not parse: {}\n{first}",
        parsed.err().unwrap()
    );
    let second = print_module(&parsed.unwrap(), form);
    prop_assert_eq!(&first, &second);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn print_parse_print_is_a_fixed_point(
        args in proptest::collection::vec(any_type(), 0..3),
        ops in proptest::collection::vec(op_recipe(), 0..6),
        module_attrs in proptest::collection::vec(("[a-z]{1,5}", attribute()), 0..2),
    ) {
        let m = build_module(args, ops, module_attrs);
        assert_fixed_point(&m, Form::Pretty)?;
        assert_fixed_point(&m, Form::Generic)?;
        // Deterministic: the same module prints the same bytes.
        prop_assert_eq!(print_module(&m, Form::Pretty), print_module(&m.clone(), Form::Pretty));
    }

    #[test]
    fn affine_printing_preserves_meaning(map in affine_map(), point in proptest::collection::vec(-50i64..50, 7)) {
        let text = format!("affine_map<{map}>");
        let parsed = ircc_core::parse_attribute(&text);
        prop_assert!(parsed.is_ok(), "{text}: {:?}", parsed.err());
        let Attribute::AffineMap(back) = parsed.unwrap() else { panic!("not a map") };
        prop_assert_eq!(back.to_string(), map.to_string());
        let (dims, syms) = point.split_at(4);
        prop_assert_eq!(back.eval(&dims[..map.num_dims as usize], &syms[..map.num_syms as usize]), map.eval(&dims[..map.num_dims as usize], &syms[..map.num_syms as usize]));
    }
}

#[test]
fn every_repository_file_round_trips() {
    let mut files = common::ir_files("tests/ir");
    files.extend(common::ir_files("examples"));
    let mut checked = 0;
    for path in files {
        let source = std::fs::read_to_string(&path).unwrap();
        let Ok(m) = parse_module(&source, None) else {
            continue;
        };
        for form in [Form::Pretty, Form::Generic] {
            let first = print_module(&m, form);
            let again = parse_module(&first, None)
                .unwrap_or_else(|e| panic!("{}: {e}\n{first}", path.display()));
            assert_eq!(first, print_module(&again, form), "{}", path.display());
        }
        checked += 1;
    }
    assert!(checked >= 30, "only {checked} files parsed");
}
