"""ircc from Python: compile a model (ONNX or ircc's IR) through a pipeline,
run it on the GPU through wgpu or OpenCL, or on the reference interpreter,
with numpy arrays in and out.

    import ircc, numpy as np
    model = ircc.compile("model.onnx", pipeline="smartmem", backend="wgpu")
    out = model.run({"input": np.zeros((1, 3, 224, 224), np.float32)})
    print(model.stats, model.bench(runs=20)["median_ms"])

Errors are ``ircc.CompileError``, ``ircc.InputError`` (also a
``ValueError``), ``ircc.RunError`` and ``ircc.CheckError``, all
``ircc.Error``s, carrying the text the command line prints.
"""

import os
import tempfile

from . import _ircc
from ._ircc import Model, Module, check as _check, devices, load, ops, parse, passes

__version__ = _ircc.__version__

__all__ = [
    "CheckError", "CompileError", "Error", "InputError", "Model", "Module", "RunError",
    "check", "compile", "devices", "load", "ops", "parse", "passes",
]


class Error(Exception):
    """An error of ircc's, with the text its command line prints."""


class CompileError(Error):
    """Reading, importing or compiling a model, or setting up its device, failed."""


class RunError(Error):
    """Running a model on its device (or writing its bundle) failed."""


class InputError(RunError, ValueError):
    """The inputs given to ``Model.run`` do not fit the model's: a missing or
    unknown name, a wrong shape or dtype, an array that is not C-contiguous."""


class CheckError(Error):
    """``ircc.check``: a pass changed the model's results by more than the tolerance."""


def _model_file(model):
    """The path of `model` (a path, ONNX bytes, an onnx.ModelProto or an
    ircc.Module), and the temporary folder it was written to where it was
    no file (None for a path)."""
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        if isinstance(path, str) and not os.path.exists(path) and "func.func" in path:
            raise ValueError("a str model names a file, and none is named this; for IR text, compile ircc.parse(text)")
        return path, None
    keep = tempfile.TemporaryDirectory(prefix="ircc-")
    if isinstance(model, Module):
        # Written out for ircc.check, which reads its model from a file.
        path = os.path.join(keep.name, "model.ir")
        with open(path, "w", encoding="utf-8") as f:
            f.write(str(model))
        return path, keep
    if hasattr(model, "SerializeToString"):  # onnx.ModelProto, without importing onnx
        model = model.SerializeToString()
    if isinstance(model, (bytes, bytearray, memoryview)):
        path = os.path.join(keep.name, "model.onnx")
        with open(path, "wb") as f:
            f.write(model)
        return path, keep
    keep.cleanup()
    raise TypeError(
        "model must be a path, ONNX bytes, an onnx.ModelProto or an ircc.Module, not "
        + type(model).__name__
    )


def compile(model, *, pipeline=None, passes=None, backend="wgpu", device=None,
            precision=None, attention=None, input_shapes=None, spec_dir=None,
            tuning_db=None, cl_options="", remarks=False):
    """Compiles `model` and sets up its device; returns a ``Model`` to run.

    model: the path of an ``.onnx`` model or an ``.ir`` file, an ONNX model's
        bytes, an ``onnx.ModelProto`` or an ``ircc.Module``.
    pipeline: a named pipeline (``none``, ``canonicalize``, ``dnnfusion``,
        ``smartmem``, ``smartmem-gpu``) or the path of a ``.pipeline`` file;
        ``smartmem`` unless ``passes`` is given, a pass list as
        ``--passes`` takes it.
    backend: ``wgpu`` (WGSL through Vulkan or another API wgpu finds),
        ``opencl``, or ``reference`` (the CPU interpreter).
    device: the device profile kernels are made for (``ircc.devices()``), or
        ``"auto"``/None: the profile matching the adapter the backend opens.
    precision: ``f32`` or ``f16`` kernels (GPU backends; default f32).
    attention: the fused attention template (``auto``, ``rows``, ``tiled``,
        ``cooperative``).
    input_shapes: {input name: shape} for an ONNX model's symbolic dimensions.
    spec_dir, tuning_db, cl_options, remarks: as the command line's
        ``--spec-dir``, ``--tuning-db``, ``--cl-options`` and ``--remarks``
        (the remarks are in ``Model.remarks``).

    Raises ``CompileError`` with the compiler's diagnostic. The GIL is
    released while compiling. A model in a file is read once: the file may
    change after. A Model cannot run in a process forked from the one that
    compiled it.
    """
    if pipeline is not None and passes is not None:
        raise ValueError("give pipeline or passes, not both")
    if pipeline is None and passes is None:
        pipeline = "smartmem"
    if cl_options and backend != "opencl":
        raise ValueError("cl_options go to the OpenCL compiler: give them with backend='opencl'")
    # A module is compiled as it is in memory (its errors name its own
    # text); a model given as bytes is written to a temporary file, kept
    # for as long as the Model lives.
    path, keep = (model, None) if isinstance(model, Module) else _model_file(model)
    try:
        return _ircc.compile(
            path, backend=backend, pipeline=pipeline, passes=passes, device=device,
            precision=precision, attention=attention, input_shapes=input_shapes,
            spec_dir=None if spec_dir is None else os.fspath(spec_dir),
            tuning_db=None if tuning_db is None else os.fspath(tuning_db),
            cl_options=cl_options, remarks=remarks, keep=keep)
    except CompileError as e:
        if keep is None:
            raise
        keep.cleanup()
        if "external data" not in str(e):
            raise
        raise CompileError(
            f"{e}\n(a model with external data files is read from its path: pass the path of its .onnx file)"
        ) from None
    except BaseException:
        if keep is not None:
            keep.cleanup()
        raise


def check(model, *, pipeline=None, passes=None, device=None, input_shapes=None,
          spec_dir=None, seed=0, rtol=1e-4):
    """Translation validation, as ``ircc check``: runs the interpreter on
    seeded random inputs before and after every pass of the pipeline.

    `pipeline` is ``smartmem`` unless ``passes`` is given. Returns a list
    of (pass, relative difference); raises ``CheckError``
    naming the first pass that changed the results by more than `rtol`
    (``CompileError`` where the model does not compile).
    """
    if pipeline is not None and passes is not None:
        raise ValueError("give pipeline or passes, not both")
    if pipeline is None and passes is None:
        pipeline = "smartmem"
    if not rtol >= 0:
        raise ValueError(f"rtol must be a number of 0 or more, not {rtol}")
    path, keep = _model_file(model)
    try:
        return _check(path, pipeline=pipeline, passes=passes, device=device,
                      input_shapes=input_shapes,
                      spec_dir=None if spec_dir is None else os.fspath(spec_dir),
                      seed=seed, rtol=rtol)
    finally:
        if keep is not None:
            keep.cleanup()
