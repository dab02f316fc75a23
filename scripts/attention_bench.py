#!/usr/bin/env python3
"""Fused attention beside the unfused ops on one GPU, in one command.

    python3 scripts/attention_bench.py --ircc target/release/ircc \
        [--baseline OLD_IRCC] [--lengths 197,512,2048,4096] [--heads 12] [--size 64] \
        [--runs 50] [--device PROFILE] [--torch] [--check]

For each sequence length S and precision (f32, f16) it writes attention as
exporters do (q @ kt, a scale, softmax, @ v; 12 heads of 64 by default,
batch 1; in f32, compiled with --precision f32 or f16 as models are)
and times it with `ircc bench` twice: through smartmem, whose
graph.fold-attention makes it one graph.attention (the fused template
kernel.schedule picks), and through smartmem without that pass (the two
products and the softmax as kernels of their own). It reports the kernels'
own time (timestamp queries, summed over a run's kernels) in microseconds,
the fused template's name, and the ratio unfused / fused (above 1: the
fused kernel is faster). --baseline adds the fused time of an older ircc;
--torch adds PyTorch's scaled_dot_product_attention (CUDA events).

--check first runs each length in f16 through every fused template
(`ircc run --attention cooperative|rows|tiled`, on the GPU) on the same
random inputs and prints each one's largest difference from NumPy's
attention in f64, relative to the output's largest magnitude: the
cooperative-matrix template checked beside the FMA ones.
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile

SMARTMEM = os.path.join(os.path.dirname(__file__), "..", "spec", "pipelines", "smartmem.pipeline")


def module(s, heads, size):
    t = lambda *d: "tensor<%sxf32>" % "x".join(map(str, d))
    q, kt, v = t(1, heads, s, size), t(1, heads, size, s), t(1, heads, s, size)
    scores = t(1, heads, s, s)
    return f"""func.func @main(%q: {q}, %kt: {kt}, %v: {v}) -> {q} {{
  %c = graph.constant {{value = dense<{size ** -0.5!r}> : tensor<f32>}} : () -> tensor<f32>
  %s = graph.matmul %q, %kt : {q}, {kt} -> {scores}
  %t = graph.mul %s, %c : {scores}, tensor<f32> -> {scores}
  %p = graph.softmax %t {{axis = -1}} : {scores} -> {scores}
  %y = graph.matmul %p, %v : {scores}, {v} -> {q}
  func.return %y : {q}
}}
"""


def bench(binary, path, pipeline, precision, runs, device):
    extra = ["--device", device] if device else []
    out = subprocess.run([binary, "bench", path, "--pipeline", pipeline, "--precision", precision,
                          "--json", "--runs", str(runs), *extra], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{binary} bench {path} --pipeline {pipeline}: {out.stderr}")
    d = json.loads(out.stdout)
    kernels = d.get("per_kernel", [])
    return {"kernel_us": round(sum(k["median_us"] for k in kernels), 1),
            "wall_ms": d["median_ms"], "kernels": d["kernels"],
            "templates": sorted({k.get("template", "?") for k in kernels}),
            "adapter": d["adapter"], "profile": d.get("device")}


def check(binary, path, s, heads, size, device, work):
    import numpy as np
    rng = np.random.default_rng(s)
    q, kt, v = (rng.standard_normal(shape).astype(np.float32)
                for shape in [(1, heads, s, size), (1, heads, size, s), (1, heads, s, size)])
    names = []
    for name, x in [("q", q), ("kt", kt), ("v", v)]:
        np.save(os.path.join(work, name + ".npy"), x)
        names += ["--input", f"{name}={os.path.join(work, name + '.npy')}"]
    scores = (q.astype(np.float64) @ kt) * size ** -0.5
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    want = (weights / weights.sum(-1, keepdims=True)) @ v
    extra = ["--device", device] if device else []
    result = {}
    for template in ["cooperative", "rows", "tiled"]:
        out, dump = os.path.join(work, template), os.path.join(work, "ir_" + template)
        run = subprocess.run([binary, "run", path, "--pipeline", "smartmem", "--backend", "wgpu",
                              "--precision", "f16", "--attention", template, *names,
                              "--output-dir", out, "--dump-dir", dump, *extra],
                             capture_output=True, text=True)
        if run.returncode != 0:
            result[template] = run.stderr.strip().splitlines()[-1]
            continue
        # Where the template asked for does not fit, kernel.schedule takes
        # another: say so rather than report its figure under this name.
        (lowered,) = [f for f in os.listdir(dump) if f.endswith("kernel.lower.ir")]
        with open(os.path.join(dump, lowered)) as f:
            if f'template = "attention_{template}"' not in f.read():
                result[template] = "not taken"
                continue
        (got,) = [np.load(os.path.join(out, f)) for f in os.listdir(out)]
        result[template] = float(np.abs(got - want).max() / max(np.abs(want).max(), 1.0))
    return result


def torch_sdpa(s, heads, size, precision, runs):
    import torch
    import torch.nn.functional as F
    dtype = torch.float16 if precision == "f16" else torch.float32
    torch.backends.cuda.matmul.allow_tf32 = False
    q, k, v = (torch.randn(1, heads, s, size, device="cuda", dtype=dtype) for _ in range(3))
    for _ in range(10):
        F.scaled_dot_product_attention(q, k, v)
    times = []
    for _ in range(runs):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        F.scaled_dot_product_attention(q, k, v)
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) * 1e3)
    return round(statistics.median(times), 1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ircc", required=True)
    ap.add_argument("--baseline")
    ap.add_argument("--lengths", default="197,512,2048,4096")
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--device")
    ap.add_argument("--torch", action="store_true")
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()

    rows = []
    with tempfile.TemporaryDirectory() as work:
        unfused = os.path.join(work, "unfused.pipeline")
        with open(SMARTMEM) as f, open(unfused, "w") as g:
            g.writelines(l for l in f if l.strip() != "graph.fold-attention")
        for s in map(int, args.lengths.split(",")):
            path = os.path.join(work, f"attention_{s}.ir")
            with open(path, "w") as f:
                f.write(module(s, args.heads, args.size))
            if args.check:
                print(json.dumps({"S": s, "check f16": check(args.ircc, path, s, args.heads, args.size,
                                                             args.device, work)}), flush=True)
            for precision in ["f32", "f16"]:
                row = {"S": s, "precision": precision,
                       "fused": bench(args.ircc, path, "smartmem", precision, args.runs, args.device),
                       "unfused": bench(args.ircc, path, unfused, precision, args.runs, args.device)}
                if args.baseline:
                    row["before"] = bench(args.baseline, path, "smartmem", precision, args.runs,
                                          args.device)
                if args.torch:
                    row["torch_sdpa_us"] = torch_sdpa(s, args.heads, args.size, precision, args.runs)
                print(json.dumps(row), flush=True)
                rows.append(row)

    print(f"\n{args.heads} heads of {args.size}, batch 1; kernel time in us (timestamp queries)"
          f" on {rows[0]['fused']['adapter']}, profile {rows[0]['fused']['profile']}\n")
    head = ["S", "precision", "fused", "template", "unfused", "unfused / fused"]
    head += ["fused before"] if args.baseline else []
    head += ["torch sdpa"] if args.torch else []
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in rows:
        f, u = r["fused"], r["unfused"]
        cells = [r["S"], r["precision"], f"{f['kernel_us']} ({f['kernels']})", ",".join(f["templates"]),
                 f"{u['kernel_us']} ({u['kernels']})", f"{u['kernel_us'] / f['kernel_us']:.2f}"]
        cells += [f"{r['before']['kernel_us']} ({r['before']['kernels']})"] if args.baseline else []
        cells += [r["torch_sdpa_us"]] if args.torch else []
        print("| " + " | ".join(map(str, cells)) + " |")


if __name__ == "__main__":
    main()
