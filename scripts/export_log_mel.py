#!/usr/bin/env python3
"""Whisper's log-mel front end, exported from PyTorch, for the wider suite:

    16 kHz audio [1, 16000] -> torch.stft (n_fft 400, hop 160, periodic
    Hann window, centred: reflect-padded 200 each side) -> power of each
    frame but the last -> the 80-bin Slaney mel filter bank (a constant,
    torchaudio's melscale_fbanks, as librosa made Whisper's) -> log10 of
    max(., 1e-10) -> max(., peak - 8) -> (. + 4) / 4 -> [1, 80, 100]

as `whisper.audio.log_mel_spectrogram` computes it, exported at opset 17
(TorchScript exporter: a reflect Pad, then an STFT of a [batch, steps]
signal, which onnxruntime takes though ONNX's reference implementation does
not; where it cannot export the STFT, the dynamo exporter), with the
outputs of onnxruntime (NAME.output.npy, the suite's reference, as for the
other models) and of the PyTorch module in double precision
(NAME.exact.npy: onnxruntime's STFT is an f32 FFT, and the script prints
how far the two are apart) for a seeded input, a chirp under noise:

    python3 scripts/export_log_mel.py tests/models

Needs torch, torchaudio, onnx and onnxruntime (the GPU machine has them).
"""
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
import torch
import torchaudio

RATE, N_FFT, HOP, MELS, SAMPLES = 16000, 400, 160, 80, 16000
NAME = "log_mel_whisper"


class LogMel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("window", torch.hann_window(N_FFT))
        bank = torchaudio.functional.melscale_fbanks(
            N_FFT // 2 + 1, 0.0, RATE / 2, MELS, RATE, norm="slaney", mel_scale="slaney")
        self.register_buffer("filters", bank.T.contiguous())

    def forward(self, audio):
        # Real and imaginary parts on a last axis of 2: the TorchScript
        # exporter takes no complex tensors.
        spec = torch.stft(audio, N_FFT, HOP, window=self.window, center=True,
                          pad_mode="reflect", return_complex=False)
        power = spec[..., :-1, :].pow(2).sum(-1)
        mel = self.filters @ power
        log_spec = torch.clamp(mel, min=1e-10).log10()
        log_spec = torch.maximum(log_spec, log_spec.max() - 8.0)
        return (log_spec + 4.0) / 4.0


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "."
    path = os.path.join(out, NAME + ".onnx")
    rng = np.random.default_rng(0)
    t = np.arange(SAMPLES) / RATE
    audio = 0.3 * np.sin(2 * np.pi * (200 + 1800 * t) * t) + 0.3 * rng.standard_normal(SAMPLES)
    audio = audio.astype(np.float32)[None, :]
    model = LogMel().eval()
    x = torch.from_numpy(audio)
    try:
        torch.onnx.export(model, (x,), path, input_names=["audio"], output_names=["output"],
                          opset_version=17, dynamo=False)
        exporter = "torchscript"
    except Exception as e:  # noqa: BLE001 - any failure falls back to dynamo
        print(f"TorchScript exporter failed ({e}); trying dynamo")
        torch.onnx.export(model, (x,), path, input_names=["audio"], output_names=["output"],
                          opset_version=17, dynamo=True, external_data=False)
        exporter = "dynamo"
    proto = onnx.load(path)
    onnx.checker.check_model(proto, full_check=True)
    ops = sorted({n.op_type for n in proto.graph.node})
    print(f"exported with the {exporter} exporter, torch {torch.__version__}: {len(proto.graph.node)} nodes, {ops}")
    with torch.no_grad():
        theirs = model(x).numpy()
        exact = model.double()(x.double()).numpy()
    (runtime,) = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"audio": audio})
    np.save(os.path.join(out, NAME + ".input.npy"), audio)
    np.save(os.path.join(out, NAME + ".output.npy"), runtime)
    np.save(os.path.join(out, NAME + ".exact.npy"), exact.astype(np.float32))
    scale = float(np.abs(exact).max())
    for name, got in [("onnxruntime", runtime), ("PyTorch", theirs)]:
        print(f"{name} (f32) differs from PyTorch in f64 by {np.abs(got - exact).max() / scale:.3g} of the scale {scale:.3g}")


if __name__ == "__main__":
    main()
