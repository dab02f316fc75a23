#!/usr/bin/env python3
"""`ircc bench` under three pipelines beside PyTorch eager, on one GPU.

    python3 scripts/gpu_bench.py --ircc target/release/ircc --models DIR [--runs 50]

DIR holds NAME.onnx for the torchvision networks named by --nets (by default
swin_t, vit_b_16 and convnext_tiny), as `export_models.py --full --exporter
dynamo` writes them. For each network it prints one JSON line and, at the
end, a markdown table of median milliseconds (kernel counts in brackets).

PyTorch runs the same network at batch 1 in float32 with TF32 off, timed
with CUDA events after ten warm-up runs, as `ircc bench` times its runs
(wgpu timestamp queries, after warm-up). Weights are random in both: the
timings do not depend on them.
"""
import argparse
import json
import statistics
import subprocess

PIPELINES = ["none", "dnnfusion", "smartmem"]


def ircc_bench(ircc, model, pipeline, runs, extra):
    out = subprocess.run(
        [ircc, "bench", model, "--pipeline", pipeline, "--json", "--runs", str(runs), *extra],
        check=True, capture_output=True, text=True,
    ).stdout
    d = json.loads(out)
    return {"median_ms": d["median_ms"], "kernels": d["kernels"], "adapter": d["adapter"]}


def torch_eager(name, runs):
    import torch
    import torchvision

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    model = getattr(torchvision.models, name)().eval().cuda()
    x = torch.randn(1, 3, 224, 224, device="cuda")
    times = []
    with torch.no_grad():
        for _ in range(10):
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
    p.add_argument("--models", required=True)
    p.add_argument("--nets", default="swin_t,vit_b_16,convnext_tiny")
    p.add_argument("--runs", type=int, default=50)
    p.add_argument("--precision", default="f32")
    a = p.parse_args()
    rows = []
    for name in a.nets.split(","):
        model = f"{a.models}/{name}.onnx"
        row = {"network": name, "precision": a.precision}
        for pipeline in PIPELINES:
            row[pipeline] = ircc_bench(a.ircc, model, pipeline, a.runs, ["--precision", a.precision])
        row["pytorch_eager"] = torch_eager(name, a.runs)
        print(json.dumps(row), flush=True)
        rows.append(row)
    print()
    print("| network | " + " | ".join(PIPELINES) + " | PyTorch eager |")
    print("|---" * (len(PIPELINES) + 2) + "|")
    for row in rows:
        cells = [f"{row[p]['median_ms']:.2f} ({row[p]['kernels']})" for p in PIPELINES]
        cells.append(f"{row['pytorch_eager']['median_ms']:.2f}")
        print(f"| {row['network']} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
