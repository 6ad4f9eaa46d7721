"""convert.py: `iabn convert IN OUT`, weights between the reference
implementation's PyTorch checkpoints and iabn's safetensors.

    iabn convert resnext101_ipabn_lr_512.pth.tar resnext101.safetensors
    iabn convert wide_resnet38_deeplab_vistas.pth.tar vistas.safetensors
    iabn convert resnet50-0676ba61.pth resnet50_tv.safetensors   (torchvision)
    iabn convert checkpoint_best.safetensors back.pth.tar        (the other way)

The direction follows IN's first bytes: a PyTorch file (zip "PK", or a pickle
0x80) becomes safetensors, a safetensors file becomes a PyTorch checkpoint.

PyTorch to iabn: the state_dict is taken from {"state_dict": ...} or the top
level; a "module." prefix (DistributedDataParallel) is removed; the reference
segmentation snapshots' nesting {"body": {...}, "head": {...}, "cls": {...}}
becomes body.*, head.*, cls.*; torchvision ResNet / ResNeXt / Wide ResNet
names (conv1, bn1, layerL.B.convK, downsample.{0,1}, fc) become the reference
post-activation names iabn uses (mod1.conv1, mod1.bn1,
modL+1.blockB+1.convs.convK, proj_conv, proj_bn, classifier.fc).  Every
tensor keeps its bits: floating tensors are written as float32 (a float64 or
float16 file is converted and says so), *.num_batches_tracked stays int64.

iabn to PyTorch: parameters, running statistics and counters (optimizer
state is left out) under the reference names; segmentation nets (body.*,
head.*, cls.*) nested as the reference's snapshots, classification nets
under "module." as its training script saves them; a BN without a counter
gets num_batches_tracked from the checkpoint's global_step (0 for plain
weights).  Options: --no-module-prefix, --flat (no body/head/cls nesting),
--torchvision (torchvision names; plain ResNets only).

Needs /usr/bin/python3 with torch (python3-torch); numpy.  Exit 0, 1 on a bad
input, 2 on bad usage.
"""
import argparse
import json
import os
import re
import struct
import sys
from collections import OrderedDict

import numpy as np

ST_DTYPES = {"F32": np.float32, "F64": np.float64, "F16": np.float16, "I64": np.int64,
             "I32": np.int32, "U8": np.uint8}
NP_TO_ST = {np.dtype(v): k for k, v in ST_DTYPES.items()}


class ConvertError(Exception):
    pass


# ---- safetensors ------------------------------------------------------------

def st_read(path):
    """(OrderedDict name -> numpy array, metadata dict)"""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ConvertError("%s: not a safetensors file (%d bytes)" % (path, len(raw)))
    (hlen,) = struct.unpack("<Q", raw[:8])
    if 8 + hlen > len(raw):
        raise ConvertError("%s: not a safetensors file (header length %d)" % (path, hlen))
    header = json.loads(raw[8:8 + hlen].decode("utf-8"))
    meta = header.pop("__metadata__", {}) or {}
    base = 8 + hlen
    out = OrderedDict()
    for name, ent in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        if ent["dtype"] not in ST_DTYPES:
            raise ConvertError("%s: tensor %s has dtype %s" % (path, name, ent["dtype"]))
        b, e = ent["data_offsets"]
        a = np.frombuffer(raw[base + b:base + e], dtype=ST_DTYPES[ent["dtype"]])
        out[name] = a.reshape(ent["shape"]).copy()
    return out, meta


def st_write(path, tensors, meta=None):
    """Writes tensors (name -> numpy array) atomically, in their order and
    back to back (the format has no padding between tensors; readers copy)."""
    header, chunks, off = OrderedDict(), [], 0
    for name, a in tensors.items():
        if not a.flags.c_contiguous:  # (np.ascontiguousarray would make a 0-d counter 1-d)
            a = a.copy(order="C")
        if a.dtype not in NP_TO_ST:
            raise ConvertError("%s: dtype %s cannot be written" % (name, a.dtype))
        data = a.tobytes()
        header[name] = {"dtype": NP_TO_ST[a.dtype], "shape": list(a.shape),
                        "data_offsets": [off, off + len(data)]}
        chunks.append(data)
        off += len(data)
    if meta:
        header["__metadata__"] = {str(k): str(v) for k, v in meta.items()}
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * ((-len(h)) % 8)
    tmp = path + ".tmp%d" % os.getpid()
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for c in chunks:
            f.write(c)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def is_torch_file(path):
    with open(path, "rb") as f:
        head = f.read(9)
    if len(head) >= 9 and head[8:9] == b"{":
        return False
    return head[:4] == b"PK\x03\x04" or (len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5)


# ---- names --------------------------------------------------------------------

TV_LAYER = re.compile(r"^layer(\d+)\.(\d+)\.(.*)$")


def torchvision_to_iabn(name):
    """torchvision ResNet-family name -> reference post-activation name"""
    if name.startswith("conv1."):
        return "mod1." + name
    if name.startswith("bn1."):
        return "mod1." + name
    if name.startswith("fc."):
        return "classifier." + name
    m = TV_LAYER.match(name)
    if not m:
        raise ConvertError("%s: not a torchvision ResNet name" % name)
    mod, block, rest = int(m.group(1)) + 1, int(m.group(2)) + 1, m.group(3)
    for a, b in (("downsample.0.", "proj_conv."), ("downsample.1.", "proj_bn.")):
        if rest.startswith(a):
            return "mod%d.block%d.%s%s" % (mod, block, b, rest[len(a):])
    if re.match(r"^(conv|bn)\d\.", rest):
        return "mod%d.block%d.convs.%s" % (mod, block, rest)
    raise ConvertError("%s: not a torchvision ResNet name" % name)


IABN_POST = re.compile(r"^mod(\d+)\.block(\d+)\.(convs\.)?(.*)$")


def iabn_to_torchvision(name):
    if name.startswith("mod1."):
        return name[len("mod1."):]
    if name.startswith("classifier.fc."):
        return "fc." + name[len("classifier.fc."):]
    m = IABN_POST.match(name)
    if not m:
        raise ConvertError("%s: has no torchvision name" % name)
    layer, block, rest = int(m.group(1)) - 1, int(m.group(2)) - 1, m.group(4)
    rest = rest.replace("proj_conv.", "downsample.0.").replace("proj_bn.", "downsample.1.")
    return "layer%d.%d.%s" % (layer, block, rest)


def looks_torchvision(names):
    return any(n.startswith("layer1.0.") for n in names) and any(n.startswith("conv1.") for n in names)


# ---- reference -> iabn ----------------------------------------------------------

def flatten_state(obj, path):
    """The state_dict of a loaded checkpoint, flattened to name -> tensor."""
    import torch
    if isinstance(obj, dict) and "state_dict" in obj:
        obj = obj["state_dict"]
    elif isinstance(obj, dict) and "model" in obj and isinstance(obj["model"], dict):
        obj = obj["model"]
    if not isinstance(obj, dict):
        raise ConvertError("%s: holds a %s, not a state_dict" % (path, type(obj).__name__))
    out = OrderedDict()

    def walk(d, prefix):
        for k, v in d.items():
            if isinstance(v, dict):
                walk(v, prefix + k + ".")
            elif isinstance(v, torch.Tensor):
                out[prefix + k] = v
            else:
                raise ConvertError("%s: entry %s%s is a %s, not a tensor" % (
                    path, prefix, k, type(v).__name__))

    walk(obj, "")
    if not out:
        raise ConvertError("%s: no tensors" % path)
    if all(k.startswith("module.") for k in out):
        out = OrderedDict((k[len("module."):], v) for k, v in out.items())
    return out


def to_iabn(src, dst, force_tv):
    import torch
    try:
        obj = torch.load(src, map_location="cpu")
    except Exception as ex:  # torch raises many kinds for a bad file
        raise ConvertError("%s: not a readable PyTorch checkpoint (%s)" % (src, ex))
    sd = flatten_state(obj, src)
    tv = force_tv or looks_torchvision(sd)
    out, notes = OrderedDict(), []
    for k, v in sd.items():
        name = torchvision_to_iabn(k) if tv else k
        a = v.detach().cpu().numpy()
        if a.dtype in (np.float64, np.float16):
            notes.append("%s %s -> float32" % (k, a.dtype))
            a = a.astype(np.float32)
        elif a.dtype not in (np.float32, np.int64):
            raise ConvertError("%s: tensor %s has dtype %s" % (src, k, a.dtype))
        if name in out:
            raise ConvertError("%s: two tensors become %s" % (src, name))
        out[name] = a
    meta = {"format": "iabn-weights-1", "source": os.path.basename(src),
            "source_layout": "torchvision" if tv else "reference"}
    if isinstance(obj, dict) and isinstance(obj.get("epoch"), int):
        meta["source_epoch"] = str(obj["epoch"])
    st_write(dst, out, meta)
    counters = sum(1 for k in out if k.endswith(".num_batches_tracked"))
    print("%s -> %s: %d tensors (%d counters), %s layout%s" % (
        src, dst, len(out), counters, meta["source_layout"],
        "; " + ", ".join(notes[:3]) + (" ..." if len(notes) > 3 else "") if notes else ""))


# ---- iabn -> reference ----------------------------------------------------------

def to_reference(src, dst, module_prefix, flat, tv):
    import torch
    tensors, meta = st_read(src)
    step = 0
    try:
        step = int(meta.get("global_step", 0))
    except ValueError:
        pass
    sd = OrderedDict()
    for k, a in tensors.items():
        if k.startswith("optimizer."):
            continue
        sd[k] = torch.from_numpy(a.copy())
        if k.endswith(".running_var"):
            counter = k[:-len("running_var")] + "num_batches_tracked"
            if counter not in tensors:
                sd[counter] = torch.tensor(step, dtype=torch.long)
    # keep each BN's entries in the reference's order (weight, bias, mean, var, counter)
    if tv:
        sd = OrderedDict((iabn_to_torchvision(k), v) for k, v in sd.items())
    seg = all(k.split(".")[0] in ("body", "head", "cls") for k in sd)
    if seg and not flat:
        nested = OrderedDict((p, OrderedDict()) for p in ("body", "head", "cls"))
        for k, v in sd.items():
            part, rest = k.split(".", 1)
            nested[part][rest] = v
        state = nested
    elif module_prefix and not tv:
        state = OrderedDict(("module." + k, v) for k, v in sd.items())
    else:
        state = sd
    # torchvision's files are the bare state_dict (model.load_state_dict(torch.load(f)))
    out = state if tv else {"state_dict": state}
    if not tv and "source_epoch" in meta:
        out["epoch"] = int(meta["source_epoch"])
    elif not tv and "epoch" in meta:
        out["epoch"] = int(meta["epoch"])
    tmp = dst + ".tmp%d" % os.getpid()
    torch.save(out, tmp)
    os.replace(tmp, dst)
    print("%s -> %s: %d tensors, %s" % (src, dst, len(sd),
                                       "nested body/head/cls" if seg and not flat else
                                       "module. prefix" if module_prefix and not tv else "flat"))


def main(argv=None):
    ap = argparse.ArgumentParser(prog="iabn convert",
                                 description="weights between reference PyTorch checkpoints "
                                             "and iabn safetensors (direction from IN's bytes)")
    ap.add_argument("input", metavar="IN")
    ap.add_argument("output", metavar="OUT")
    ap.add_argument("--torchvision", action="store_true",
                    help="torchvision ResNet names (guessed from the names when reading .pth)")
    ap.add_argument("--no-module-prefix", action="store_true",
                    help="to PyTorch: classification names without 'module.'")
    ap.add_argument("--flat", action="store_true",
                    help="to PyTorch: segmentation names flat (body.*), not nested")
    a = ap.parse_args(argv)
    try:
        if not os.path.isfile(a.input):
            raise ConvertError("%s: no such file" % a.input)
        if is_torch_file(a.input):
            to_iabn(a.input, a.output, a.torchvision)
        else:
            to_reference(a.input, a.output, not a.no_module_prefix, a.flat, a.torchvision)
    except ConvertError as ex:
        print("iabn convert: %s" % ex, file=sys.stderr)
        return 1
    except ImportError as ex:
        print("iabn convert: needs PyTorch (apt-get install python3-torch): %s" % ex,
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
