#!/usr/bin/env python3
"""Export real network architectures to ONNX, with onnxruntime reference outputs.

Runs where torch, torchvision, transformers, torchaudio, onnx and onnxruntime are
installed (the GPU machine has them all).

    python3 export_models.py OUT_DIR [--suite shared|wider|full] [--exporter torchscript|dynamo]
                             [--quantize DIR] [--only NAME]...

--suite shared: the reduced-width, full-depth Swin-T, ViT, ConvNeXt and BERT of
  tests/models/ (the eight, with both exporters).
--suite wider: the wider suite of tests/models/ (an LLM decoder, a Conformer
  speech encoder, MobileNetV3, EfficientNet, RegNetX and a detection head
  ending in NonMaxSuppression), reduced in width.
--suite full: the published sizes (Swin-T, ViT-B/16, ConvNeXt-T, RegNetX-3.2GF,
  ResNeXt-50), for speed measurements; no reference outputs are written.
--only NAME: export only the named networks of the suite (their weights
  differ from a whole suite's run, as the seed is shared).
--quantize DIR: also quantize DIR/convnext_w16.onnx (static, QDQ, per-channel
  int8 weights, uint8 activations) and DIR/bert_l2_w64.onnx (dynamic: int8
  weights, MatMulInteger) with onnxruntime's quantization tool.

Each exported network gets NAME.input.npy and NAME.output.npy (onnxruntime's
output for that input). Weights are random (seeded); nothing is downloaded.
"""
import argparse, collections, json, os, sys, traceback
import numpy as np
import torch, torchvision, onnx
from torchvision.models import swin_transformer as st, vision_transformer as vt, convnext as cx, regnet as rg, resnet as rn


def shared():
    yield "swin_t_w24", st.SwinTransformer([4, 4], 24, [2, 2, 6, 2], [1, 2, 4, 8], [7, 7], stochastic_depth_prob=0.0, num_classes=10), (1, 3, 224, 224)
    yield "vit_l4_w64", vt.VisionTransformer(224, 16, 4, 4, 64, 128, num_classes=10), (1, 3, 224, 224)
    blocks = [cx.CNBlockConfig(16, 32, 3), cx.CNBlockConfig(32, 64, 3), cx.CNBlockConfig(64, 128, 9), cx.CNBlockConfig(128, None, 3)]
    yield "convnext_w16", cx.ConvNeXt(blocks, stochastic_depth_prob=0.0, num_classes=10), (1, 3, 224, 224)
    from transformers import BertConfig, BertModel

    cfg = BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, attn_implementation="eager")
    yield "bert_l2_w64", Embeds(BertModel(cfg)), (1, 128, 64)


class Embeds(torch.nn.Module):
    """A transformers model fed embeddings, returning its last hidden state."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, x):
        return self.m(inputs_embeds=x, use_cache=False).last_hidden_state


class RmsNorm(torch.nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.w, self.eps = torch.nn.Parameter(1 + 0.1 * torch.randn(d)), eps

    def forward(self, x):
        return self.w * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)


class LlamaBlock(torch.nn.Module):
    """A Llama decoder layer written out:
    RMSNorm, rotary position embedding, grouped-query causal attention, gated SiLU MLP."""

    def __init__(self, d=64, heads=4, kv_heads=2, ffn=172, seq=32):
        super().__init__()
        self.h, self.kv, self.hd = heads, kv_heads, d // heads
        self.n1, self.n2 = RmsNorm(d), RmsNorm(d)
        self.q = torch.nn.Linear(d, d, bias=False)
        self.k = torch.nn.Linear(d, kv_heads * self.hd, bias=False)
        self.v = torch.nn.Linear(d, kv_heads * self.hd, bias=False)
        self.o = torch.nn.Linear(d, d, bias=False)
        self.gate = torch.nn.Linear(d, ffn, bias=False)
        self.up = torch.nn.Linear(d, ffn, bias=False)
        self.down = torch.nn.Linear(ffn, d, bias=False)
        self.register_buffer("inv_freq", 1.0 / (10000 ** (torch.arange(0, self.hd, 2).float() / self.hd)))
        self.register_buffer("mask", torch.full((seq, seq), float("-inf")).triu(1))

    def rope(self, x, cos, sin):
        a, b = x[..., : self.hd // 2], x[..., self.hd // 2:]
        return x * cos + torch.cat([-b, a], -1) * sin

    def forward(self, x):
        b, s, d = x.shape
        pos = torch.arange(s, dtype=torch.float32)
        f = pos[:, None] * self.inv_freq[None, :]
        f = torch.cat([f, f], -1)
        cos, sin = f.cos(), f.sin()
        h = self.n1(x)
        q = self.q(h).view(b, s, self.h, self.hd).transpose(1, 2)
        k = self.k(h).view(b, s, self.kv, self.hd).transpose(1, 2)
        v = self.v(h).view(b, s, self.kv, self.hd).transpose(1, 2)
        q, k = self.rope(q, cos, sin), self.rope(k, cos, sin)
        k = k.repeat_interleave(self.h // self.kv, 1)
        v = v.repeat_interleave(self.h // self.kv, 1)
        a = torch.softmax(q @ k.transpose(-1, -2) / self.hd ** 0.5 + self.mask[:s, :s], -1) @ v
        x = x + self.o(a.transpose(1, 2).reshape(b, s, d))
        h = self.n2(x)
        return x + self.down(torch.nn.functional.silu(self.gate(h)) * self.up(h))


class GptNeoXLayer(torch.nn.Module):
    """A GPT-NeoX decoder layer written out as transformers' GPTNeoXLayer computes
    it: one fused QKV projection split per head, rotary embedding on the first
    quarter of each head's channels (applied through slices and concatenation),
    causal attention, and attention and MLP in parallel on the same input."""

    def __init__(self, d=64, heads=4, rotary_pct=0.25, ffn=256, seq=32):
        super().__init__()
        self.h, self.hd = heads, d // heads
        self.rot = int(self.hd * rotary_pct)
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.dense = torch.nn.Linear(d, d)
        self.up = torch.nn.Linear(d, ffn)
        self.down = torch.nn.Linear(ffn, d)
        self.register_buffer("inv_freq", 1.0 / (10000 ** (torch.arange(0, self.rot, 2).float() / self.rot)))
        self.register_buffer("causal", torch.ones(seq, seq, dtype=torch.bool).tril())

    def rotate_half(self, x):
        return torch.cat([-x[..., self.rot // 2:], x[..., : self.rot // 2]], -1)

    def rope(self, x, cos, sin):
        r, rest = x[..., : self.rot], x[..., self.rot:]
        return torch.cat([r * cos + self.rotate_half(r) * sin, rest], -1)

    def forward(self, x):
        b, s, d = x.shape
        f = torch.arange(s, dtype=torch.float32)[:, None] * self.inv_freq[None, :]
        f = torch.cat([f, f], -1)
        cos, sin = f.cos(), f.sin()
        qkv = self.qkv(self.ln1(x)).view(b, s, self.h, 3 * self.hd).permute(0, 2, 1, 3)
        q, k, v = qkv[..., : self.hd], qkv[..., self.hd: 2 * self.hd], qkv[..., 2 * self.hd:]
        q, k = self.rope(q, cos, sin), self.rope(k, cos, sin)
        scores = q @ k.transpose(-1, -2) / self.hd ** 0.5
        scores = torch.where(self.causal[:s, :s], scores, torch.finfo(scores.dtype).min)
        a = (torch.softmax(scores, -1) @ v).permute(0, 2, 1, 3).reshape(b, s, d)
        mlp = self.down(torch.nn.functional.gelu(self.up(self.ln2(x))))
        return x + self.dense(a) + mlp


class GptNeoX(torch.nn.Module):
    def __init__(self, layers=2, d=64):
        super().__init__()
        self.layers = torch.nn.Sequential(*[GptNeoXLayer(d) for _ in range(layers)])
        self.norm = torch.nn.LayerNorm(d)

    def forward(self, x):
        return self.norm(self.layers(x))


class Conformer(torch.nn.Module):
    def __init__(self, frames):
        super().__init__()
        import torchaudio

        self.m = torchaudio.models.Conformer(input_dim=64, num_heads=4, ffn_dim=128, num_layers=2, depthwise_conv_kernel_size=15, dropout=0.0)
        self.register_buffer("lengths", torch.tensor([frames]))

    def forward(self, x):
        return self.m(x, self.lengths)[0]


class DetectionHead(torch.nn.Module):
    """A small single-shot detector: a strided conv backbone, per-anchor box
    regression and class scores (sigmoid), boxes decoded to corners. The
    NonMaxSuppression node is appended to the exported graph (see with_nms)."""

    def __init__(self, classes=4, anchors=3):
        super().__init__()
        c = [3, 16, 32, 48]
        layers = []
        for a, b in zip(c, c[1:]):
            layers += [torch.nn.Conv2d(a, b, 3, 2, 1), torch.nn.BatchNorm2d(b), torch.nn.ReLU()]
        self.body = torch.nn.Sequential(*layers)
        self.box = torch.nn.Conv2d(48, anchors * 4, 3, 1, 1)
        self.cls = torch.nn.Conv2d(48, anchors * classes, 3, 1, 1)
        self.classes = classes

    def forward(self, x):
        f = self.body(x)
        n = f.shape[0]
        d = self.box(f).permute(0, 2, 3, 1).reshape(n, -1, 4)
        centre, size = torch.sigmoid(d[..., :2]), torch.sigmoid(d[..., 2:]) * 0.5
        boxes = torch.cat([centre - size / 2, centre + size / 2], -1)
        scores = torch.sigmoid(self.cls(f).permute(0, 2, 3, 1).reshape(n, -1, self.classes)).transpose(1, 2)
        return boxes, scores


def wider():
    # transformers' LlamaModel does not trace (its causal mask uses aten::diff,
    # which the exporter lacks), so the block is written out.
    yield "llama_block_w64", torch.nn.Sequential(LlamaBlock(), LlamaBlock()), (1, 32, 64)
    yield "conformer_l2_w64", Conformer(64), (1, 64, 64)
    yield "gpt_neox_l2_w64", GptNeoX(), (1, 32, 64)
    from torchvision.models import mobilenetv3 as mb, efficientnet as ef

    setting, last = mb._mobilenet_v3_conf("mobilenet_v3_small", width_mult=0.5)
    yield "mobilenet_v3_w05", mb.MobileNetV3(setting, last, num_classes=10), (1, 3, 128, 128)
    setting, last = ef._efficientnet_conf("efficientnet_b0", width_mult=0.25, depth_mult=1.0)
    yield "efficientnet_b0_w025", ef.EfficientNet(setting, 0.2, stochastic_depth_prob=0.0, num_classes=10, last_channel=last), (1, 3, 128, 128)
    params = rg.BlockParams.from_init_params(depth=22, w_0=8, w_a=8.0, w_m=2.5, group_width=8)
    yield "regnet_x_w8", rg.RegNet(params, num_classes=10), (1, 3, 128, 128)
    yield "detection_nms", DetectionHead(), (1, 3, 128, 128)


def full():
    for name in ["swin_t", "vit_b_16", "convnext_tiny", "regnet_x_3_2gf", "resnext50_32x4d"]:
        yield name, getattr(torchvision.models, name)(), (1, 3, 224, 224)


def randomize_zero_weights(model):
    """Give weights initialized to zero random values: torchvision zeroes
    ViT's classifier, whose output would then be zero whatever the network
    computes, and a comparison of outputs would check nothing. A generator
    of its own, so that the other networks' weights stay as they were."""
    g = torch.Generator().manual_seed(0)
    for m in model.modules():
        if isinstance(m, (torch.nn.Linear, torch.nn.Conv2d)) and not m.weight.data.any():
            m.weight.data.normal_(0.0, 0.02, generator=g)


def with_nms(path):
    """Append NonMaxSuppression (20 boxes per class, IoU 0.5, score 0.5) to a
    graph whose outputs are boxes [N, B, 4] and scores [N, C, B]."""
    from onnx import helper, TensorProto

    m = onnx.load(path)
    g = m.graph
    boxes, scores = g.output[0].name, g.output[1].name
    for name, kind, value in [("nms_max", TensorProto.INT64, [20]), ("nms_iou", TensorProto.FLOAT, [0.5]), ("nms_score", TensorProto.FLOAT, [0.5])]:
        g.initializer.append(helper.make_tensor(name, kind, [1], value))
    g.node.append(helper.make_node("NonMaxSuppression", [boxes, scores, "nms_max", "nms_iou", "nms_score"], ["output"]))
    del g.output[:]
    g.output.append(helper.make_tensor_value_info("output", TensorProto.INT64, ["selected", 3]))
    onnx.checker.check_model(m)
    onnx.save(m, path)


def calibrate_batchnorm(model, shape):
    """Give batch normalization the statistics of its inputs, as training would:
    with a fresh network's unit statistics, activations shrink layer by layer
    (torchvision's MobileNetV3 and EfficientNet end near 1e-14)."""
    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if not norms:
        return
    for m in norms:
        m.reset_running_stats()
        m.momentum = None
    model.train()
    with torch.no_grad():
        for _ in range(8):
            model(torch.randn(*shape))


def damp_residual_branches(model, gain=0.2):
    """Scale the last normalization of every residual branch, as trained
    networks' branches are small beside their skip connections. A fresh
    network with calibrated normalization is chaotic instead: RegNetX then
    amplifies one f16 rounding of its input 30 times (ResNeXt-50 turns it
    into 7.3e-3 of its f32 output's scale), so no f16 run could match its
    f32 output to 1e-2."""
    for m in model.modules():
        if getattr(m, "use_res_connect", False):  # MobileNetV3, EfficientNet
            norm = m.block[-1][1]
        elif isinstance(m, rg.ResBottleneckBlock):
            norm = m.f.c[1]
        elif isinstance(m, rn.Bottleneck):  # ResNet-50 and deeper, Wide ResNet, ResNeXt
            norm = m.bn3
        elif isinstance(m, rn.BasicBlock):  # ResNet-18 and -34
            norm = m.bn2
        else:
            continue
        norm.weight.data *= gain
        norm.bias.data *= gain


def export(name, model, shape, out, exporter, reference):
    randomize_zero_weights(model)
    calibrate_batchnorm(model, shape)
    damp_residual_branches(model)
    model.eval()
    x = torch.randn(*shape)
    path = os.path.join(out, name + ".onnx")
    outputs = ["boxes", "scores"] if name == "detection_nms" else ["output"]
    with torch.no_grad():
        if exporter == "dynamo":
            torch.onnx.export(model, (x,), path, dynamo=True, opset_version=18, input_names=["input"], output_names=outputs)
        else:
            torch.onnx.export(model, (x,), path, dynamo=False, opset_version=17, do_constant_folding=True, input_names=["input"], output_names=outputs)
    if name == "detection_nms":
        if reference:
            save_head_outputs(path, x.numpy())
        with_nms(path)
    graph = onnx.load(path).graph
    info = dict(name=name, input=list(shape), exporter=exporter, nodes=len(graph.node), model=type(model).__name__,
                ops=dict(collections.Counter(n.op_type for n in graph.node).most_common()))
    if reference:
        save_reference(path, x.numpy(), info)
    print(json.dumps(info), flush=True)
    return info


def save_head_outputs(path, x):
    """onnxruntime's boxes and scores of the detection head before
    NonMaxSuppression, as NAME.boxes.npy and NAME.scores.npy: the values an
    f16 run is compared on, since which boxes NMS keeps is not continuous
    in them."""
    import onnxruntime as ort

    boxes, scores = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"input": x})
    stem = path[: -len(".onnx")]
    np.save(stem + ".boxes.npy", boxes)
    np.save(stem + ".scores.npy", scores)


def save_reference(path, x, info):
    import onnxruntime as ort

    y = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]
    stem = path[: -len(".onnx")]
    np.save(stem + ".input.npy", x)
    np.save(stem + ".output.npy", y)
    info["output"] = list(y.shape)


def quantize(src, out):
    """Two shared networks quantized with onnxruntime's tool, as they ship to phones."""
    from onnxruntime import quantization as q

    infos = []
    rng = np.random.default_rng(0)

    class Calibration(q.CalibrationDataReader):
        def __init__(self, shape):
            self.batches = iter([{"input": rng.standard_normal(shape).astype(np.float32)} for _ in range(8)])

        def get_next(self):
            return next(self.batches, None)

    shape = (1, 3, 224, 224)
    path = os.path.join(out, "convnext_w16_qdq.onnx")
    q.quantize_static(os.path.join(src, "convnext_w16.onnx"), path, Calibration(shape), quant_format=q.QuantFormat.QDQ,
                      per_channel=True, activation_type=q.QuantType.QUInt8, weight_type=q.QuantType.QInt8)
    infos.append((path, shape))
    shape = (1, 128, 64)
    path = os.path.join(out, "bert_l2_w64_int8.onnx")
    q.quantize_dynamic(os.path.join(src, "bert_l2_w64.onnx"), path, weight_type=q.QuantType.QInt8)
    infos.append((path, shape))
    for path, shape in infos:
        graph = onnx.load(path).graph
        info = dict(name=os.path.basename(path)[:-5], input=list(shape), nodes=len(graph.node), quantized=True,
                    ops=dict(collections.Counter(n.op_type for n in graph.node).most_common()))
        save_reference(path, rng.standard_normal(shape).astype(np.float32), info)
        print(json.dumps(info), flush=True)
        yield info


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--suite", choices=["shared", "wider", "full"], default="shared")
    p.add_argument("--full", action="store_true", help="the same as --suite full")
    p.add_argument("--exporter", choices=["torchscript", "dynamo"], default="torchscript")
    p.add_argument("--quantize", metavar="DIR")
    p.add_argument("--only", metavar="NAME", action="append", help="export only this network of the suite (repeatable)")
    a = p.parse_args()
    suite = "full" if a.full else a.suite
    os.makedirs(a.out, exist_ok=True)
    torch.manual_seed(0)
    models = {"shared": shared, "wider": wider, "full": full}[suite]()
    infos, failed = [], []
    for n, m, s in models:
        if a.only and n not in a.only:
            continue
        try:
            infos.append(export(n, m, s, a.out, a.exporter, suite != "full"))
        except Exception:
            traceback.print_exc()
            failed.append(n)
    if a.quantize:
        infos += list(quantize(a.quantize, a.out))
    versions = {m.__name__: m.__version__ for m in [torch, torchvision, onnx]}
    json.dump(dict(versions=versions, models=infos), open(os.path.join(a.out, "models.json"), "w"), indent=1)
    if failed:
        sys.exit(f"failed to export: {', '.join(failed)}")


if __name__ == "__main__":
    main()
