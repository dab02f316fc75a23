//! `.npy` files, numpy's format (versions 1 to 3), read and written here.
//!
//! Every numeric type numpy has, float16 included, and bool. numpy has no
//! bfloat16, 8- or 4-bit floats or 4- and 2-bit integers; `ml_dtypes`
//! adds them, and `np.save` writes their arrays as untyped bytes: `<V2`
//! for bfloat16, `<V1` for the one-byte types (float8_e4m3fn, its fnuz
//! form, float8_e5m2fnuz, float4_e2m1fn, int4, uint4, int2, uint2; a
//! 4- or 2-bit value in the low bits of its byte) and `<f1` for
//! float8_e5m2. Such a file does not say which type it holds, so it is
//! read as the type the model declares for it ([`Npy::into_type`]).

use std::io::Write;
use std::path::Path;

use ircc_core::minifloat::MiniFloat;
use ircc_core::stored::map_file;
use ircc_core::tensor::{byte_storage, wrap_int};
use ircc_core::{ElemType, Tensor, TensorData};
use ndarray::{ArrayD, IxDyn};

/// What a `.npy` file holds.
pub enum Npy {
    /// An array of a type numpy knows.
    Typed(Tensor),
    /// `ml_dtypes`' untyped bytes, an element of `descr` each, in
    /// row-major order or, where `fortran`, column-major.
    Untyped {
        descr: String,
        shape: Vec<usize>,
        fortran: bool,
        data: Vec<u8>,
    },
}

/// Reads a `.npy` file: a typed array, or untyped bytes whose type the
/// reader must know.
pub fn read_npy_file(path: &Path) -> Result<Npy, String> {
    let bytes = map_file(path)?;
    parse(&bytes).map_err(|e| format!("{}: {e}", path.display()))
}

/// Reads a `.npy` file of a type numpy knows.
pub fn read_npy(path: &Path) -> Result<Tensor, String> {
    match read_npy_file(path)? {
        Npy::Typed(t) => Ok(t),
        Npy::Untyped { descr, .. } => Err(format!(
            "{}: holds untyped {descr} values (ml_dtypes' bfloat16, 8-bit floats or 4- and 2-bit types), whose type only a model's input says",
            path.display()
        )),
    }
}

impl Npy {
    /// The array as a tensor of `elem`: a typed array must be of `elem`
    /// (or, for a type narrower than a byte, of the byte type holding it,
    /// each value one of `elem`); untyped bytes are read as `elem`, where
    /// they can be one. The error says what the file holds.
    pub fn into_type(self, elem: ElemType) -> Result<Tensor, String> {
        let (descr, shape, fortran, data) = match self {
            Npy::Typed(t) if t.elem == elem => return Ok(t),
            Npy::Typed(t) if byte_storage(elem) == t.elem => {
                return t
                    .narrowed(elem)
                    .map_err(|e| format!("holds a value {elem} has not ({e})"));
            }
            Npy::Typed(t) => return Err(format!("holds {} values", t.elem)),
            Npy::Untyped {
                descr,
                shape,
                fortran,
                data,
            } => (descr, shape, fortran, data),
        };
        let fits = match descr.as_str() {
            "V2" => elem == ElemType::BF16,
            "f1" => elem == ElemType::F8E5M2,
            "V1" => {
                elem.byte_size() == 1 && !matches!(elem, ElemType::I8 | ElemType::U8 | ElemType::I1)
            }
            _ => false,
        };
        if !fits {
            return Err(format!(
                "holds untyped {descr} values (ml_dtypes' bfloat16 is V2, float8_e5m2 f1, its other one-byte types V1)"
            ));
        }
        // ml_dtypes keeps a 4- or 2-bit value in the low bits of its byte,
        // the others zero; a byte with them set is no value of the type.
        let bits = match elem {
            ElemType::I4 | ElemType::U4 | ElemType::F4E2M1FN => 4,
            ElemType::I2 | ElemType::U2 => 2,
            _ => 8,
        };
        if let Some(b) = data.iter().find(|&&b| bits < 8 && b >> bits != 0) {
            return Err(format!(
                "holds the byte {b:#04x}, which is no {elem} value (ml_dtypes keeps all but its low {bits} bits zero)"
            ));
        }
        // Column-major data is row-major data of the reversed shape.
        let stored: Vec<usize> = if fortran {
            shape.iter().rev().copied().collect()
        } else {
            shape
        };
        let shape = IxDyn(&stored);
        let floats = |v: Vec<f64>| {
            Tensor::float(
                elem,
                ArrayD::from_shape_vec(shape.clone(), v).expect("sized"),
            )
        };
        let t = match elem {
            ElemType::BF16 => floats(
                data.chunks_exact(2)
                    .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f64())
                    .collect(),
            ),
            ElemType::I4 | ElemType::U4 | ElemType::I2 | ElemType::U2 => Tensor::int(
                elem,
                ArrayD::from_shape_vec(
                    shape,
                    data.iter().map(|&b| wrap_int(b as i64, elem)).collect(),
                )
                .expect("sized"),
            ),
            e => {
                let f = MiniFloat::of(e).expect("the other one-byte types are minifloats");
                floats(data.iter().map(|&b| f.from_bits(b)).collect())
            }
        };
        Ok(if fortran { column_major(t) } else { t })
    }
}

/// A tensor read in column-major order (its axes reversed) put back in
/// its own shape.
fn column_major(t: Tensor) -> Tensor {
    let data = match t.data() {
        TensorData::Float(a) => TensorData::Float(a.clone().reversed_axes()),
        TensorData::Int(a) => TensorData::Int(a.clone().reversed_axes()),
        TensorData::Bool(a) => TensorData::Bool(a.clone().reversed_axes()),
    };
    Tensor::rearranged(&t, data)
}

/// How to save an array of `elem` where numpy has no such type (empty
/// where it has).
pub fn ml_dtypes_hint(elem: ElemType) -> String {
    let name = match elem {
        ElemType::BF16 => "bfloat16",
        ElemType::F8E4M3FN => "float8_e4m3fn",
        ElemType::F8E4M3FNUZ => "float8_e4m3fnuz",
        ElemType::F8E5M2 => "float8_e5m2",
        ElemType::F8E5M2FNUZ => "float8_e5m2fnuz",
        ElemType::F4E2M1FN => "float4_e2m1fn",
        ElemType::I4 => "int4",
        ElemType::U4 => "uint4",
        ElemType::I2 => "int2",
        ElemType::U2 => "uint2",
        _ => return String::new(),
    };
    format!(" (save it with np.save(path, x.astype(ml_dtypes.{name})))")
}

/// The numpy type of `elem`: byte order and kind, and the bytes of one.
fn descr_of(elem: ElemType) -> (&'static str, usize) {
    use ElemType as E;
    match elem {
        E::F64 => ("<f8", 8),
        E::F32 => ("<f4", 4),
        E::F16 => ("<f2", 2),
        E::BF16 => ("<V2", 2),
        E::I64 => ("<i8", 8),
        E::I32 => ("<i4", 4),
        E::I16 => ("<i2", 2),
        E::I8 => ("|i1", 1),
        E::U64 => ("<u8", 8),
        E::U32 => ("<u4", 4),
        E::U16 => ("<u2", 2),
        E::U8 => ("|u1", 1),
        E::I1 => ("|b1", 1),
        // ml_dtypes' one-byte types, untyped; float8_e5m2 too, which
        // ml_dtypes saves as `<f1`, a type np.load refuses.
        _ => ("<V1", 1),
    }
}

/// The type a typed descr (kind and size, byte order apart) names.
fn elem_of(kind: char, size: usize) -> Option<ElemType> {
    use ElemType as E;
    Some(match (kind, size) {
        ('f', 8) => E::F64,
        ('f', 4) => E::F32,
        ('f', 2) => E::F16,
        ('i', 8) => E::I64,
        ('i', 4) => E::I32,
        ('i', 2) => E::I16,
        ('i', 1) => E::I8,
        ('u', 8) => E::U64,
        ('u', 4) => E::U32,
        ('u', 2) => E::U16,
        ('u', 1) => E::U8,
        ('b', 1) => E::I1,
        _ => return None,
    })
}

/// A `.npy` header: numpy writes a Python dict literal of three keys.
struct Header {
    descr: String,
    fortran: bool,
    shape: Vec<usize>,
}

/// A value of the header's dict.
enum Literal {
    Text(String),
    Flag(bool),
    Sizes(Vec<usize>),
}

/// Parses the header's dict as the literal it is (what `np.load` accepts
/// of Python's syntax): strings in either quotes, `True`/`False`, tuples
/// of sizes; each of `descr`, `fortran_order` and `shape` once, no other
/// key. A list as `descr` is a structured array.
fn parse_header(text: &str) -> Result<Header, String> {
    let mut rest = text.trim_start();
    if !rest.starts_with('{') {
        return Err("its header is not a dict".into());
    }
    rest = rest[1..].trim_start();
    let (mut descr, mut fortran, mut shape) = (None, None, None);
    loop {
        if let Some(after) = rest.strip_prefix('}') {
            rest = after;
            break;
        }
        let key = match literal(&mut rest)? {
            Literal::Text(k) => k,
            _ => return Err("its header has a key that is not a string".into()),
        };
        rest = rest.trim_start();
        rest = rest
            .strip_prefix(':')
            .ok_or_else(|| format!("its header's '{key}' has no value"))?
            .trim_start();
        if key == "descr" && rest.starts_with('[') {
            return Err("it holds a structured array, which ircc does not read".into());
        }
        let value = literal(&mut rest)?;
        let again = match (key.as_str(), value) {
            ("descr", Literal::Text(d)) => descr.replace(d).is_some(),
            ("fortran_order", Literal::Flag(f)) => fortran.replace(f).is_some(),
            ("shape", Literal::Sizes(d)) => shape.replace(d).is_some(),
            ("descr" | "fortran_order" | "shape", _) => {
                return Err(format!(
                    "its header's '{key}' is not a value numpy writes there"
                ));
            }
            (other, _) => {
                return Err(format!(
                    "its header has a key '{other}' numpy does not write"
                ));
            }
        };
        if again {
            return Err(format!("its header gives '{key}' twice"));
        }
        rest = rest.trim_start();
        if let Some(after) = rest.strip_prefix(',') {
            rest = after.trim_start();
        } else if !rest.starts_with('}') {
            return Err("its header's dict is cut short".into());
        }
    }
    if !rest.trim().is_empty() {
        return Err("its header has text after the dict".into());
    }
    match (descr, fortran, shape) {
        (Some(descr), Some(fortran), Some(shape)) => Ok(Header {
            descr,
            fortran,
            shape,
        }),
        _ => Err("its header lacks one of 'descr', 'fortran_order' and 'shape'".into()),
    }
}

/// The literal at the start of `rest` (a string, a flag or a tuple of
/// sizes), which it moves past.
fn literal(rest: &mut &str) -> Result<Literal, String> {
    let text = *rest;
    if let Some(quote) = text.chars().next().filter(|c| *c == '\'' || *c == '"') {
        let end = text[1..]
            .find(quote)
            .ok_or("its header has a string with no end")?;
        *rest = &text[end + 2..];
        return Ok(Literal::Text(text[1..end + 1].to_string()));
    }
    for (word, flag) in [("True", true), ("False", false)] {
        if let Some(after) = text.strip_prefix(word) {
            *rest = after;
            return Ok(Literal::Flag(flag));
        }
    }
    let inner = text
        .strip_prefix('(')
        .ok_or("its header has a value numpy does not write")?;
    let end = inner
        .find(')')
        .ok_or("its header has a tuple with no end")?;
    *rest = &inner[end + 1..];
    let items: Vec<&str> = inner[..end].split(',').map(str::trim).collect();
    // `(3,)` and `()`: a trailing comma, or nothing.
    let items = match items.split_last() {
        Some((&"", first)) => first,
        _ => &items[..],
    };
    items
        .iter()
        .map(|d| {
            d.parse::<usize>()
                .map_err(|_| format!("its shape holds '{d}', which is not a size"))
        })
        .collect::<Result<_, _>>()
        .map(Literal::Sizes)
}

/// The element type (`descr`) and shape a `.npy` file's header gives,
/// read without its data: a reader can refuse a file of another shape
/// before decoding it.
pub fn read_npy_shape(path: &Path) -> Result<(String, Vec<usize>), String> {
    let bytes = map_file(path)?;
    let (h, _) = split(&bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok((h.descr, h.shape))
}

/// A file's header, parsed, and its data.
fn split(bytes: &[u8]) -> Result<(Header, &[u8]), String> {
    if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
        return Err("not a .npy file (no \\x93NUMPY magic)".into());
    }
    let (len, start): (usize, usize) = match (bytes[6], bytes[7]) {
        (1, 0) => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        (2 | 3, 0) if bytes.len() >= 12 => (
            u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
            12,
        ),
        (major, minor) => {
            return Err(format!(
                "not a .npy file of a version numpy writes ({major}.{minor})"
            ));
        }
    };
    let header = bytes
        .get(start..start.saturating_add(len))
        .ok_or("the header is longer than the file")?;
    let header = std::str::from_utf8(header).map_err(|_| "the header is not text")?;
    Ok((parse_header(header)?, &bytes[start + len..]))
}

fn parse(bytes: &[u8]) -> Result<Npy, String> {
    let (
        Header {
            descr,
            fortran,
            shape,
        },
        data,
    ) = split(bytes)?;
    let descr = descr.as_str();
    let shape_text = format!("{shape:?}");
    let mut chars = descr.chars();
    let (order, kind) = (chars.next().unwrap_or('?'), chars.next().unwrap_or('?'));
    let size: usize = chars
        .as_str()
        .parse()
        .map_err(|_| format!("its type {descr} is not one numpy writes"))?;
    if matches!(kind, 'U' | 'S' | 'O' | 'a') {
        return Err(format!(
            "holds strings or objects ({descr}): ircc has no string tensors"
        ));
    }
    let count = shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .filter(|&n| n as u64 <= ircc_core::limits::MAX_ELEMENTS as u64)
        .ok_or_else(|| format!("its shape {shape_text} is too large"))?;
    if count.checked_mul(size) != Some(data.len()) {
        return Err(format!(
            "its header says {count} elements of {size} bytes ({descr}, shape {shape_text}), but {} bytes follow",
            data.len()
        ));
    }
    // Fortran order is the row-major order of the reversed shape.
    let stored: Vec<usize> = if fortran {
        shape.iter().rev().copied().collect()
    } else {
        shape.clone()
    };

    if kind == 'V' || descr == "<f1" {
        let untyped = if kind == 'V' {
            format!("V{size}")
        } else {
            "f1".into()
        };
        return Ok(Npy::Untyped {
            descr: untyped,
            shape,
            fortran,
            data: data.to_vec(),
        });
    }
    let elem = elem_of(kind, size).ok_or_else(|| {
        format!("holds {descr} values, a type ircc has none of (complex or long double?)")
    })?;
    // Multi-byte values in big-endian order are reversed into little.
    let swap = order == '>' && size > 1;
    let word = |c: &[u8]| -> [u8; 8] {
        let mut w = [0u8; 8];
        w[..size].copy_from_slice(c);
        if swap {
            w[..size].reverse();
        }
        w
    };
    let dim = IxDyn(&stored);
    let tensor = match elem {
        ElemType::I1 => Tensor::bool(
            ArrayD::from_shape_vec(dim, data.iter().map(|&b| b != 0).collect()).expect("sized"),
        ),
        e if e.is_float() => {
            let v = data
                .chunks_exact(size)
                .map(|c| {
                    let w = word(c);
                    match size {
                        8 => f64::from_le_bytes(w),
                        4 => f32::from_le_bytes([w[0], w[1], w[2], w[3]]) as f64,
                        _ => half::f16::from_le_bytes([w[0], w[1]]).to_f64(),
                    }
                })
                .collect();
            Tensor::float(e, ArrayD::from_shape_vec(dim, v).expect("sized"))
        }
        e => {
            let v = data
                .chunks_exact(size)
                .map(|c| wrap_int(i64::from_le_bytes(word(c)), e))
                .collect();
            Tensor::int(e, ArrayD::from_shape_vec(dim, v).expect("sized"))
        }
    };
    Ok(Npy::Typed(if fortran {
        column_major(tensor)
    } else {
        tensor
    }))
}

/// The bytes of `t`'s elements as [`descr_of`] its type stores them.
fn element_bytes(t: &Tensor) -> Vec<u8> {
    use ElemType as E;
    match (t.data(), t.elem) {
        (TensorData::Float(a), E::F64) => a.iter().flat_map(|x| x.to_le_bytes()).collect(),
        (TensorData::Float(a), E::F32) => {
            a.iter().flat_map(|&x| (x as f32).to_le_bytes()).collect()
        }
        (TensorData::Float(a), E::F16) => a
            .iter()
            .flat_map(|&x| half::f16::from_f64(x).to_le_bytes())
            .collect(),
        (TensorData::Float(a), E::BF16) => a
            .iter()
            .flat_map(|&x| half::bf16::from_f64(x).to_le_bytes())
            .collect(),
        (TensorData::Float(a), e) => {
            let f = MiniFloat::of(e).expect("the other floats are minifloats");
            a.iter().map(|&x| f.to_bits(x)).collect()
        }
        (TensorData::Int(a), e) => {
            let size = descr_of(e).1;
            let mask: u64 = match e {
                E::I4 | E::U4 => 0x0F,
                E::I2 | E::U2 => 0x03,
                _ => u64::MAX,
            };
            a.iter()
                .flat_map(|&x| ((x as u64) & mask).to_le_bytes()[..size].to_vec())
                .collect()
        }
        (TensorData::Bool(a), _) => a.iter().map(|&b| b as u8).collect(),
    }
}

/// Writes a tensor as `.npy` in its own type: numpy's where it has one,
/// else ml_dtypes' untyped form (see the module's note).
pub fn write_npy(path: &Path, t: &Tensor) -> Result<(), String> {
    let (descr, _) = descr_of(t.elem);
    let dims: Vec<String> = t.shape().iter().map(|d| d.to_string()).collect();
    let shape = match dims.len() {
        1 => format!("({},)", dims[0]),
        _ => format!("({})", dims.join(", ")),
    };
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    // The magic, version and length take ten bytes; the whole header
    // ends in a newline at a multiple of 64 bytes.
    let padded = (10 + header.len() + 1).div_ceil(64) * 64;
    header.push_str(&" ".repeat(padded - 10 - header.len() - 1));
    header.push('\n');
    // Written beside the file, then renamed over it (a link at `path` is
    // replaced, never followed).
    ircc_core::files::write_replacing(path, |file| {
        let mut w = std::io::BufWriter::new(file);
        let write = |w: &mut std::io::BufWriter<&mut std::fs::File>| -> std::io::Result<()> {
            w.write_all(b"\x93NUMPY\x01\x00")?;
            w.write_all(&(header.len() as u16).to_le_bytes())?;
            w.write_all(header.as_bytes())?;
            w.write_all(&element_bytes(t))?;
            w.flush()
        };
        write(&mut w).map_err(|e| format!("cannot write {}: {e}", path.display()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tensor(elem: ElemType, values: &[f64]) -> Tensor {
        let shape = IxDyn(&[2, values.len() / 2]);
        match elem {
            ElemType::I1 => Tensor::bool(
                ArrayD::from_shape_vec(shape, values.iter().map(|&v| v != 0.0).collect()).unwrap(),
            ),
            e if e.is_float() => {
                Tensor::float(e, ArrayD::from_shape_vec(shape, values.to_vec()).unwrap())
            }
            e => Tensor::int(
                e,
                ArrayD::from_shape_vec(shape, values.iter().map(|&v| v as i64).collect()).unwrap(),
            ),
        }
    }

    #[test]
    fn every_type_is_written_and_read_back_as_itself() {
        let dir = std::env::temp_dir().join(format!("ircc-npy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for elem in ElemType::ALL {
            let t = tensor(elem, &[1.0, -1.0, 0.5, 0.0, 1.5, -2.0]);
            let path = dir.join(format!("{elem}.npy"));
            write_npy(&path, &t).unwrap();
            let back = read_npy_file(&path).unwrap().into_type(elem).unwrap();
            assert_eq!(back, t, "{elem}");
            let bytes = std::fs::read(&path).unwrap();
            let header_end = 10 + u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
            assert_eq!(header_end % 64, 0, "{elem}");
        }
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn ml_dtypes_bytes_are_read_as_the_type_asked_for() {
        // ml_dtypes' np.save of [1, -1, 0.5] as bfloat16, and of
        // [1, -1, 1] as int4 (-1 is 0x0F: the low four bits).
        let header = |descr: &str| {
            let mut h = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': (3,), }}");
            h.push_str(&" ".repeat(128 - 10 - h.len() - 1));
            h.push('\n');
            let mut b = b"\x93NUMPY\x01\x00".to_vec();
            b.extend((h.len() as u16).to_le_bytes());
            b.extend(h.as_bytes());
            b
        };
        let mut bf16 = header("<V2");
        bf16.extend([0x80, 0x3F, 0x80, 0xBF, 0x00, 0x3F]);
        let t = parse(&bf16).unwrap().into_type(ElemType::BF16).unwrap();
        assert_eq!(
            t.to_f64().iter().copied().collect::<Vec<_>>(),
            vec![1.0, -1.0, 0.5]
        );
        let mut int4 = header("<V1");
        int4.extend([0x01, 0x0F, 0x01]);
        let t = parse(&int4).unwrap().into_type(ElemType::I4).unwrap();
        assert_eq!(
            t.to_i64().iter().copied().collect::<Vec<_>>(),
            vec![1, -1, 1]
        );
        // Bytes of one type are not another's.
        let err = parse(&int4).unwrap().into_type(ElemType::BF16).unwrap_err();
        assert!(err.contains("untyped V1"), "{err}");
        let err = parse(&bf16).unwrap().into_type(ElemType::F32).unwrap_err();
        assert!(err.contains("untyped V2"), "{err}");
        assert!(ml_dtypes_hint(ElemType::I4).contains("ml_dtypes.int4"));
    }

    #[test]
    fn lying_or_foreign_files_are_refused() {
        let file = |h: &str, data: &[u8]| {
            let mut b = b"\x93NUMPY\x01\x00".to_vec();
            b.extend((h.len() as u16).to_le_bytes());
            b.extend(h.as_bytes());
            b.extend(data);
            b
        };
        // A shape far larger than the data, refused before anything is
        // allocated for it.
        let huge = file(
            "{'descr': '<f4', 'fortran_order': False, 'shape': (1000000, 1000000), }",
            &[0; 8],
        );
        let err = parse(&huge).err().unwrap();
        assert!(
            err.contains("1000000000000 elements of 4 bytes") && err.contains("8 bytes follow"),
            "{err}"
        );
        let short = file(
            "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }",
            &[0; 8],
        );
        assert!(parse(&short).err().unwrap().contains("3 elements"));
        let strings = file(
            "{'descr': '<U2', 'fortran_order': False, 'shape': (1,), }",
            &[0; 8],
        );
        let err = parse(&strings).err().unwrap();
        assert!(err.contains("string"), "{err}");
        let mut cut = file(
            "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }",
            &[],
        );
        cut[8] = 0xff;
        assert!(parse(&cut).err().unwrap().contains("longer than the file"));
        assert!(
            parse(b"PK\x03\x04 not npy")
                .err()
                .unwrap()
                .contains("magic")
        );
    }

    /// A `.npy` file of `header` (padded as numpy pads it) and `data`.
    fn with_header(header: &str, data: &[u8]) -> Vec<u8> {
        let mut h = header.to_string();
        h.push_str(&" ".repeat((10 + h.len() + 1).div_ceil(64) * 64 - 10 - h.len() - 1));
        h.push('\n');
        let mut b = b"\x93NUMPY\x01\x00".to_vec();
        b.extend((h.len() as u16).to_le_bytes());
        b.extend(h.as_bytes());
        b.extend(data);
        b
    }

    #[test]
    fn the_header_is_read_as_the_dict_literal_it_is() {
        let f32s: Vec<u8> = (0..6).flat_map(|i| (i as f32).to_le_bytes()).collect();
        let shape = |h: &str| match parse(&with_header(h, &f32s)) {
            Ok(Npy::Typed(t)) => Ok(t.shape().to_vec()),
            Ok(_) => Err("untyped".to_string()),
            Err(e) => Err(e),
        };
        // Either quotes, as Python's literal allows.
        assert_eq!(
            shape(r#"{"descr": "<f4", "fortran_order": False, "shape": (2, 3)}"#),
            Ok(vec![2, 3])
        );
        // A key's text inside another value is not the key.
        let hidden =
            "{'x': \"'shape': (3, 2)\", 'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
        assert!(shape(hidden).unwrap_err().contains("key 'x'"));
        // Every key once, and none numpy does not write.
        let twice = "{'descr': '<f4', 'descr': '<i4', 'fortran_order': False, 'shape': (6,), }";
        assert!(shape(twice).unwrap_err().contains("'descr' twice"));
        let lacking = "{'descr': '<f4', 'shape': (6,), }";
        assert!(shape(lacking).unwrap_err().contains("lacks"));
        let nested = "{'descr': '<f4', 'fortran_order': False, 'shape': ((2,), 3), }";
        assert!(shape(nested).is_err());
        let structured = "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (6,), }";
        assert!(shape(structured).unwrap_err().contains("structured"));
        let mut minor = with_header(
            "{'descr': '<f4', 'fortran_order': False, 'shape': (6,), }",
            &f32s,
        );
        minor[7] = 5;
        assert!(parse(&minor).err().unwrap().contains("1.5"));
    }

    #[test]
    fn untyped_bytes_are_checked_and_read_in_either_order() {
        // ml_dtypes' int4 [[1, -1, 2], [3, -4, 5]] saved in Fortran order.
        let h = "{'descr': '<V1', 'fortran_order': True, 'shape': (2, 3), }";
        let t = parse(&with_header(h, &[1, 3, 0x0F, 0x0C, 2, 5]))
            .unwrap()
            .into_type(ElemType::I4)
            .unwrap();
        assert_eq!(
            t.to_i64().iter().copied().collect::<Vec<_>>(),
            vec![1, -1, 2, 3, -4, 5]
        );
        // A byte with bits above the type's is no value of it.
        let h = "{'descr': '<V1', 'fortran_order': False, 'shape': (2,), }";
        let err = parse(&with_header(h, &[0x21, 0]))
            .unwrap()
            .into_type(ElemType::F4E2M1FN)
            .unwrap_err();
        assert!(err.contains("0x21"), "{err}");
    }

    #[test]
    fn a_written_file_replaces_a_link_instead_of_following_it() {
        let dir = std::env::temp_dir().join(format!("ircc-npy-link-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let victim = dir.join("victim");
        std::fs::write(&victim, "keep").unwrap();
        let out = dir.join("y.npy");
        std::os::unix::fs::symlink(&victim, &out).unwrap();
        write_npy(&out, &tensor(ElemType::F32, &[1.0, 2.0])).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
        assert!(
            !std::fs::symlink_metadata(&out)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn fortran_order_and_big_endian_arrays_read_as_numpy_reads_them() {
        // np.asfortranarray([[1, 2, 3], [4, 5, 6]], '>i2'): columns first.
        let h = "{'descr': '>i2', 'fortran_order': True, 'shape': (2, 3), }";
        let mut b = b"\x93NUMPY\x01\x00".to_vec();
        b.extend((h.len() as u16).to_le_bytes());
        b.extend(h.as_bytes());
        for v in [1i16, 4, 2, 5, 3, 6] {
            b.extend(v.to_be_bytes());
        }
        let Npy::Typed(t) = parse(&b).unwrap() else {
            panic!("typed")
        };
        assert_eq!(t.elem, ElemType::I16);
        assert_eq!(t.shape(), &[2, 3]);
        assert_eq!(
            t.to_i64().iter().copied().collect::<Vec<_>>(),
            vec![1, 2, 3, 4, 5, 6]
        );
    }
}
