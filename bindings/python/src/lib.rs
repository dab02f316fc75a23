//! `ircc._ircc`: the native module of the Python package `ircc`, which
//! python/ircc/__init__.py re-exports beside its error classes. It wraps
//! ircc's library API (`ircc::api`) with numpy arrays in and out. The GIL
//! is released while compiling and while a device runs; a model's device
//! is set up once and taken in turn by the threads that run it.

mod arrays;

use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

use ircc::api::{self, ErrorKind};
use ircc::{AttentionTemplate, Backend, KernelArgs, OnnxArgs, PipelineArgs, Precision};
use ircc_core::TensorType;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple, PyType};

/// The exception of `ircc` (python/ircc/__init__.py) for `kind`, with
/// `message`.
pub(crate) fn raise(py: Python<'_>, kind: ErrorKind, message: String) -> PyErr {
    let class = match kind {
        ErrorKind::Compile => "CompileError",
        ErrorKind::Input => "InputError",
        ErrorKind::Run => "RunError",
        ErrorKind::Check => "CheckError",
    };
    let found = py
        .import("ircc")
        .and_then(|m| m.getattr(class))
        .and_then(|c| Ok(c.cast_into::<PyType>()?));
    match found {
        Ok(class) => PyErr::from_type(class, message),
        Err(e) => e,
    }
}

fn raised(py: Python<'_>) -> impl Fn(api::Error) -> PyErr + '_ {
    move |e| raise(py, e.kind, e.to_string())
}

/// What a panic said.
fn panic_message(p: &(dyn std::any::Any + Send)) -> &str {
    p.downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| p.downcast_ref::<&str>().copied())
        .unwrap_or("a panic")
}

/// Runs `f`, turning a panic into an error of `kind` so that none reaches
/// Python (a panic is a bug of ircc's).
fn guarded<T>(kind: ErrorKind, f: impl FnOnce() -> Result<T, api::Error>) -> Result<T, api::Error> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|p| {
        Err(api::Error {
            kind,
            message: format!(
                "ircc failed ({}); this is a bug of ircc's, please report it",
                panic_message(p.as_ref())
            ),
        })
    })
}

/// A JSON value as Python data (dicts, lists, numbers, strings).
fn to_python<'py>(py: Python<'py>, value: &serde_json::Value) -> PyResult<Bound<'py, PyAny>> {
    py.import("json")?
        .call_method1("loads", (value.to_string(),))
}

fn enum_value<T: clap::ValueEnum>(what: &str, value: Option<&str>) -> PyResult<Option<T>> {
    value
        .map(|v| {
            T::from_str(v, false).map_err(|_| {
                let known: Vec<String> = T::value_variants()
                    .iter()
                    .filter_map(|x| x.to_possible_value())
                    .map(|p| p.get_name().to_string())
                    .collect();
                PyValueError::new_err(format!("{what} '{v}' is none of {}", known.join(", ")))
            })
        })
        .transpose()
}

/// The command line's `--input-shape NAME=1x3x224x224` of each entry.
fn shape_args(shapes: Option<Bound<'_, PyDict>>) -> PyResult<Vec<String>> {
    let Some(shapes) = shapes else {
        return Ok(Vec::new());
    };
    shapes
        .iter()
        .map(|(name, shape)| {
            let name: String = name.extract()?;
            let dims: Vec<i64> = shape.extract().map_err(|_| {
                PyTypeError::new_err(format!(
                    "input_shapes['{name}'] must be a sequence of integers"
                ))
            })?;
            let dims: Vec<String> = dims.iter().map(i64::to_string).collect();
            Ok(format!("{name}={}", dims.join("x")))
        })
        .collect()
}

fn pipeline_args(
    pipeline: Option<String>,
    passes: Option<String>,
    device: Option<String>,
    spec_dir: Option<PathBuf>,
    tuning_db: Option<PathBuf>,
    remarks: bool,
) -> PyResult<PipelineArgs> {
    if pipeline.is_some() && passes.is_some() {
        return Err(PyValueError::new_err("give pipeline or passes, not both"));
    }
    Ok(PipelineArgs {
        pipeline,
        passes,
        device,
        spec_dir,
        tuning_db,
        remarks,
        quiet: true,
        ..PipelineArgs::default()
    })
}

/// A model compiled for a backend, its device set up once: made by
/// `ircc.compile` or `ircc.load`. Threads may share it (its runs take the
/// device in turn); a process forked from the one that made it cannot run
/// it (compile it in the child, or use multiprocessing's "spawn").
#[pyclass(module = "ircc", name = "Model", frozen, weakref)]
struct Model {
    /// None once closed.
    inner: Mutex<Option<api::Model>>,
    stats: OnceLock<serde_json::Value>,
    /// What the model's accessors give, read once: they answer while
    /// another thread runs it.
    inputs: Vec<(String, TensorType)>,
    outputs: Vec<(String, TensorType)>,
    backend: Backend,
    device: Option<String>,
    adapter: Option<(String, String)>,
    remarks: String,
    /// The process that set the device up.
    pid: u32,
    /// What must live as long as the model: the temporary folder of a
    /// model given as bytes.
    _keep: Option<Py<PyAny>>,
}

impl Drop for Model {
    fn drop(&mut self) {
        let taken = self
            .inner
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        self.release(taken);
    }
}

impl Model {
    /// Frees a model taken out of its lock, except in a forked child,
    /// whose copy of the device is not its own: freeing it there could
    /// wait on queues that never run, so it is left to the process's end.
    fn release(&self, model: Option<api::Model>) {
        if std::process::id() == self.pid {
            drop(model);
        } else {
            std::mem::forget(model);
        }
    }

    fn new(model: api::Model, keep: Option<Py<PyAny>>) -> Model {
        Model {
            inputs: model.inputs().to_vec(),
            outputs: model.outputs().to_vec(),
            backend: model.backend(),
            device: model.device().map(|(d, _)| d),
            adapter: model.adapter(),
            remarks: model.remarks().to_string(),
            pid: std::process::id(),
            inner: Mutex::new(Some(model)),
            stats: OnceLock::new(),
            _keep: keep,
        }
    }

    /// Runs `f` on the model, locked; an error once closed, or in a
    /// forked child (a device's queues do not survive a fork: a run there
    /// would wait forever). A panic in `f` (a bug of ircc's) may have left
    /// the model half changed: it is closed, and the error says so.
    fn with<T>(
        &self,
        f: impl FnOnce(&mut api::Model) -> Result<T, api::Error>,
    ) -> Result<T, api::Error> {
        let run = |message: String| api::Error {
            kind: ErrorKind::Run,
            message,
        };
        if std::process::id() != self.pid {
            return Err(run(format!(
                "this model was set up in process {}, and this is a process forked from it, where its device cannot run: compile or load the model in this process (or start processes with multiprocessing's \"spawn\")",
                self.pid
            )));
        }
        // A lock poisoned by a panic is taken as it is: the panic closed
        // the model.
        let mut guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let model = guard
            .as_mut()
            .ok_or_else(|| run("the model is closed".into()))?;
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(model))) {
            Ok(result) => result,
            Err(p) => {
                // Not dropped: freeing what a panic left may panic again.
                std::mem::forget(guard.take());
                Err(run(format!(
                    "ircc failed ({}); this is a bug of ircc's, please report it. The model is closed",
                    panic_message(p.as_ref())
                )))
            }
        }
    }

    fn tensors<'py>(
        py: Python<'py>,
        list: &[(String, TensorType)],
    ) -> PyResult<Bound<'py, PyList>> {
        let items: Vec<Bound<'py, PyDict>> = list
            .iter()
            .map(|(name, t)| {
                let d = PyDict::new(py);
                d.set_item("name", name)?;
                d.set_item("shape", PyTuple::new(py, &t.shape)?)?;
                d.set_item("dtype", arrays::dtype_name(t.elem))?;
                Ok(d)
            })
            .collect::<PyResult<_>>()?;
        PyList::new(py, items)
    }

    /// `run`'s inputs as (name, tensor) pairs, named where given by name;
    /// each array's type is checked against the input it is given for
    /// before it is copied (a wrong shape of gigabytes is refused, not
    /// allocated).
    fn given(
        &self,
        inputs: &Bound<'_, PyAny>,
    ) -> PyResult<Vec<(Option<String>, ircc_core::Tensor)>> {
        let py = inputs.py();
        let mut arrays = Vec::new();
        if let Ok(dict) = inputs.cast::<PyDict>() {
            for (k, v) in dict.iter() {
                let name: String = k
                    .extract()
                    .map_err(|_| PyTypeError::new_err("input names must be strings"))?;
                let what = format!("input '{name}'");
                let (array, elem) = arrays::checked_array(&v, &what)?;
                let wanted = self.inputs.iter().find(|(n, _)| *n == name).map(|(_, t)| t);
                arrays.push((Some(name), what, array, elem, wanted));
            }
        } else if inputs.cast::<numpy::PyUntypedArray>().is_ok()
            || inputs.cast::<PyList>().is_ok()
            || inputs.cast::<PyTuple>().is_ok()
        {
            let values: Vec<Bound<'_, PyAny>> = if inputs.cast::<numpy::PyUntypedArray>().is_ok() {
                vec![inputs.clone()]
            } else {
                inputs.try_iter()?.collect::<PyResult<_>>()?
            };
            let positional = values.len() == self.inputs.len();
            for (i, v) in values.iter().enumerate() {
                let (what, wanted) = match self.inputs.get(i).filter(|_| positional) {
                    Some((n, t)) => (format!("input '{n}'"), Some(t)),
                    None => (format!("input {i}"), None),
                };
                let (array, elem) = arrays::checked_array(v, &what)?;
                arrays.push((None, what, array, elem, wanted));
            }
        } else {
            return Err(PyTypeError::new_err(format!(
                "inputs must be a dict of name to numpy.ndarray, a list of arrays or one array, not {}",
                inputs.get_type().name()?
            )));
        }
        arrays
            .into_iter()
            .map(|(name, what, array, elem, wanted)| {
                let given = arrays::type_of(&array, elem);
                if let Some(t) = wanted.filter(|&t| *t != given) {
                    let message = format!("{what} is {t}; the value given is {given}");
                    return Err(raise(py, ErrorKind::Input, message));
                }
                Ok((name, arrays::to_tensor(&array, elem)?))
            })
            .collect()
    }
}

#[pymethods]
impl Model {
    /// Runs the model once. `inputs` is a dict of input name to
    /// numpy array, a sequence of arrays in the order of `inputs`, or one
    /// array for a model of one input; each array of the input's dtype
    /// and shape, C-contiguous. Returns a dict of output name to array,
    /// in the order of `outputs`, each of its output's dtype.
    fn run<'py>(
        &self,
        py: Python<'py>,
        inputs: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let given = self.given(inputs)?;
        let (names, outputs) = py
            .detach(|| {
                self.with(|m| {
                    let ordered = m.arrange(given)?;
                    let names: Vec<String> = m.outputs().iter().map(|(n, _)| n.clone()).collect();
                    Ok((names, m.run(&ordered)?))
                })
            })
            .map_err(raised(py))?;
        let result = PyDict::new(py);
        for (name, t) in names.iter().zip(&outputs) {
            result.set_item(name, arrays::to_numpy(py, t, &format!("output '{name}'"))?)?;
        }
        Ok(result)
    }

    /// Times `runs` runs after `warmup` untimed ones, on `inputs` (as
    /// `run` takes them) or seeded random ones: a dict of median_ms,
    /// p10_ms, p90_ms, the adapter and, where the device times kernels,
    /// per_kernel (each kernel's median_us and, for a compiled model, its
    /// FLOP/s, bytes and place under the roofline) — `ircc bench --json`.
    #[pyo3(signature = (runs = 50, warmup = 5, inputs = None))]
    fn bench<'py>(
        &self,
        py: Python<'py>,
        runs: i64,
        warmup: i64,
        inputs: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        if runs < 1 || warmup < 0 {
            return Err(PyValueError::new_err(format!(
                "runs must be at least 1 and warmup at least 0, not {runs} and {warmup}"
            )));
        }
        let (runs, warmup) = (runs as usize, warmup as usize);
        let given = inputs.map(|i| self.given(i)).transpose()?;
        let report = py
            .detach(|| {
                self.with(|m| {
                    let ordered = given.map(|g| m.arrange(g)).transpose()?;
                    m.bench(ordered.as_deref(), warmup, runs)
                })
            })
            .map_err(raised(py))?;
        to_python(py, &report)
    }

    /// Writes the model's bundle to the folder `path`, as `ircc compile
    /// -o DIR` does; `ircc run DIR` and `ircc.load` run it.
    fn save(&self, py: Python<'_>, path: PathBuf) -> PyResult<()> {
        py.detach(|| self.with(|m| m.save(&path)))
            .map_err(raised(py))
    }

    /// `ircc stats --json` of the model as compiled: kernels, dispatches,
    /// bytes moved, peak memory, the device profile and why (computed on
    /// first use).
    #[getter]
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let stats = match self.stats.get() {
            Some(s) => s.clone(),
            None => {
                let s = py.detach(|| self.with(|m| m.stats())).map_err(raised(py))?;
                self.stats.get_or_init(|| s).clone()
            }
        };
        to_python(py, &stats)
    }

    /// The inputs `run` takes: dicts of name, shape and dtype.
    #[getter]
    fn inputs<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        Model::tensors(py, &self.inputs)
    }

    /// The outputs `run` gives: dicts of name, shape and dtype (a name
    /// two outputs share gets a suffix on the second: `y`, `y_1`).
    #[getter]
    fn outputs<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        Model::tensors(py, &self.outputs)
    }

    /// `reference`, `wgpu` or `opencl`.
    #[getter]
    fn backend(&self) -> &'static str {
        backend_name(self.backend)
    }

    /// The device profile the kernels were made for (`ircc
    /// --list-devices`, or one built from the adapter's limits), or None
    /// for the reference backend.
    #[getter]
    fn device(&self) -> Option<String> {
        self.device.clone()
    }

    /// The adapter the model runs on and the API reaching it, or None
    /// for the reference backend.
    #[getter]
    fn adapter(&self) -> Option<(String, String)> {
        self.adapter.clone()
    }

    /// What the compiler remarked on (with remarks=True: the device
    /// profile chosen and why, layouts, ...), as `--remarks` prints it.
    #[getter]
    fn remarks(&self) -> String {
        self.remarks.clone()
    }

    /// Frees the device's buffers and pipelines; the model cannot run
    /// after. Closing twice does nothing.
    fn close(&self, py: Python<'_>) {
        // In a forked child the lock may be held by a thread the fork left
        // behind; the model is left to the process's end there.
        if std::process::id() != self.pid {
            return;
        }
        let taken = py.detach(|| self.inner.lock().unwrap_or_else(|p| p.into_inner()).take());
        self.release(taken);
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, PyTuple>) {
        self.close(py);
    }

    fn __repr__(&self) -> String {
        let closed = self.inner.try_lock().is_ok_and(|g| g.is_none());
        let ins: Vec<String> = self
            .inputs
            .iter()
            .map(|(n, t)| format!("{n}: {t}"))
            .collect();
        let device = self
            .device
            .as_ref()
            .map_or(String::new(), |d| format!(", device {d}"));
        let state = if closed { ", closed" } else { "" };
        format!(
            "<ircc.Model ({}) on {}{device}{state}>",
            ins.join(", "),
            backend_name(self.backend)
        )
    }
}

fn backend_name(backend: Backend) -> &'static str {
    match backend {
        Backend::Reference => "reference",
        Backend::Wgpu => "wgpu",
        Backend::Opencl => "opencl",
    }
}

/// The native half of `ircc.compile`: `model` is a path (an .onnx file
/// or IR text) or an `ircc.Module`; `keep` lives as long as the model.
#[pyfunction]
#[pyo3(signature = (model, *, backend, pipeline, passes, device, precision, attention, input_shapes, spec_dir, tuning_db, cl_options, remarks, keep))]
#[allow(clippy::too_many_arguments)]
fn compile(
    py: Python<'_>,
    model: &Bound<'_, PyAny>,
    backend: &str,
    pipeline: Option<String>,
    passes: Option<String>,
    device: Option<String>,
    precision: Option<&str>,
    attention: Option<&str>,
    input_shapes: Option<Bound<'_, PyDict>>,
    spec_dir: Option<PathBuf>,
    tuning_db: Option<PathBuf>,
    cl_options: String,
    remarks: bool,
    keep: Option<Py<PyAny>>,
) -> PyResult<Model> {
    let backend = api::backend_named(backend).map_err(raised(py))?;
    let options = api::Options {
        pipeline: pipeline_args(pipeline, passes, device, spec_dir, tuning_db, remarks)?,
        kernel: KernelArgs {
            precision: enum_value::<Precision>("precision", precision)?,
            attention: enum_value::<AttentionTemplate>("attention", attention)?,
        },
        onnx: OnnxArgs {
            input_shapes: shape_args(input_shapes)?,
            ..OnnxArgs::default()
        },
        cl_options,
    };
    let compiled = match model.cast::<Module>() {
        Ok(module) => {
            let module = module.get();
            py.detach(|| {
                guarded(ErrorKind::Compile, || {
                    // Copied, so that the module is not locked while compiling.
                    let ir = module.ir.lock().unwrap_or_else(|p| p.into_inner()).copy();
                    api::Model::compile_ir(&ir, backend, options)
                })
            })
        }
        Err(_) => {
            let path: PathBuf = model.extract()?;
            py.detach(|| {
                guarded(ErrorKind::Compile, || {
                    api::Model::compile(&path, backend, options)
                })
            })
        }
    }
    .map_err(raised(py))?;
    Ok(Model::new(compiled, keep))
}

/// Opens the bundle in the folder `path` (written by `ircc compile -o`
/// or `Model.save`) on the device its kernels are for.
#[pyfunction]
#[pyo3(signature = (path, *, cl_options = String::new()), text_signature = "(path, *, cl_options='')")]
fn load(py: Python<'_>, path: PathBuf, cl_options: String) -> PyResult<Model> {
    let model = py
        .detach(|| guarded(ErrorKind::Compile, || api::Model::load(&path, &cl_options)))
        .map_err(raised(py))?;
    Ok(Model::new(model, None))
}

/// The native half of `ircc.check`.
#[pyfunction]
#[pyo3(signature = (path, *, pipeline, passes, device, input_shapes, spec_dir, seed, rtol))]
#[allow(clippy::too_many_arguments)]
fn check(
    py: Python<'_>,
    path: PathBuf,
    pipeline: Option<String>,
    passes: Option<String>,
    device: Option<String>,
    input_shapes: Option<Bound<'_, PyDict>>,
    spec_dir: Option<PathBuf>,
    seed: u64,
    rtol: f64,
) -> PyResult<Vec<(String, f64)>> {
    let pipeline = pipeline_args(pipeline, passes, device, spec_dir, None, false)?;
    let onnx = OnnxArgs {
        input_shapes: shape_args(input_shapes)?,
        ..OnnxArgs::default()
    };
    py.detach(|| {
        guarded(ErrorKind::Compile, || {
            api::check(&path, pipeline, onnx, seed, rtol)
        })
    })
    .map_err(raised(py))
}

/// Every pass a pipeline can name, as `ircc --list-passes` lists them:
/// dicts of name, summary, origin and options (name, kind, default, doc).
#[pyfunction]
fn passes(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    let value = guarded(ErrorKind::Compile, api::passes).map_err(raised(py))?;
    to_python(py, &value)
}

/// Every device profile, as `ircc --list-devices` lists them, with all
/// their figures.
#[pyfunction]
fn devices(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    let value = guarded(ErrorKind::Compile, api::devices).map_err(raised(py))?;
    to_python(py, &value)
}

/// Every op of every dialect, as `ircc --list-ops` lists them: dicts of
/// name, mapping (DNNFusion's class), layout (SmartMem's) and summary.
#[pyfunction]
fn ops(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    let value = guarded(ErrorKind::Compile, api::ops).map_err(raised(py))?;
    to_python(py, &value)
}

/// IR in memory: `ircc.parse(text)` reads it, `run_pipeline` transforms
/// it, `str()` prints it.
#[pyclass(module = "ircc", name = "Module", frozen)]
struct Module {
    ir: Mutex<api::Ir>,
}

#[pymethods]
impl Module {
    /// Runs a pipeline over the module in place, as `ircc FILE --pipeline
    /// NAME` (or `--passes`) does, and returns the module. Where a pass
    /// fails, the module is left as that pass left it.
    #[pyo3(signature = (pipeline = None, *, passes = None, device = None, spec_dir = None))]
    fn run_pipeline(
        slf: Bound<'_, Self>,
        pipeline: Option<String>,
        passes: Option<String>,
        device: Option<String>,
        spec_dir: Option<PathBuf>,
    ) -> PyResult<Bound<'_, Self>> {
        let py = slf.py();
        let args = pipeline_args(pipeline, passes, device, spec_dir, None, false)?;
        let this = slf.get();
        py.detach(|| {
            guarded(ErrorKind::Compile, || {
                this.ir
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .run_pipeline(&args)
            })
        })
        .map_err(raised(py))?;
        Ok(slf)
    }

    /// The module in MLIR's generic form, which mlir-opt reads.
    fn generic(&self, py: Python<'_>) -> String {
        self.print(py, ircc_core::Form::Generic)
    }

    fn __str__(&self, py: Python<'_>) -> String {
        self.print(py, ircc_core::Form::Pretty)
    }
}

impl Module {
    /// The module's text, waiting without the GIL for a pipeline another
    /// thread runs over it.
    fn print(&self, py: Python<'_>, form: ircc_core::Form) -> String {
        py.detach(|| {
            let ir = self.ir.lock().unwrap_or_else(|p| p.into_inner());
            ir.print(form)
        })
    }
}

/// Parses and verifies IR text (pretty or generic form); `name` is the
/// file name its errors give.
#[pyfunction]
#[pyo3(signature = (text, name = "<string>"))]
fn parse(py: Python<'_>, text: &str, name: &str) -> PyResult<Module> {
    let ir = guarded(ErrorKind::Compile, || api::Ir::parse(text, name)).map_err(raised(py))?;
    Ok(Module { ir: Mutex::new(ir) })
}

#[pymodule]
fn _ircc(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Model>()?;
    m.add_class::<Module>()?;
    m.add_function(wrap_pyfunction!(compile, m)?)?;
    m.add_function(wrap_pyfunction!(load, m)?)?;
    m.add_function(wrap_pyfunction!(check, m)?)?;
    m.add_function(wrap_pyfunction!(passes, m)?)?;
    m.add_function(wrap_pyfunction!(devices, m)?)?;
    m.add_function(wrap_pyfunction!(ops, m)?)?;
    m.add_function(wrap_pyfunction!(parse, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
