#!/usr/bin/env python3
"""A Whisper-style log-mel front end for the wider suite, written with
onnx.helper (the machine that makes it has no PyTorch; torch.stft exports
the same nodes: a reflect Pad for center=True, then STFT):

    16 kHz audio [1, 16000] -> reflect-pad 200 each side -> STFT (n_fft 400,
    hop 160, periodic Hann window) -> power |X|^2 -> MelWeightMatrix (80 bins,
    0-8000 Hz) -> log10(max(., 1e-10)) -> max(., max - 8) -> (. + 4) / 4
    -> [1, 80, frames]

and the output of ONNX's reference implementation (onnx.reference, whose
STFT is numpy's FFT in double precision) for a seeded input, a chirp under
noise. onnxruntime's own STFT, an f32 FFT, is further from it than ircc is
(the script prints both distances), so the reference is ONNX's here,
where the other models of tests/models take onnxruntime's:

    python3 scripts/make_log_mel.py tests/models

Needs numpy, onnx and onnxruntime.
"""
import os, sys
import numpy as np
import onnx
from onnx import TensorProto as T, helper as h, numpy_helper as nh
import onnxruntime as ort
from onnx.reference import ReferenceEvaluator

out = sys.argv[1] if len(sys.argv) > 1 else "."
name = "log_mel_whisper"
rate, n_fft, hop, mels, samples = 16000, 400, 160, 80, 16000
c = lambda n, v, dt=np.int64: nh.from_array(np.array(v, dtype=dt), n)
inits = [
    c("pads", [0, n_fft // 2, 0, n_fft // 2]),
    c("hop", hop), c("n_fft", n_fft), c("n_fft32", n_fft, np.int32),
    c("mels", mels, np.int32), c("rate", rate, np.int32),
    c("low", 0.0, np.float32), c("high", rate / 2, np.float32),
    c("floor", 1e-10, np.float32), c("inv_ln10", 1 / np.log(10), np.float32),
    c("eight", 8.0, np.float32), c("four", 4.0, np.float32),
    c("last", [-1]), c("unsq", [-1]),
]
nodes = [
    h.make_node("Pad", ["audio", "pads"], ["padded"], mode="reflect"),
    h.make_node("Unsqueeze", ["padded", "unsq"], ["signal"]),
    h.make_node("HannWindow", ["n_fft32"], ["window"], periodic=1),
    h.make_node("STFT", ["signal", "hop", "window", "n_fft"], ["spec"], onesided=1),
    h.make_node("Mul", ["spec", "spec"], ["sq"]),
    h.make_node("ReduceSum", ["sq", "last"], ["power"], keepdims=0),
    h.make_node("MelWeightMatrix", ["mels", "n_fft32", "rate", "low", "high"], ["filters"]),
    h.make_node("MatMul", ["power", "filters"], ["mel"]),
    h.make_node("Max", ["mel", "floor"], ["clamped"]),
    h.make_node("Log", ["clamped"], ["ln"]),
    h.make_node("Mul", ["ln", "inv_ln10"], ["log10"]),
    h.make_node("ReduceMax", ["log10"], ["peak"], keepdims=1),
    h.make_node("Sub", ["peak", "eight"], ["lowest"]),
    h.make_node("Max", ["log10", "lowest"], ["kept"]),
    h.make_node("Add", ["kept", "four"], ["shifted"]),
    h.make_node("Div", ["shifted", "four"], ["scaled"]),
    h.make_node("Transpose", ["scaled"], ["output"], perm=[0, 2, 1]),
]
frames = 1 + samples // hop
graph = h.make_graph(
    nodes, name,
    [h.make_tensor_value_info("audio", T.FLOAT, [1, samples])],
    [h.make_tensor_value_info("output", T.FLOAT, [1, mels, frames])],
    inits,
)
model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], producer_name="make_log_mel.py")
model.ir_version = 8
onnx.checker.check_model(model, full_check=True)
path = os.path.join(out, name + ".onnx")
onnx.save(model, path)
rng = np.random.default_rng(0)
t = np.arange(samples) / rate
audio = (0.3 * np.sin(2 * np.pi * (200 + 1800 * t) * t) + 0.3 * rng.standard_normal(samples))
audio = audio.astype(np.float32)[None, :]
(want,) = ReferenceEvaluator(model).run(None, {"audio": audio})
(theirs,) = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"audio": audio})
np.save(os.path.join(out, name + ".input.npy"), audio)
np.save(os.path.join(out, name + ".output.npy"), want)
scale = float(np.abs(want).max())
print(path, want.shape, f"onnxruntime differs from the reference by {float(np.abs(theirs - want).max()) / scale:.2e} of its scale")
