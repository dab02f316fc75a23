//! numpy arrays to ircc's tensors and back, each in its own type: a model's
//! f16 input takes a float16 array, its f16 output gives one.

use half::f16;
use ircc_core::{ElemType, Tensor, TensorType};
use ndarray::ArrayD;
use numpy::{
    Element, IntoPyArray, PyArrayDescrMethods, PyArrayDyn, PyArrayMethods, PyUntypedArray,
    PyUntypedArrayMethods,
};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;

use crate::raise;
use ircc::api::ErrorKind;

/// The array `value` is and the ircc type of its elements: a C-contiguous
/// numpy array of a type ircc has, else an error naming `what` ("input
/// 'x"). Nothing is copied.
pub fn checked_array<'py>(
    value: &Bound<'py, PyAny>,
    what: &str,
) -> PyResult<(Bound<'py, PyUntypedArray>, ElemType)> {
    let py = value.py();
    let Ok(array) = value.cast::<PyUntypedArray>() else {
        return Err(PyTypeError::new_err(format!(
            "{what} must be a numpy.ndarray, not {} (numpy.asarray makes one)",
            value.get_type().name()?
        )));
    };
    if !array.is_c_contiguous() {
        return Err(raise(
            py,
            ErrorKind::Input,
            format!(
                "{what} is not C-contiguous (a view with strides): pass numpy.ascontiguousarray of it"
            ),
        ));
    }
    let dtype = array.dtype();
    let is = |d: Bound<'_, numpy::PyArrayDescr>| dtype.is_equiv_to(&d);
    let elem = if is(numpy::dtype::<f32>(py)) {
        ElemType::F32
    } else if is(numpy::dtype::<f16>(py)) {
        ElemType::F16
    } else if is(numpy::dtype::<f64>(py)) {
        ElemType::F64
    } else if is(numpy::dtype::<i64>(py)) {
        ElemType::I64
    } else if is(numpy::dtype::<i32>(py)) {
        ElemType::I32
    } else if is(numpy::dtype::<i16>(py)) {
        ElemType::I16
    } else if is(numpy::dtype::<i8>(py)) {
        ElemType::I8
    } else if is(numpy::dtype::<u64>(py)) {
        ElemType::U64
    } else if is(numpy::dtype::<u32>(py)) {
        ElemType::U32
    } else if is(numpy::dtype::<u16>(py)) {
        ElemType::U16
    } else if is(numpy::dtype::<u8>(py)) {
        ElemType::U8
    } else if is(numpy::dtype::<bool>(py)) {
        ElemType::I1
    } else {
        let hint = if dtype.byteorder() == b'>' {
            " (big-endian: pass .astype(its dtype.newbyteorder('<')))"
        } else {
            ""
        };
        return Err(raise(
            py,
            ErrorKind::Input,
            format!("{what} has dtype {dtype}, which is no type of ircc's{hint}"),
        ));
    };
    Ok((array.clone(), elem))
}

/// The type of the array `checked_array` gave.
pub fn type_of(array: &Bound<'_, PyUntypedArray>, elem: ElemType) -> TensorType {
    TensorType::new(array.shape().iter().map(|&d| d as i64).collect(), elem)
}

/// The tensor a [`checked_array`] holds, copied out of it.
pub fn to_tensor(array: &Bound<'_, PyUntypedArray>, elem: ElemType) -> PyResult<Tensor> {
    fn floats<T: Element + Copy>(
        v: &Bound<'_, PyUntypedArray>,
        f: impl Fn(T) -> f64,
    ) -> PyResult<ArrayD<f64>> {
        Ok(v.cast::<PyArrayDyn<T>>()?.readonly().as_array().mapv(f))
    }
    fn ints<T: Element + Copy>(
        v: &Bound<'_, PyUntypedArray>,
        f: impl Fn(T) -> i64,
    ) -> PyResult<ArrayD<i64>> {
        Ok(v.cast::<PyArrayDyn<T>>()?.readonly().as_array().mapv(f))
    }
    Ok(match elem {
        ElemType::F32 => Tensor::float(elem, floats(array, |x: f32| f64::from(x))?),
        ElemType::F16 => Tensor::float(elem, floats(array, |x: f16| x.to_f64())?),
        ElemType::F64 => Tensor::float(elem, floats(array, |x: f64| x)?),
        ElemType::I64 => Tensor::int(elem, ints(array, |x: i64| x)?),
        ElemType::I32 => Tensor::int(elem, ints(array, |x: i32| i64::from(x))?),
        ElemType::I16 => Tensor::int(elem, ints(array, |x: i16| i64::from(x))?),
        ElemType::I8 => Tensor::int(elem, ints(array, |x: i8| i64::from(x))?),
        // Held as its bit pattern, as ircc holds u64.
        ElemType::U64 => Tensor::int(elem, ints(array, |x: u64| x as i64)?),
        ElemType::U32 => Tensor::int(elem, ints(array, |x: u32| i64::from(x))?),
        ElemType::U16 => Tensor::int(elem, ints(array, |x: u16| i64::from(x))?),
        ElemType::U8 => Tensor::int(elem, ints(array, |x: u8| i64::from(x))?),
        ElemType::I1 => {
            let v = array.cast::<PyArrayDyn<bool>>()?.readonly();
            Tensor::bool(v.as_array().to_owned())
        }
        other => {
            return Err(PyTypeError::new_err(format!(
                "numpy has no dtype for {}",
                other.name()
            )));
        }
    })
}

/// `t` as a numpy array of its type; `what` names it in errors.
pub fn to_numpy<'py>(py: Python<'py>, t: &Tensor, what: &str) -> PyResult<Bound<'py, PyAny>> {
    let float = || t.to_f64();
    let int = || t.to_i64();
    let array = match t.elem {
        ElemType::F32 => float().mapv(|x| x as f32).into_pyarray(py).into_any(),
        ElemType::F16 => float().mapv(f16::from_f64).into_pyarray(py).into_any(),
        ElemType::F64 => float().into_pyarray(py).into_any(),
        ElemType::I64 => int().into_pyarray(py).into_any(),
        ElemType::I32 => int().mapv(|x| x as i32).into_pyarray(py).into_any(),
        ElemType::I16 => int().mapv(|x| x as i16).into_pyarray(py).into_any(),
        ElemType::I8 => int().mapv(|x| x as i8).into_pyarray(py).into_any(),
        ElemType::U64 => int().mapv(|x| x as u64).into_pyarray(py).into_any(),
        ElemType::U32 => int().mapv(|x| x as u32).into_pyarray(py).into_any(),
        ElemType::U16 => int().mapv(|x| x as u16).into_pyarray(py).into_any(),
        ElemType::U8 => int().mapv(|x| x as u8).into_pyarray(py).into_any(),
        ElemType::I1 => match t.as_bool() {
            Some(b) => b.clone().into_pyarray(py).into_any(),
            None => t.to_i64().mapv(|x| x != 0).into_pyarray(py).into_any(),
        },
        other => {
            return Err(raise(
                py,
                ErrorKind::Run,
                format!("{what} is {}, which numpy has no dtype for", other.name()),
            ));
        }
    };
    Ok(array)
}

/// The numpy dtype name of `elem`, or ircc's name where numpy has none.
pub fn dtype_name(elem: ElemType) -> &'static str {
    match elem {
        ElemType::F32 => "float32",
        ElemType::F16 => "float16",
        ElemType::F64 => "float64",
        ElemType::I64 => "int64",
        ElemType::I32 => "int32",
        ElemType::I16 => "int16",
        ElemType::I8 => "int8",
        ElemType::U64 => "uint64",
        ElemType::U32 => "uint32",
        ElemType::U16 => "uint16",
        ElemType::U8 => "uint8",
        ElemType::I1 => "bool",
        other => other.name(),
    }
}
