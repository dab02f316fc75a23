//! Types, attributes and affine maps from the parse tree.

use std::collections::HashMap;
use std::sync::Arc;

use pest::iterators::Pair;

use super::{Builder, PResult, Rule};
use crate::affine::{AffineExpr, AffineMap};
use crate::attr::{Attribute, Attributes, DenseAttr, DenseValues, float_from_bits, round_to};
use crate::limits::{MAX_AFFINE_HEIGHT, MAX_DIM};
use crate::types::{ElemType, TensorType, Type};

/// The raw text between the quotes of a string literal.
pub(super) fn unquote_raw<'a>(pair: &Pair<'a, Rule>) -> &'a str {
    let s = pair.as_str();
    &s[1..s.len() - 1]
}

/// Decodes MLIR's string escapes: `\"`, `\\`, `\n`, `\t` and `\XX` (hex).
pub(super) fn unquote(pair: &Pair<Rule>) -> Result<String, String> {
    let raw = unquote_raw(pair).as_bytes();
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        if raw[i] != b'\\' {
            out.push(raw[i]);
            i += 1;
            continue;
        }
        match raw.get(i + 1) {
            Some(b'"') => out.push(b'"'),
            Some(b'\\') => out.push(b'\\'),
            Some(b'n') => out.push(b'\n'),
            Some(b't') => out.push(b'\t'),
            Some(&h) if h.is_ascii_hexdigit() => {
                let l = raw
                    .get(i + 2)
                    .copied()
                    .filter(u8::is_ascii_hexdigit)
                    .ok_or("bad escape in string")?;
                let hex = [h, l];
                let text = std::str::from_utf8(&hex).map_err(|_| "bad escape in string")?;
                out.push(u8::from_str_radix(text, 16).map_err(|_| "bad escape in string")?);
                i += 3;
                continue;
            }
            _ => return Err("bad escape in string".to_string()),
        }
        i += 2;
    }
    String::from_utf8(out).map_err(|_| "string is not valid UTF-8".to_string())
}

fn elem_type(text: &str) -> Result<ElemType, String> {
    ElemType::from_name(text).ok_or_else(|| {
        let known: Vec<&str> = ElemType::ALL.iter().map(|e| e.name()).collect();
        format!(
            "unsupported element type '{text}' (ircc supports {})",
            known.join(", ")
        )
    })
}

impl Builder<'_> {
    pub(super) fn type_list(&self, pair: Pair<Rule>) -> PResult<Vec<Type>> {
        pair.into_inner().map(|t| self.type_value(t)).collect()
    }

    pub(super) fn type_value(&self, pair: Pair<Rule>) -> PResult<Type> {
        let inner = pair.into_inner().next().expect("a type");
        match inner.as_rule() {
            Rule::tensor_type | Rule::vector_type => {
                let is_tensor = inner.as_rule() == Rule::tensor_type;
                let mut it = inner.clone().into_inner();
                let shape_pair = it.next().expect("shape");
                let elem_pair = it.next().expect("element type");
                let mut shape = Vec::new();
                for d in shape_pair.into_inner() {
                    match d.as_str() {
                        "?" => {
                            return Err(self.err(
                                &d,
                                "dynamic dimensions are not supported: ircc needs static shapes",
                            ));
                        }
                        "*" => {
                            return Err(self.err(
                                &d,
                                "unranked tensors are not supported: ircc needs static shapes",
                            ));
                        }
                        n => match n.parse::<i64>() {
                            Ok(v) if v <= MAX_DIM => shape.push(v),
                            _ => return Err(self.err(
                                &d,
                                format!(
                                    "dimension {n} is larger than the supported maximum {MAX_DIM}"
                                ),
                            )),
                        },
                    }
                }
                let elem = elem_type(elem_pair.as_str()).map_err(|m| self.err(&elem_pair, m))?;
                Ok(if is_tensor {
                    Type::Tensor(TensorType::new(shape, elem))
                } else {
                    Type::Vector { shape, elem }
                })
            }
            Rule::scalar_type => Ok(Type::Scalar(
                elem_type(inner.as_str()).map_err(|m| self.err(&inner, m))?,
            )),
            Rule::index_type => Ok(Type::Index),
            Rule::none_type => Err(self.err(&inner, "the 'none' type is not supported")),
            Rule::function_type => self.function_type(inner),
            Rule::opaque_type => {
                let mut it = inner.into_inner();
                let dialect = it.next().expect("dialect").as_str().to_string();
                let name = it.next().expect("name").as_str().to_string();
                let body = it.next().map(|b| b.as_str().to_string());
                Ok(Type::Opaque {
                    dialect,
                    name,
                    body,
                })
            }
            Rule::type_alias_name => {
                let key = &inner.as_str()[1..];
                self.type_aliases
                    .get(key)
                    .cloned()
                    .ok_or_else(|| self.err(&inner, format!("undefined type alias '!{key}'")))
            }
            r => unreachable!("unexpected {r:?} in type"),
        }
    }

    pub(super) fn function_type(&self, pair: Pair<Rule>) -> PResult<Type> {
        let mut inputs = Vec::new();
        let mut results = Vec::new();
        for p in pair.into_inner() {
            match p.as_rule() {
                Rule::type_list => inputs = self.type_list(p)?,
                Rule::arrow => {}
                Rule::function_results => {
                    if let Some(r) = p.into_inner().next() {
                        results = match r.as_rule() {
                            Rule::type_list => self.type_list(r)?,
                            _ => vec![self.type_value(r)?],
                        };
                    }
                }
                r => unreachable!("unexpected {r:?} in function type"),
            }
        }
        Ok(Type::Function { inputs, results })
    }

    pub(super) fn attr_dict(&self, pair: Pair<Rule>) -> PResult<Attributes> {
        let mut dict = Attributes::new();
        for named in pair.into_inner() {
            let mut it = named.clone().into_inner();
            let key_pair = it.next().expect("attribute name");
            let key = match key_pair.as_rule() {
                Rule::string_lit => unquote(&key_pair).map_err(|m| self.err(&key_pair, m))?,
                _ => key_pair.as_str().to_string(),
            };
            let value = match it.next() {
                Some(v) => self.attr_value(v)?,
                None => Attribute::Unit,
            };
            if dict.insert(key.clone(), value).is_some() {
                return Err(self.err(
                    &key_pair,
                    format!("attribute '{key}' occurs more than once"),
                ));
            }
        }
        Ok(dict)
    }

    pub(super) fn attr_value(&self, pair: Pair<Rule>) -> PResult<Attribute> {
        let inner = pair.into_inner().next().expect("an attribute");
        match inner.as_rule() {
            Rule::unit_lit => Ok(Attribute::Unit),
            Rule::bool_lit => Ok(Attribute::Bool(inner.as_str() == "true")),
            Rule::int_attr | Rule::float_attr => self.number_attr(inner),
            Rule::string_lit => Ok(Attribute::String(
                unquote(&inner).map_err(|m| self.err(&inner, m))?,
            )),
            Rule::symbol_ref => inner
                .into_inner()
                .map(|s| self.symbol_name(&s))
                .collect::<PResult<_>>()
                .map(Attribute::SymbolRef),
            Rule::list_attr => inner
                .into_inner()
                .map(|a| self.attr_value(a))
                .collect::<PResult<_>>()
                .map(Attribute::Array),
            Rule::attr_dict => Ok(Attribute::Dict(self.attr_dict(inner)?)),
            Rule::type_value => Ok(Attribute::Type(self.type_value(inner)?)),
            Rule::opaque_attr => {
                let mut it = inner.into_inner();
                let dialect = it.next().expect("dialect").as_str().to_string();
                let name = it.next().expect("name").as_str().to_string();
                let body = it.next().map(|b| b.as_str().to_string());
                Ok(Attribute::Opaque {
                    dialect,
                    name,
                    body,
                })
            }
            Rule::attr_alias_name => {
                let key = &inner.as_str()[1..];
                self.attr_aliases
                    .get(key)
                    .cloned()
                    .ok_or_else(|| self.err(&inner, format!("undefined attribute alias '#{key}'")))
            }
            Rule::array_attr => self.array_attr(inner),
            Rule::dense_attr => self.dense_attr(inner),
            Rule::affine_map_attr => Ok(Attribute::AffineMap(
                self.affine_map(inner.into_inner().next().expect("map"))?,
            )),
            r => unreachable!("unexpected {r:?} in attribute"),
        }
    }

    fn number_attr(&self, pair: Pair<Rule>) -> PResult<Attribute> {
        let mut it = pair.clone().into_inner();
        let lit = it.next().expect("number");
        let ty = match it.next() {
            Some(t) => Some((self.type_value(t.clone())?, t)),
            None => None,
        };
        let is_float_lit = lit.as_rule() == Rule::float_lit;
        match ty {
            None if is_float_lit => Ok(Attribute::Float(
                self.parse_f64(&lit)?,
                Type::Scalar(ElemType::F64),
            )),
            None => Ok(Attribute::i64(self.parse_i64(&lit)?)),
            Some((Type::Scalar(e), _)) if e.is_float() => {
                let v = if is_float_lit {
                    round_to(self.parse_f64(&lit)?, e)
                } else {
                    self.float_from_int_lit(&lit, e)?
                };
                Ok(Attribute::Float(v, Type::Scalar(e)))
            }
            Some((ty @ (Type::Scalar(_) | Type::Index), tp)) => {
                if is_float_lit {
                    return Err(self.err(
                        &tp,
                        format!("a float literal cannot have the integer type {ty}"),
                    ));
                }
                let v = match &ty {
                    Type::Scalar(e) => self.parse_int_of(&lit, *e)?,
                    _ => self.parse_i64(&lit)?,
                };
                if ty == Type::Scalar(ElemType::I1) {
                    return Ok(Attribute::Bool(v != 0));
                }
                Ok(Attribute::Int(v, ty))
            }
            Some((ty, tp)) => Err(self.err(&tp, format!("a number cannot have the type {ty}"))),
        }
    }

    /// An integer literal of element type `elem`, refused outside its
    /// range (it would otherwise wrap when the tensor is built).
    fn parse_int_of(&self, lit: &Pair<Rule>, elem: ElemType) -> PResult<i64> {
        let v = self.parse_i64(lit)?;
        let (lo, hi) = elem.int_range();
        let fits =
            elem == ElemType::U64 && lit.as_str().starts_with("0x") || (lo..=hi).contains(&v);
        if fits {
            Ok(v)
        } else {
            Err(self.err(lit, format!("{v} is out of the range of {elem}")))
        }
    }

    fn parse_i64(&self, lit: &Pair<Rule>) -> PResult<i64> {
        let s = lit.as_str();
        let (neg, body) = s.strip_prefix('-').map_or((false, s), |b| (true, b));
        let v = match body.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16).map(|u| u as i64),
            None => body.parse::<i64>(),
        }
        .map_err(|_| self.err(lit, format!("integer '{s}' does not fit in 64 bits")))?;
        Ok(if neg { v.wrapping_neg() } else { v })
    }

    fn parse_f64(&self, lit: &Pair<Rule>) -> PResult<f64> {
        lit.as_str()
            .parse::<f64>()
            .map_err(|_| self.err(lit, format!("bad float literal '{}'", lit.as_str())))
    }

    /// An integer literal where a float is expected: MLIR writes hex bit
    /// patterns (`0x7FC00000`) this way; plain integers are converted.
    fn float_from_int_lit(&self, lit: &Pair<Rule>, elem: ElemType) -> PResult<f64> {
        let s = lit.as_str();
        match s.strip_prefix("0x") {
            Some(hex) => {
                let bits = u64::from_str_radix(hex, 16)
                    .map_err(|_| self.err(lit, "hex float literal is too long"))?;
                if elem.bits() < 64 && bits >> elem.bits() != 0 {
                    return Err(self.err(
                        lit,
                        format!(
                            "hex literal {s} is wider than {elem}'s {} bits",
                            elem.bits()
                        ),
                    ));
                }
                Ok(float_from_bits(bits, elem))
            }
            None => Ok(round_to(self.parse_i64(lit)? as f64, elem)),
        }
    }

    fn array_attr(&self, pair: Pair<Rule>) -> PResult<Attribute> {
        let mut it = pair.into_inner();
        let ty_pair = it.next().expect("element type");
        let elem = elem_type(ty_pair.as_str()).map_err(|m| self.err(&ty_pair, m))?;
        let nums: Vec<Pair<Rule>> = it.map(|n| n.into_inner().next().expect("number")).collect();
        if elem.is_float() {
            let vals = nums
                .iter()
                .map(|n| match n.as_rule() {
                    Rule::float_lit => Ok(round_to(self.parse_f64(n)?, elem)),
                    Rule::int_lit => self.float_from_int_lit(n, elem),
                    _ => Err(self.err(n, "expected a float")),
                })
                .collect::<PResult<Vec<f64>>>()?;
            return Ok(Attribute::DenseFloatArray(elem, vals));
        }
        if elem != ElemType::I64 {
            return Err(self.err(
                &ty_pair,
                format!("array<{elem}> is not supported; use array<i64>"),
            ));
        }
        let vals = nums
            .iter()
            .map(|n| match n.as_rule() {
                Rule::int_lit => self.parse_i64(n),
                _ => Err(self.err(n, "expected an integer")),
            })
            .collect::<PResult<Vec<i64>>>()?;
        Ok(Attribute::DenseI64Array(vals))
    }

    fn dense_attr(&self, pair: Pair<Rule>) -> PResult<Attribute> {
        let whole = pair.clone();
        let mut body = None;
        let mut ty = None;
        for p in pair.into_inner() {
            match p.as_rule() {
                Rule::dense_body => body = p.into_inner().next(),
                Rule::type_value => ty = Some(p),
                r => unreachable!("unexpected {r:?} in dense"),
            }
        }
        let ty_pair = ty.expect("dense type");
        let tensor = match self.type_value(ty_pair.clone())? {
            Type::Tensor(t) => t,
            other => {
                return Err(self.err(
                    &ty_pair,
                    format!("dense constants must have a tensor type, not {other}"),
                ));
            }
        };
        let elem = tensor.elem;
        let mut leaves = Vec::new();
        let mut shape = Vec::new();
        let values = match body {
            None => DenseValues::Float(Arc::from(Vec::new())),
            Some(b) if b.as_rule() == Rule::string_lit => self.dense_hex(&b, &tensor)?,
            Some(b) => {
                self.dense_leaves(b, 0, &mut shape, &mut leaves)?;
                let is_splat = leaves.len() == 1 && shape.is_empty();
                if !is_splat && shape != tensor.shape {
                    return Err(self.err(
                        &whole,
                        format!(
                            "dense literal has shape [{}] but its type is {tensor}",
                            join(&shape)
                        ),
                    ));
                }
                self.dense_values(&leaves, elem)?
            }
        };
        let values = match values {
            DenseValues::Float(v) if v.is_empty() && !elem.is_float() => {
                if elem.is_bool() {
                    DenseValues::Bool(Arc::from(Vec::new()))
                } else {
                    DenseValues::Int(Arc::from(Vec::new()))
                }
            }
            v => v,
        };
        DenseAttr::new(tensor, values)
            .map(Attribute::Dense)
            .map_err(|m| self.err(&whole, m))
    }

    fn dense_leaves<'a>(
        &self,
        pair: Pair<'a, Rule>,
        depth: usize,
        shape: &mut Vec<i64>,
        leaves: &mut Vec<Pair<'a, Rule>>,
    ) -> PResult<()> {
        let children: Vec<Pair<Rule>> = pair.clone().into_inner().collect();
        if children.len() == 1 && children[0].as_rule() == Rule::number {
            if depth < shape.len() {
                return Err(self.err(&pair, "dense literal is not rectangular"));
            }
            leaves.push(children[0].clone().into_inner().next().expect("number"));
            return Ok(());
        }
        if depth == shape.len() {
            if !leaves.is_empty() {
                return Err(self.err(&pair, "dense literal is not rectangular"));
            }
            shape.push(children.len() as i64);
        } else if shape[depth] != children.len() as i64 {
            return Err(self.err(&pair, "dense literal is not rectangular"));
        }
        for c in children {
            self.dense_leaves(c, depth + 1, shape, leaves)?;
        }
        Ok(())
    }

    fn dense_values(&self, leaves: &[Pair<Rule>], elem: ElemType) -> PResult<DenseValues> {
        if elem.is_float() {
            let v = leaves
                .iter()
                .map(|l| match l.as_rule() {
                    Rule::float_lit => Ok(round_to(self.parse_f64(l)?, elem)),
                    Rule::int_lit => self.float_from_int_lit(l, elem),
                    _ => Err(self.err(l, format!("expected a {elem} value"))),
                })
                .collect::<PResult<Vec<f64>>>()?;
            return Ok(DenseValues::Float(v.into()));
        }
        if elem.is_bool() {
            let v = leaves
                .iter()
                .map(|l| match (l.as_rule(), l.as_str()) {
                    (Rule::bool_lit, s) => Ok(s == "true"),
                    (Rule::int_lit, "0") => Ok(false),
                    (Rule::int_lit, "1") => Ok(true),
                    _ => Err(self.err(l, "expected true or false")),
                })
                .collect::<PResult<Vec<bool>>>()?;
            return Ok(DenseValues::Bool(v.into()));
        }
        let v = leaves
            .iter()
            .map(|l| match l.as_rule() {
                Rule::int_lit => self.parse_int_of(l, elem),
                _ => Err(self.err(l, format!("expected an {elem} value"))),
            })
            .collect::<PResult<Vec<i64>>>()?;
        Ok(DenseValues::Int(v.into()))
    }

    /// `dense<"0x...">`: the raw little-endian bytes of the elements, as
    /// MLIR prints large constants.
    fn dense_hex(&self, pair: &Pair<Rule>, ty: &TensorType) -> PResult<DenseValues> {
        let text = unquote_raw(pair);
        let hex = text
            .strip_prefix("0x")
            .ok_or_else(|| self.err(pair, "a dense string must be hex, starting with 0x"))?;
        if hex.len() % 2 != 0 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(self.err(pair, "malformed hex data in dense constant"));
        }
        let bytes: Vec<u8> = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap_or(0))
            .collect();
        let elem = ty.elem;
        let width = elem.byte_size();
        let n = ty.num_elements() as usize;
        if bytes.len() != width.saturating_mul(n) && bytes.len() != width {
            return Err(self.err(
                pair,
                format!(
                    "dense hex data has {} bytes but {ty} needs {}",
                    bytes.len(),
                    width.saturating_mul(n)
                ),
            ));
        }
        let words = bytes.chunks(width).map(|c| {
            let mut buf = [0u8; 8];
            buf[..c.len()].copy_from_slice(c);
            u64::from_le_bytes(buf)
        });
        Ok(match elem {
            e if e.is_float() => DenseValues::Float(
                words
                    .map(|w| float_from_bits(w, e))
                    .collect::<Vec<_>>()
                    .into(),
            ),
            ElemType::I1 => DenseValues::Bool(words.map(|w| w != 0).collect::<Vec<_>>().into()),
            e => {
                let bits = e.byte_size() * 8;
                DenseValues::Int(
                    words
                        .map(|w| ((w << (64 - bits)) as i64) >> (64 - bits))
                        .collect::<Vec<_>>()
                        .into(),
                )
            }
        })
    }

    pub(super) fn affine_map(&self, pair: Pair<Rule>) -> PResult<AffineMap> {
        let mut names: HashMap<String, AffineExpr> = HashMap::new();
        let mut num_dims = 0;
        let mut num_syms = 0;
        let mut results = Vec::new();
        for p in pair.clone().into_inner() {
            match p.as_rule() {
                Rule::affine_dims | Rule::affine_syms => {
                    let is_dim = p.as_rule() == Rule::affine_dims;
                    for id in p.into_inner() {
                        let e = if is_dim {
                            AffineExpr::Dim(num_dims)
                        } else {
                            AffineExpr::Sym(num_syms)
                        };
                        if names.insert(id.as_str().to_string(), e).is_some() {
                            return Err(self.err(
                                &id,
                                format!("'{}' is declared twice in the affine map", id.as_str()),
                            ));
                        }
                        if is_dim { num_dims += 1 } else { num_syms += 1 }
                    }
                }
                Rule::affine_expr => {
                    let (e, _) = self.affine_expr(p.clone(), &names)?;
                    if !e.is_pure_affine() {
                        return Err(self.err(
                            &p,
                            "non-affine expression: a product needs a constant or symbolic factor, and a divisor must be constant or symbolic",
                        ));
                    }
                    results.push(e);
                }
                r => unreachable!("unexpected {r:?} in affine map"),
            }
        }
        Ok(AffineMap::new(num_dims, num_syms, results))
    }

    /// An affine expression and an upper bound of its height, which must
    /// stay within [`MAX_AFFINE_HEIGHT`] (every walk of a tree recurses).
    fn affine_expr(
        &self,
        pair: Pair<Rule>,
        names: &HashMap<String, AffineExpr>,
    ) -> PResult<(AffineExpr, usize)> {
        let mut it = pair.into_inner();
        let (mut acc, mut height) = self.affine_term(it.next().expect("term"), names)?;
        while let Some(op) = it.next() {
            let rhs_pair = it.next().expect("term after operator");
            let (rhs, h) = self.affine_term(rhs_pair.clone(), names)?;
            height = self.taller(&rhs_pair, height, h)?;
            acc = if op.as_str() == "+" {
                acc + rhs
            } else {
                acc - rhs
            };
        }
        Ok((acc, height))
    }

    fn affine_term(
        &self,
        pair: Pair<Rule>,
        names: &HashMap<String, AffineExpr>,
    ) -> PResult<(AffineExpr, usize)> {
        let mut it = pair.into_inner();
        let (mut acc, mut height) = self.affine_factor(it.next().expect("factor"), names)?;
        while let Some(op) = it.next() {
            let rhs_pair = it.next().expect("factor after operator");
            let (rhs, h) = self.affine_factor(rhs_pair.clone(), names)?;
            height = self.taller(&rhs_pair, height, h)?;
            let op_text = op.as_str().trim();
            if op_text != "*" && rhs.as_const() == Some(0) {
                return Err(self.err(&rhs_pair, format!("{op_text} by zero in affine map")));
            }
            acc = match op_text {
                "*" => acc * rhs,
                "floordiv" => acc.floor_div(rhs),
                "ceildiv" => acc.ceil_div(rhs),
                _ => acc.modulo(rhs),
            };
        }
        Ok((acc, height))
    }

    /// The height of a binary node over operands of heights `a` and `b`.
    fn taller(&self, at: &Pair<Rule>, a: usize, b: usize) -> PResult<usize> {
        let height = a.max(b) + 1;
        if height > MAX_AFFINE_HEIGHT {
            return Err(self.err(
                at,
                format!("affine expression deeper than {MAX_AFFINE_HEIGHT} operations"),
            ));
        }
        Ok(height)
    }

    fn affine_factor(
        &self,
        pair: Pair<Rule>,
        names: &HashMap<String, AffineExpr>,
    ) -> PResult<(AffineExpr, usize)> {
        let mut negate = None;
        let mut result = None;
        for p in pair.into_inner() {
            match p.as_rule() {
                Rule::neg_sign => negate = Some(p),
                Rule::affine_atom => {
                    let a = p.into_inner().next().expect("atom");
                    result = Some(match a.as_rule() {
                        // `-9223372036854775808` is a constant, not the
                        // negation of one that does not fit.
                        Rule::affine_int => {
                            let digits = if negate.take().is_some() {
                                format!("-{}", a.as_str())
                            } else {
                                a.as_str().to_string()
                            };
                            let c = digits
                                .parse()
                                .map_err(|_| self.err(&a, "constant does not fit in 64 bits"))?;
                            (AffineExpr::Const(c), 0)
                        }
                        Rule::bare_id => (
                            names.get(a.as_str()).cloned().ok_or_else(|| {
                                self.err(
                                    &a,
                                    format!(
                                        "'{}' is not a dimension or symbol of the affine map",
                                        a.as_str()
                                    ),
                                )
                            })?,
                            0,
                        ),
                        _ => self.affine_expr(a, names)?,
                    });
                }
                r => unreachable!("unexpected {r:?} in affine factor"),
            }
        }
        let (e, height) = result.expect("factor has an atom");
        match negate {
            Some(sign) => Ok((-e, self.taller(&sign, height, 0)?)),
            None => Ok((e, height)),
        }
    }
}

fn join(shape: &[i64]) -> String {
    shape
        .iter()
        .map(i64::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}
