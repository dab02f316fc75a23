"""Type stubs of the Python package ircc (bindings/python)."""

import os
from typing import Any, Mapping, Optional, Sequence, Union

import numpy as np

__version__: str

ModelSource = Union[str, os.PathLike, bytes, bytearray, memoryview, "Module", Any]
Inputs = Union[Mapping[str, np.ndarray], Sequence[np.ndarray], np.ndarray]

class Error(Exception): ...
class CompileError(Error): ...
class RunError(Error): ...
class InputError(RunError, ValueError): ...
class CheckError(Error): ...

class Model:
    """A model compiled for a backend, its device set up once (by compile or
    load). Safe to share between threads: runs take the device in turn. It
    cannot run in a process forked from the one that made it."""

    def run(self, inputs: Inputs) -> dict[str, np.ndarray]:
        """Runs the model once; a dict of output name to array."""
    def bench(self, runs: int = 50, warmup: int = 5, inputs: Optional[Inputs] = None) -> dict[str, Any]:
        """Times runs: median_ms, p10_ms, p90_ms, adapter, per_kernel (`ircc bench --json`)."""
    def save(self, path: Union[str, os.PathLike]) -> None:
        """Writes the model's bundle to a folder, as `ircc compile -o DIR`."""
    def close(self) -> None:
        """Frees the device's resources; the model cannot run after."""
    def __enter__(self) -> "Model": ...
    def __exit__(self, *exc: Any) -> None: ...
    @property
    def stats(self) -> dict[str, Any]:
        """`ircc stats --json` of the model as compiled."""
    @property
    def inputs(self) -> list[dict[str, Any]]:
        """The inputs `run` takes: name, shape and dtype."""
    @property
    def outputs(self) -> list[dict[str, Any]]:
        """The outputs `run` gives: name, shape and dtype."""
    @property
    def backend(self) -> str: ...
    @property
    def device(self) -> Optional[str]:
        """The device profile the kernels were made for."""
    @property
    def adapter(self) -> Optional[tuple[str, str]]:
        """The adapter the model runs on and the API reaching it."""
    @property
    def remarks(self) -> str: ...

class Module:
    """IR in memory."""

    def run_pipeline(
        self,
        pipeline: Optional[str] = None,
        *,
        passes: Optional[str] = None,
        device: Optional[str] = None,
        spec_dir: Optional[Union[str, os.PathLike]] = None,
    ) -> "Module":
        """Runs a pipeline (or a pass list) over the module in place; returns it."""
    def generic(self) -> str:
        """The module in MLIR's generic form."""

def compile(
    model: ModelSource,
    *,
    pipeline: Optional[str] = None,
    passes: Optional[str] = None,
    backend: str = "wgpu",
    device: Optional[str] = None,
    precision: Optional[str] = None,
    attention: Optional[str] = None,
    input_shapes: Optional[Mapping[str, Sequence[int]]] = None,
    spec_dir: Optional[Union[str, os.PathLike]] = None,
    tuning_db: Optional[Union[str, os.PathLike]] = None,
    cl_options: str = "",
    remarks: bool = False,
) -> Model:
    """Compiles a model and sets up its device."""

def load(path: Union[str, os.PathLike], *, cl_options: str = "") -> Model:
    """Opens a bundle (`ircc compile -o DIR`, `Model.save`) on its device."""

def check(
    model: ModelSource,
    *,
    pipeline: Optional[str] = None,
    passes: Optional[str] = None,
    device: Optional[str] = None,
    input_shapes: Optional[Mapping[str, Sequence[int]]] = None,
    spec_dir: Optional[Union[str, os.PathLike]] = None,
    seed: int = 0,
    rtol: float = 1e-4,
) -> list[tuple[str, float]]:
    """Translation validation, pass by pass; raises CheckError."""

def parse(text: str, name: str = "<string>") -> Module:
    """Parses and verifies IR text."""

def passes() -> list[dict[str, Any]]: ...
def devices() -> list[dict[str, Any]]: ...
def ops() -> list[dict[str, Any]]: ...
