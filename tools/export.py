"""export.py: `iabn export CHECKPOINT -o OUT --format safetensors|onnx
[--fold-bn]`, a trained model for inference.

Every InPlace-ABN unit becomes a plain BatchNorm + activation: the in-place
modes scale by |gamma| + eps, so the exported scale is gamma_plain =
|gamma| + eps (units trained with plain gamma keep it), which any framework's
BatchNorm (torch.nn.BatchNorm2d, ONNX BatchNormalization) computes as is.
--fold-bn folds each BN into the convolution before it where that
convolution feeds nothing else: W' = W * f, b' = (b - mean) * f + beta with
f = gamma_plain / sqrt(var + eps); the activation stays.

  --format safetensors  the tensors under their reference names (BN weight =
                        gamma_plain; folded BNs dropped and their convs given a
                        bias); every remaining BN keeps num_batches_tracked
                        (from the file, or the checkpoint's global_step)
  --format onnx         opset 13 (python3-onnx), the evaluation graph of the
                        model at --size (default: the model's input), batch
                        dynamic for classification nets

The model comes from the checkpoint's config (iabn train writes it) or from
--arch / --act / --bn / --input-3x3 / --dilation (converted reference
weights); classes from the classifier's shape.  The graph comes from
`iabn export --graph` (the iabn program beside this script).
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from convert import ConvertError, st_read, st_write  # noqa: E402


def model_settings(a, meta, tensors):
    cfg = {}
    if "config" in meta:
        try:
            cfg = json.loads(meta["config"]).get("network", {})
        except ValueError:
            raise ConvertError("%s: its config metadata is not JSON" % a.checkpoint)
    arch = a.arch or cfg.get("arch")
    if not arch:
        raise ConvertError("%s has no config: name the model with --arch (iabn models)" % a.checkpoint)
    act = a.act
    if not act and "activation" in cfg:
        act = cfg["activation"]
        if "activation_param" in cfg and act in ("leaky_relu", "elu"):
            act += ":%r" % float(cfg["activation_param"])
    bn = a.bn or cfg.get("bn_mode")
    i3 = a.input_3x3 if a.input_3x3 is not None else int(bool(cfg.get("input_3x3", True)))
    dil = a.dilation if a.dilation is not None else int(cfg.get("dilation", 1) > 1)
    for k in ("classifier.fc.weight", "cls.weight"):
        if k in tensors:
            classes = tensors[k].shape[0]
            break
    else:
        raise ConvertError("%s: no classifier.fc.weight or cls.weight to count the classes" %
                           a.checkpoint)
    # `iabn export --graph` takes the option table's flags
    args = [arch, "--classes", str(classes)] + ([] if i3 else ["--no-input-3x3"]) + \
        (["--dilation"] if dil else [])
    if act:
        kind, _, param = act.partition(":")
        args += ["--act", kind] + (["--act-param", param] if param else [])
    if bn:
        args += ["--bn", bn]
    if a.size:
        args += ["--size", a.size]
    return arch, args


def graph_of(a, gargs):
    exe = a.iabn or os.environ.get("IABN_EXE") or os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "iabn")
    p = subprocess.run([exe, "export", "--graph"] + gargs, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, universal_newlines=True)
    if p.returncode != 0:
        raise ConvertError(p.stderr.strip() or "iabn export --graph failed")
    return json.loads(p.stdout)


class Plan:
    """The graph with BNs made plain and, with fold, folded into convs."""

    def __init__(self, graph, tensors, fold):
        self.g, self.t, self.alias = graph, dict(tensors), {}
        self.nodes = []  # (kind, node, extra)
        consumers = {}
        for n in graph["nodes"]:
            for i in n["in"]:
                consumers[i] = consumers.get(i, 0) + 1
        producer = {}
        for n in graph["nodes"]:
            for o in n["out"]:
                producer[o] = n
        self.folded = 0
        for n in graph["nodes"]:
            at = n["attrs"]
            if at["op"] != "batchnorm":
                self.nodes.append(n)
                continue
            x, gamma, beta, mean, var = n["in"]
            g = self.t[gamma].astype(np.float64)
            scale = (np.abs(g) + at["eps"]) if at["abs_gamma"] else g
            scale = scale.astype(np.float32)
            conv = producer.get(x)
            if fold and conv and conv["attrs"]["op"] == "conv2d" and consumers.get(x) == 1 \
                    and x != graph["output"]:
                f = scale.astype(np.float64) / np.sqrt(self.t[var].astype(np.float64) + at["eps"])
                w = conv["in"][1]
                self.t[w] = (self.t[w].astype(np.float64) * f[:, None, None, None]).astype(np.float32)
                b = conv["in"][2] if conv["attrs"]["bias"] else None
                b0 = self.t[b].astype(np.float64) if b else 0.0
                bias = ((b0 - self.t[mean]) * f + self.t[beta]).astype(np.float32)
                bname = b or w[:-len("weight")] + "bias"
                self.t[bname] = bias
                if not b:
                    conv["in"].append(bname)
                    conv["attrs"]["bias"] = 1
                for k in (gamma, beta, mean, var):
                    self.t.pop(k, None)
                self.t.pop(gamma[:-len("weight")] + "num_batches_tracked", None)
                self.folded += 1
                self.nodes.append({"name": n["name"], "in": [x], "out": n["out"],
                                   "attrs": {"op": "activation", "act": at["act"],
                                             "act_param": at["act_param"]}})
            else:
                self.t[gamma] = scale
                self.nodes.append(n)


def write_safetensors(a, plan, meta, tensors):
    step = 0
    try:
        step = int(meta.get("global_step", 0))
    except ValueError:
        pass
    out = {}
    for k, v in plan.t.items():
        if k.startswith("optimizer."):
            continue
        out[k] = v
        if k.endswith(".running_var"):
            c = k[:-len("running_var")] + "num_batches_tracked"
            if c not in plan.t:
                out[c] = np.array(step, dtype=np.int64)
    st_write(a.output, out, {"format": "iabn-export-1", "bn": "plain",
                             "folded_bn": str(plan.folded), "source": os.path.basename(a.checkpoint)})
    return len(out)


def write_onnx(a, plan, arch):
    try:
        import onnx
        from onnx import TensorProto, helper, numpy_helper
    except ImportError as ex:
        raise ConvertError("--format onnx needs python3-onnx (apt-get install python3-onnx): %s" % ex)
    g = plan.g
    inits, nodes, used = [], [], set()

    def init(name):
        if name not in used:
            used.add(name)
            inits.append(numpy_helper.from_array(np.asarray(plan.t[name], dtype=np.float32), name))
        return name

    def const(name, arr):
        inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    def act_node(at, x, y):
        k = at["act"]
        if k == "leaky_relu":
            return [helper.make_node("LeakyRelu", [x], [y], alpha=float(at["act_param"]))]
        if k == "elu":
            return [helper.make_node("Elu", [x], [y], alpha=float(at["act_param"]))]
        if k == "relu":
            return [helper.make_node("Relu", [x], [y])]
        return [helper.make_node("Identity", [x], [y])]

    shapes = g["tensors"]
    for n in plan.nodes:
        at, i, o, name = n["attrs"], n["in"], n["out"], n["name"]
        op = at["op"]
        if op == "conv2d":
            ins = [i[0], init(i[1])] + ([init(i[2])] if at["bias"] else [])
            p, d = at["pad"], at["dilation"]
            nodes.append(helper.make_node("Conv", ins, [o[0]], name=name,
                                          kernel_shape=at["kernel"], strides=[at["stride"]] * 2,
                                          pads=[p] * 4, dilations=[d] * 2, group=at["groups"]))
        elif op == "batchnorm":
            y = o[0] + ".bn" if at["act"] != "identity" else o[0]
            nodes.append(helper.make_node("BatchNormalization",
                                          [i[0]] + [init(k) for k in i[1:5]], [y], name=name,
                                          epsilon=float(at["eps"])))
            if at["act"] != "identity":
                nodes += act_node(at, y, o[0])
        elif op == "activation":
            nodes += act_node(at, i[0], o[0])
        elif op == "maxpool":
            nodes.append(helper.make_node("MaxPool", [i[0]], [o[0]], name=name,
                                          kernel_shape=[at["kernel"]] * 2,
                                          strides=[at["stride"]] * 2, pads=[at["pad"]] * 4))
        elif op == "global_avgpool":
            nodes.append(helper.make_node("GlobalAveragePool", [i[0]], [o[0]], name=name))
        elif op == "avgpool_window":
            kh, kw = at["kernel"]
            ph, pw = at["pooled"]
            top, left = at["top_left"]
            H, W = shapes[o[0]]["shape"][2:]
            if [H, W] == [ph, pw]:  # plain pooling (DenseNet's transitions)
                nodes.append(helper.make_node("AveragePool", [i[0]], [o[0]], name=name,
                                              kernel_shape=[kh, kw], strides=at["stride"]))
            else:
                nodes.append(helper.make_node("AveragePool", [i[0]], [o[0] + ".pooled"],
                                              name=name, kernel_shape=[kh, kw], strides=[1, 1]))
                pads = const(o[0] + ".pads", np.array([0, 0, top, left, 0, 0, H - ph - top,
                                                       W - pw - left], dtype=np.int64))
                nodes.append(helper.make_node("Pad", [o[0] + ".pooled", pads], [o[0]],
                                              name=name + ".pad", mode="edge"))
        elif op == "linear":
            flat = o[0] + ".flat"
            nodes.append(helper.make_node("Flatten", [i[0]], [flat], name=name + ".flatten", axis=1))
            ins = [flat, init(i[1])] + ([init(i[2])] if at["bias"] else [])
            nodes.append(helper.make_node("Gemm", ins, [o[0]], name=name, transB=1))
        elif op in ("add", "add_bcast"):
            nodes.append(helper.make_node("Add", i[:2], [o[0]], name=name))
        elif op == "concat":
            nodes.append(helper.make_node("Concat", i, [o[0]], name=name, axis=1))
        elif op in ("copy", "dropout2d"):
            nodes.append(helper.make_node("Identity", [i[0]], [o[0]], name=name))
        elif op == "upsample_bilinear":
            sizes = const(o[0] + ".sizes", np.array(shapes[o[0]]["shape"], dtype=np.int64))
            nodes.append(helper.make_node("Resize", [i[0], "", "", sizes], [o[0]], name=name,
                                          mode="linear",
                                          coordinate_transformation_mode="pytorch_half_pixel"))
        else:
            raise ConvertError("node %s: op %s has no ONNX form here" % (name, op))
    in_shape = list(g["input"]["shape"])
    out_shape = list(shapes[g["output"]]["shape"])
    in_shape[0] = out_shape[0] = "batch"
    graph = helper.make_graph(
        nodes, arch,
        [helper.make_tensor_value_info(g["input"]["name"], TensorProto.FLOAT, in_shape)],
        [helper.make_tensor_value_info(g["output"], TensorProto.FLOAT, out_shape)], inits)
    model = helper.make_model(graph, producer_name="iabn export",
                              opset_imports=[helper.make_opsetid("", a.opset)])
    model.ir_version = 7  # opset 13's IR; readers older than onnx 1.12 accept it
    onnx.checker.check_model(model)
    tmp = a.output + ".tmp%d" % os.getpid()
    onnx.save(model, tmp)
    os.replace(tmp, a.output)
    return len(nodes), len(inits)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="iabn export", description=__doc__.split("\n")[0])
    ap.add_argument("checkpoint", metavar="CHECKPOINT")
    ap.add_argument("-o", "--output", required=True, metavar="OUT")
    ap.add_argument("--format", required=True, choices=["safetensors", "onnx"])
    ap.add_argument("--fold-bn", action="store_true")
    ap.add_argument("--arch", help="model name when the checkpoint has no config (iabn models)")
    ap.add_argument("--act", help="activation KIND[:PARAM] (default: config, else leaky_relu:0.01)")
    ap.add_argument("--bn", help="BN mode the weights were trained with (default: config)")
    ap.add_argument("--input-3x3", type=int, choices=[0, 1])
    ap.add_argument("--dilation", type=int, choices=[0, 1])
    ap.add_argument("--size", help="HxW of the exported graph (default: the model's input)")
    ap.add_argument("--opset", type=int, default=13)
    ap.add_argument("--iabn", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.opset < 13:
        ap.error("--opset must be 13 or later")
    try:
        if not os.path.isfile(a.checkpoint):
            raise ConvertError("%s: no such file" % a.checkpoint)
        tensors, meta = st_read(a.checkpoint)
        tensors = {k: v for k, v in tensors.items() if not k.startswith("optimizer.")}
        arch, gargs = model_settings(a, meta, tensors)
        graph = graph_of(a, gargs)
        missing = [n for n, t in graph["tensors"].items()
                   if t["kind"] in ("param", "state") and n not in tensors]
        if missing:
            raise ConvertError("%s does not fit %s: %d tensors missing (%s)" % (
                a.checkpoint, arch, len(missing), ", ".join(missing[:4])))
        plan = Plan(graph, tensors, a.fold_bn)
        if a.format == "safetensors":
            n = write_safetensors(a, plan, meta, tensors)
            what = "%d tensors" % n
        else:
            nn_, ni = write_onnx(a, plan, arch)
            what = "ONNX opset %d, %d nodes, %d initializers, onnx.checker ok" % (a.opset, nn_, ni)
        print("%s -> %s: %s, plain BN (gamma_plain = |gamma| + eps)%s" % (
            a.checkpoint, a.output, what,
            ", %d BNs folded into their convolutions" % plan.folded if a.fold_bn else ""))
    except ConvertError as ex:
        print("iabn export: %s" % ex, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
