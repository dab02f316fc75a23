#!/usr/bin/env python3
"""ircc beside PyTorch on one GPU, in one command: the issue's table.

    python3 scripts/gpu_bench.py --ircc target/release/ircc --models DIR \
        [--baseline OLD_IRCC] [--device PROFILE] [--nets swin_t,...] [--runs 50] [--jsonl FILE] [--check]

DIR holds NAME.onnx for each network of --nets (by default the five
torchvision networks below), as `export_models.py --full --exporter dynamo`
writes them. For each network it times `ircc bench` under none, dnnfusion
and smartmem in f32, smartmem in f16, smartmem with --baseline (an older
ircc, for a before/after taken on the same GPU in the same command), and
PyTorch eager, torch.compile and torch.compile(mode="reduce-overhead") (CUDA
graphs), each in float32 and float16 (" f16" columns). It prints one JSON line per measurement as it goes (and appends it
to --jsonl, so a run cut short keeps what it measured), then a markdown
table of median milliseconds with dispatch counts in brackets.

With --check it first runs each network through smartmem on the GPU (f32
and f16) and compares the outputs with onnxruntime's on the CPU, printing
the largest difference relative to the output's scale.

PyTorch runs batch 1 in float32 with TF32 off (or float16), timed with CUDA events after
warm-up runs; `ircc bench` times each run from submission to completion
after its warm-up runs. Weights are random in both: the timings do not
depend on them.
"""
import argparse
import json
import statistics
import subprocess

NETS = ["swin_t", "vit_b_16", "convnext_tiny", "regnet_x_3_2gf", "resnext50_32x4d"]
# (column, binary, pipeline, precision)
IRCC = [
    ("none", "ircc", "none", "f32"),
    ("dnnfusion", "ircc", "dnnfusion", "f32"),
    ("smartmem", "ircc", "smartmem", "f32"),
    ("smartmem f16", "ircc", "smartmem", "f16"),
    ("smartmem before", "baseline", "smartmem", "f32"),
    ("smartmem f16 before", "baseline", "smartmem", "f16"),
]
# Each in float32 (TF32 off) and, with " f16", in float16.
TORCH = ["eager", "compile", "compile reduce-overhead",
         "eager f16", "compile f16", "compile reduce-overhead f16"]


def ircc_bench(binary, model, pipeline, precision, runs, device):
    extra = ["--device", device] if device else []
    out = subprocess.run(
        [binary, "bench", model, "--pipeline", pipeline, "--precision", precision,
         "--json", "--runs", str(runs), *extra],
        check=True, capture_output=True, text=True,
    ).stdout
    d = json.loads(out)
    kernels = sorted(d.get("per_kernel", []), key=lambda k: -k["median_us"])
    return {"median_ms": d["median_ms"], "kernels": d["kernels"], "adapter": d["adapter"],
            # The profile compiled for: --device's, else the one matching the adapter.
            "profile": d.get("device"),
            # The kernels' own time (timestamps, where the adapter has them);
            # the rest of a run is outside kernels.
            "kernel_sum_ms": sum(k["median_us"] for k in kernels) / 1e3,
            "top_kernels": kernels[:10]}


def check(binary, model, device, workdir):
    """The largest difference of ircc's smartmem outputs on the GPU (f32,
    f16) from onnxruntime's, divided by the output's largest magnitude
    (or by 1 where that is smaller), as ircc's GPU tests measure."""
    import os
    import numpy as np
    import onnxruntime as ort

    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    feed = session.get_inputs()[0]
    x = np.random.default_rng(0).standard_normal(feed.shape).astype(np.float32)
    want = session.run(None, {feed.name: x})[0]
    np.save(os.path.join(workdir, "x.npy"), x)
    # torchvision zero-initialises ViT's head: an all-zero output checks nothing.
    result = {"reference_is_zero": bool(not want.any())}
    for precision in ["f32", "f16"]:
        out = os.path.join(workdir, precision)
        extra = ["--device", device] if device else []
        subprocess.run(
            [binary, "run", model, "--pipeline", "smartmem", "--backend", "wgpu", "--precision",
             precision, "--input", os.path.join(workdir, "x.npy"), "--output-dir", out, *extra],
            check=True, capture_output=True, text=True,
        )
        got = np.load(os.path.join(out, sorted(os.listdir(out))[0]))
        scale = max(1.0, float(np.abs(want).max()))
        result[f"{precision}_relative_difference"] = float(np.abs(got - want).max()) / scale
    return result


def torch_time(name, mode, runs):
    import torch
    import torchvision

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    dtype = torch.float16 if mode.endswith(" f16") else torch.float32
    mode = mode.removesuffix(" f16")
    model = getattr(torchvision.models, name)().eval().cuda().to(dtype)
    if mode == "compile":
        model = torch.compile(model)
    elif mode == "compile reduce-overhead":
        model = torch.compile(model, mode="reduce-overhead")
    x = torch.randn(1, 3, 224, 224, device="cuda", dtype=dtype)
    times = []
    with torch.no_grad():
        for _ in range(15):
            model(x)
        torch.cuda.synchronize()
        for _ in range(runs):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            model(x)
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
    return {"median_ms": statistics.median(times), "device": torch.cuda.get_device_name()}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ircc", required=True)
    p.add_argument("--baseline", help="an older ircc binary, timed beside --ircc")
    p.add_argument("--models", required=True)
    p.add_argument("--nets", default=",".join(NETS))
    p.add_argument("--runs", type=int, default=50)
    p.add_argument("--device", help="the device profile ircc compiles for (ircc --list-devices); by default the one matching the GPU (--device auto)")
    p.add_argument("--columns", default=",".join(c[0] for c in IRCC), help="ircc columns to time")
    p.add_argument("--torch", default=",".join(TORCH), help="PyTorch modes to time")
    p.add_argument("--jsonl", help="append each measurement to this file")
    p.add_argument("--check", action="store_true", help="compare smartmem's GPU outputs with onnxruntime first")
    a = p.parse_args()
    binaries = {"ircc": a.ircc, "baseline": a.baseline}
    wanted = a.columns.split(",")
    columns = [c for c in IRCC if binaries[c[1]] and c[0] in wanted]
    modes = [m for m in a.torch.split(",") if m]
    results = {}

    def record(net, column, value):
        results[(net, column)] = value
        line = json.dumps({"network": net, "column": column, **value})
        print(line, flush=True)
        if a.jsonl:
            with open(a.jsonl, "a") as f:
                f.write(line + "\n")

    nets = a.nets.split(",")
    if a.check:
        import tempfile

        for net in nets:
            with tempfile.TemporaryDirectory() as workdir:
                try:
                    value = check(a.ircc, f"{a.models}/{net}.onnx", a.device, workdir)
                except subprocess.CalledProcessError as e:
                    value = {"error": e.stderr.strip()[-400:]}
                except Exception as e:  # onnxruntime or numpy: report it, time the rest
                    value = {"error": repr(e)[-400:]}
            record(net, "check", value)
    for net in nets:
        model = f"{a.models}/{net}.onnx"
        for column, binary, pipeline, precision in columns:
            try:
                record(net, column, ircc_bench(binaries[binary], model, pipeline, precision, a.runs, a.device))
            except subprocess.CalledProcessError as e:
                record(net, column, {"error": e.stderr.strip()[-400:]})
    # PyTorch last: compiling takes longest, and a run cut short keeps ircc's figures.
    for mode in modes:
        for net in nets:
            record(net, mode, torch_time(net, mode, a.runs))

    headers = [c[0] for c in columns] + modes
    print()
    print("| network | " + " | ".join(headers) + " |")
    print("|---" * (len(headers) + 1) + "|")
    for net in nets:
        cells = []
        for h in headers:
            v = results.get((net, h), {})
            if "median_ms" not in v:
                cells.append("—")
            elif "kernels" in v:
                cells.append(f"{v['median_ms']:.2f} ({v['kernels']})")
            else:
                cells.append(f"{v['median_ms']:.2f}")
        print(f"| {net} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
