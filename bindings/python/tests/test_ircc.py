"""The Python package against the command line and the models' reference
outputs, on lavapipe (wgpu) and PoCL (OpenCL). `.ci/run` builds the wheel,
installs it into a venv and runs this with `IRCC_BIN` naming the ircc
binary of the same checkout."""

import json
import os
import re
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import ircc

ROOT = Path(__file__).resolve().parents[3]
MODELS = ROOT / "tests" / "models"
# The models the Rust GPU tests run, each with its reference input and output.
SHARED = [
    "bert_l2_w64", "bert_l2_w64_dynamo", "vit_l4_w64", "vit_l4_w64_dynamo",
    "convnext_w16", "convnext_w16_dynamo", "swin_t_w24", "swin_t_w24_dynamo",
]
MLP = ROOT / "examples" / "mlp.ir"


def ircc_bin():
    binary = os.environ.get("IRCC_BIN", str(ROOT / "target" / "debug" / "ircc"))
    if not Path(binary).exists():
        pytest.fail(f"no ircc binary at {binary} (set IRCC_BIN)")
    return binary


def cli(*args):
    return subprocess.run([ircc_bin(), *map(str, args)], capture_output=True, text=True)


def relative(got, want):
    """The largest difference relative to want's largest magnitude (at least 1)."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape
    return float(np.abs(got - want).max()) / max(1.0, float(np.abs(want).max()))


def reference(name):
    return np.load(MODELS / f"{name}.input.npy"), np.load(MODELS / f"{name}.output.npy")


# OpenCL's compile time on PoCL is most of a run: its optimizer is off,
# as in the Rust tests.
BACKENDS = [("wgpu", ""), ("opencl", "-cl-opt-disable")]


@pytest.mark.parametrize("backend,cl_options", BACKENDS)
@pytest.mark.parametrize("name", SHARED)
def test_shared_models_match_their_reference_outputs(name, backend, cl_options):
    x, want = reference(name)
    model = ircc.compile(MODELS / f"{name}.onnx", pipeline="smartmem", backend=backend,
                         cl_options=cl_options)
    (out,) = model.run([x]).values()
    assert out.dtype == want.dtype
    assert relative(out, want) < 1e-4


@pytest.mark.parametrize("backend,cl_options", BACKENDS)
def test_f16_kernels_match_within_f16s_rounding(backend, cl_options):
    x, want = reference("swin_t_w24")
    model = ircc.compile(MODELS / "swin_t_w24.onnx", backend=backend, precision="f16",
                         cl_options=cl_options)
    (out,) = model.run(x).values()
    assert out.dtype == np.float32
    assert relative(out, want) < 1e-2
    assert model.stats["target"]["device"] == model.device


F16_IR = """func.func @main(%x: tensor<2x3xf16>, %y: tensor<2x3xf16>) -> tensor<2x3xf16> {
  %0 = graph.mul %x, %y : tensor<2x3xf16>, tensor<2x3xf16> -> tensor<2x3xf16>
  %1 = graph.relu %0 : tensor<2x3xf16> -> tensor<2x3xf16>
  func.return %1 : tensor<2x3xf16>
}
"""


@pytest.mark.parametrize("backend", ["reference", "wgpu", "opencl"])
def test_f16_inputs_and_outputs_are_float16_arrays(backend):
    x = np.array([[1.5, -2, 3], [0.25, 65504, -0.0]], np.float16)
    y = np.array([[2, 2, -1], [4, 0.5, 1]], np.float16)
    model = ircc.compile(ircc.parse(F16_IR), pipeline="smartmem", backend=backend)
    assert model.inputs == [{"name": "x", "shape": (2, 3), "dtype": "float16"},
                            {"name": "y", "shape": (2, 3), "dtype": "float16"}]
    (out,) = model.run({"x": x, "y": y}).values()
    assert out.dtype == np.float16
    np.testing.assert_array_equal(out, np.maximum(x * y, 0))


def test_stats_are_those_of_the_command_line():
    path = MODELS / "swin_t_w24_dynamo.onnx"
    model = ircc.compile(path, pipeline="smartmem", backend="wgpu")
    stats = model.stats
    out = cli("stats", path, "--pipeline", "smartmem", "--device", model.device, "--json")
    assert out.returncode == 0, out.stderr
    want = json.loads(out.stdout)
    for timing in ["import_ms", "compile_ms"]:
        stats.pop(timing)
        want.pop(timing)
    # The same profile, chosen for the adapter here and by name there.
    assert "adapter" in stats["target"].pop("reason")
    assert want["target"].pop("reason") == f"--device {model.device}"
    assert stats == want
    assert stats["dispatches"] > 0


def test_a_bundle_saved_from_python_runs_on_the_command_line_and_the_reverse(tmp_path):
    x, want = reference("vit_l4_w64")
    model = ircc.compile(MODELS / "vit_l4_w64.onnx", backend="wgpu")
    model.save(tmp_path / "py")
    np.save(tmp_path / "x.npy", x)
    out = cli("run", tmp_path / "py", "--input", tmp_path / "x.npy", "--output-dir", tmp_path / "o")
    assert out.returncode == 0, out.stderr
    (got,) = [np.load(p) for p in (tmp_path / "o").iterdir()]
    assert relative(got, want) < 1e-4

    out = cli("compile", MODELS / "vit_l4_w64.onnx", "--pipeline", "smartmem", "-o", tmp_path / "cli")
    assert out.returncode == 0, out.stderr
    loaded = ircc.load(tmp_path / "cli")
    assert loaded.backend == "wgpu"
    (got,) = loaded.run(x).values()
    assert relative(got, want) < 1e-4
    assert loaded.stats["dispatches"] == model.stats["dispatches"]


def test_threads_running_one_model_at_once_get_their_own_answers():
    model = ircc.compile(MLP, pipeline="smartmem", backend="wgpu")
    (spec,) = model.inputs
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal(spec["shape"]).astype(np.float32) for _ in range(8)]
    want = [model.run(x) for x in inputs]
    got = [None] * len(inputs)
    errors = []

    def work(i):
        try:
            for _ in range(5):
                got[i] = model.run(inputs[i])
        except Exception as e:  # reported below, not lost in the thread
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(inputs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for g, w in zip(got, want):
        for k in w:
            np.testing.assert_array_equal(g[k], w[k])


def test_bench_times_the_model_as_the_command_line_does():
    model = ircc.compile(MLP, pipeline="smartmem", backend="wgpu")
    report = model.bench(runs=5, warmup=1)
    assert report["runs"] == 5
    assert 0 < report["p10_ms"] <= report["median_ms"] <= report["p90_ms"]
    assert report["kernels"] == model.stats["dispatches"]


def test_the_reference_backend_runs_the_interpreter():
    x, want = reference("convnext_w16")
    model = ircc.compile(MODELS / "convnext_w16.onnx", pipeline="smartmem", backend="reference")
    assert model.device is None and model.adapter is None
    (out,) = model.run(x).values()
    assert relative(out, want) < 1e-4
    with pytest.raises(ircc.RunError, match="reference backend"):
        model.bench()


def test_a_model_given_as_bytes_or_a_module_compiles():
    data = (MODELS / "convnext_w16.onnx").read_bytes()
    x, want = reference("convnext_w16")
    (out,) = ircc.compile(data, backend="reference").run(x).values()
    assert relative(out, want) < 1e-4
    model = ircc.compile(ircc.parse(MLP.read_text()), backend="reference")
    assert len(model.inputs) == 1


def test_bad_models_raise_compile_errors_with_where_and_what(tmp_path):
    bad = tmp_path / "bad.ir"
    bad.write_text("func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {\n  %0 = graph.nope %x\n}\n")
    with pytest.raises(ircc.CompileError, match=r"bad\.ir:3:1: error: syntax error"):
        ircc.compile(bad)
    with pytest.raises(ircc.CompileError, match="cannot read"):
        ircc.compile(tmp_path / "missing.onnx")
    with pytest.raises(ircc.CompileError):
        ircc.compile(b"not an onnx model")
    with pytest.raises(ircc.CompileError, match="no backend 'cuda'"):
        ircc.compile(MLP, backend="cuda")
    with pytest.raises(ValueError, match="precision 'f8'"):
        ircc.compile(MLP, precision="f8")
    with pytest.raises(ircc.CompileError, match="reference backend"):
        ircc.compile(MLP, backend="reference", precision="f16")
    with pytest.raises(ircc.CompileError, match="unknown pass"):
        ircc.compile(MLP, passes="canonicalize,no-such-pass")
    with pytest.raises(ircc.CompileError, match=r"<string>:1:\d+"):
        ircc.parse("func.func @main(")
    with pytest.raises(TypeError):
        ircc.compile(42)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(ircc.CompileError, match="not a regular file"):
        ircc.compile(fifo)  # not a read that waits forever for a writer
    with pytest.raises(ValueError, match="ircc.parse"):
        ircc.compile(MLP.read_text())
    with pytest.raises(ValueError, match="backend='opencl'"):
        ircc.compile(MLP, cl_options="-cl-opt-disable")


def test_bad_inputs_raise_clear_errors_and_crash_nothing():
    model = ircc.compile(MLP, pipeline="smartmem", backend="wgpu")
    (spec,) = model.inputs
    name, shape = spec["name"], spec["shape"]
    good = np.zeros(shape, np.float32)
    with pytest.raises(ircc.InputError, match="not C-contiguous"):
        model.run({name: np.zeros(shape[::-1], np.float32).T})
    with pytest.raises(TypeError, match="numpy.ndarray, not list"):
        model.run({name: good.tolist()})
    with pytest.raises(ircc.InputError, match="dtype object"):
        model.run({name: np.empty(shape, dtype=object)})
    with pytest.raises(ircc.InputError, match=re.escape(f"input '{name}' is")):
        model.run({name: good.astype(np.float64)})
    with pytest.raises(ircc.InputError, match="is missing"):
        model.run({})
    with pytest.raises(ircc.InputError, match="no input 'nope'"):
        model.run({name: good, "nope": good})
    with pytest.raises(ValueError, match=re.escape(f"input '{name}' is")):
        model.run({name: np.zeros((*shape, 1), np.float32)})
    with pytest.raises(TypeError, match="inputs must be"):
        model.run(7)
    with pytest.raises(ValueError, match="runs must be at least 1"):
        model.bench(runs=0)
    with pytest.raises(ValueError, match="runs must be at least 1"):
        model.bench(runs=-1)
    assert model.run({name: good})  # still runs after every refusal
    model.close()
    model.close()
    with pytest.raises(ircc.RunError, match="closed"):
        model.run({name: good})
    with pytest.raises(ircc.RunError, match="closed"):
        model.stats
    with ircc.compile(MLP, backend="reference") as m:
        assert m.run([good])
    with pytest.raises(ircc.RunError, match="closed"):
        m.run([good])


def test_check_names_the_pass_and_raises_on_a_failing_one():
    rows = ircc.check(MODELS / "convnext_w16.onnx", pipeline="smartmem")
    assert [p for p, _ in rows][:1] == ["canonicalize"]
    assert all(d <= 1e-4 for _, d in rows)
    # Folding attention reorders Swin-T's sums: 1.5e-8 of the scale.
    with pytest.raises(ircc.CheckError, match="pass 'graph.fold-attention' changed the results"):
        ircc.check(MODELS / "swin_t_w24.onnx", pipeline="smartmem", rtol=1e-9)


def test_the_catalogues_are_those_the_command_line_lists():
    names = [p["name"] for p in ircc.passes()]
    listed = cli("--list-passes").stdout
    assert names and all(re.search(rf"^{re.escape(n)}\s", listed, re.M) for n in names)
    devices = {d["name"]: d for d in ircc.devices()}
    assert "nvidia_vulkan" in devices and devices["lavapipe"]["compute_units"] > 0
    ops = {o["name"] for o in ircc.ops()}
    assert {"graph.conv", "graph.matmul", "kernel.func"} <= ops


def test_ir_parses_runs_pipelines_and_prints():
    m = ircc.parse(MLP.read_text(), "mlp.ir")
    before = str(m)
    assert m.run_pipeline("canonicalize") is m
    assert "func.func @main" in str(m)
    out = cli(MLP, "--pipeline", "canonicalize")
    assert str(m) == out.stdout
    assert '"func.func"' in m.generic()
    assert before.count("graph.") >= str(m).count("graph.")


def test_the_readme_example_runs():
    text = (ROOT / "README.md").read_text()
    (example,) = re.findall(r"```python\n(.*?)```", text, re.S)
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        exec(compile(example, "README.md", "exec"), {})
    finally:
        os.chdir(cwd)


def test_outputs_of_one_name_each_get_a_key():
    text = """func.func @main(%x: tensor<2xf32>) -> (tensor<2xf32> {ircc.name = "y"}, tensor<2xf32> {ircc.name = "y"}) {
  %0 = graph.relu %x : tensor<2xf32> -> tensor<2xf32>
  %1 = graph.neg %x : tensor<2xf32> -> tensor<2xf32>
  func.return %0, %1 : tensor<2xf32>, tensor<2xf32>
}
"""
    x = np.array([-1.5, 2], np.float32)
    for backend in ["reference", "wgpu"]:
        model = ircc.compile(ircc.parse(text), backend=backend)
        assert [o["name"] for o in model.outputs] == ["y", "y_1"]
        out = model.run(x)
        np.testing.assert_array_equal(out["y"], [0, 2])
        np.testing.assert_array_equal(out["y_1"], [1.5, -2])


def test_a_model_keeps_its_weights_when_its_file_changes(tmp_path):
    x, want = reference("convnext_w16")
    path = tmp_path / "m.onnx"
    path.write_bytes((MODELS / "convnext_w16.onnx").read_bytes())
    model = ircc.compile(path, backend="reference")
    path.write_bytes(b"")  # exported again, say: the model read it once
    (out,) = model.run(x).values()
    assert relative(out, want) < 1e-4


def test_a_forked_child_is_told_to_compile_its_own_model():
    model = ircc.compile(MLP, backend="wgpu")
    (spec,) = model.inputs
    x = np.zeros(spec["shape"], np.float32)
    pid = os.fork()
    if pid == 0:
        try:
            model.run(x)
            code = 1
        except ircc.RunError as e:
            code = 0 if "forked" in str(e) else 2
        except BaseException:
            code = 3
        os._exit(code)
    for _ in range(600):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.1)
    else:
        os.kill(pid, 9)
        pytest.fail("the forked child hung")
    assert os.waitstatus_to_exitcode(status) == 0
    assert model.run(x)  # the parent's model still runs


def test_a_module_compiles_as_it_is_and_its_errors_name_its_text():
    text = """func.func @main(%x: tensor<1x32x9x9xf32>, %w: tensor<32x16x3x3xf32>) -> tensor<1x32x9x9xf32> {
  %0 = graph.conv %x, %w {group = 2, pads = array<i64: 1, 1, 1, 1>, kernel.schedule = {template = "matmul", workgroup = array<i64: 8, 8>, register_tile = array<i64: 2, 2>, k_step = 16, splits = 1, local_memory = true, sum_in_consumers = false, tuned = false}} : tensor<1x32x9x9xf32>, tensor<32x16x3x3xf32> -> tensor<1x32x9x9xf32>
  func.return %0 : tensor<1x32x9x9xf32>
}
"""
    # Groups of 16 channels run per element: the schedule is refused,
    # at the op's place in the module's own text.
    with pytest.raises(ircc.CompileError, match=r"^mine\.ir:2:8: error: kernel\.lower"):
        ircc.compile(ircc.parse(text, "mine.ir"), passes="kernel.lower", backend="reference")


def test_onnx_bytes_with_external_data_say_to_pass_the_path():
    data = (MODELS / "vit_l4_w64_dynamo.onnx").read_bytes()
    with pytest.raises(ircc.CompileError, match="pass the path of its .onnx file"):
        ircc.compile(data, backend="reference")
