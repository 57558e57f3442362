"""Writes docs/coverage.md: which of PyTorch 2.13's public names tinyamp has, from PyTorch's own name lists.

Two steps, so that CI needs no torch:

    python docs/make_coverage.py --names   # with torch 2.13: PyTorch's lists -> docs/torch_2_13_api.json
    python docs/make_coverage.py           # tinyamp's answers -> docs/coverage.md
    python docs/make_coverage.py --check   # exit 1 if docs/coverage.md is stale (tests/porting/test_coverage_table.py)

Each name is *present* (tinyamp has it under that name), *differs* (present, with
the documented difference in ``DIFFERENCES``) or *absent*. ``USED`` marks the
names that real training code touches (nanoGPT, timm's train.py, torchvision's
classification/detection/segmentation references, Hugging Face's no-trainer
examples, and the codebases of the porting issues): those are listed first.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
NAMES = HERE / "torch_2_13_api.json"
TABLE = HERE / "coverage.md"

SECTIONS = ["torch", "torch.nn (modules)", "torch.nn.functional", "Tensor", "torch.optim", "torch.optim.lr_scheduler",
            "torch.utils.data", "torch.amp", "torch.cuda"]

# Helpers that torch.nn.functional imports but does not document as functions.
_NOT_FUNCTIONAL = {"Optional", "boolean_dispatch", "handle_torch_function", "has_torch_function",
                   "has_torch_function_unary", "has_torch_function_variadic", "assert_int_or_pair"}

# Names real training code uses, per section (see the module docstring).
USED = {
    "torch": """abs allclose amp arange argmax argsort as_tensor autocast autograd backends bfloat16 bmm bool cat
        chunk clamp clip compile cuda device distributed dtype einsum empty exp eye finfo flatten flip float float16
        float32 from_numpy full full_like gather get_rng_state inference_mode int int64 is_tensor isfinite jit
        linspace load log long manual_seed matmul max mean meshgrid min multinomial nn no_grad norm ones ones_like
        optim permute rand rand_like randint randn randn_like randperm save set_float32_matmul_precision
        set_grad_enabled set_rng_state sigmoid softmax sort split sqrt stack std sum tanh tensor topk tril triu
        utils where zeros zeros_like LongTensor channels_last Generator Tensor enable_grad cumsum logsumexp prod
        median var linalg fft""",
    "torch.nn (modules)": """AdaptiveAvgPool2d BatchNorm1d BatchNorm2d BatchNorm3d BCELoss BCEWithLogitsLoss Conv1d Conv2d
        ConvTranspose2d CrossEntropyLoss Dropout Dropout2d Embedding GELU GroupNorm GRU Identity InstanceNorm2d
        KLDivLoss LayerNorm LeakyReLU Linear LocalResponseNorm LSTM LSTMCell MaxPool2d Module ModuleDict ModuleList
        MSELoss MultiheadAttention NLLLoss Parameter PixelShuffle ReflectionPad2d ReLU Sequential SiLU Sigmoid
        SmoothL1Loss Softmax SyncBatchNorm Tanh TransformerEncoder TransformerEncoderLayer Upsample Flatten
        Hardswish Hardsigmoid ReLU6 L1Loss AvgPool2d""",
    "torch.nn.functional": """adaptive_avg_pool2d avg_pool2d binary_cross_entropy binary_cross_entropy_with_logits
        conv2d cross_entropy dropout embedding gelu interpolate kl_div layer_norm leaky_relu linear log_softmax
        max_pool2d mse_loss nll_loss normalize one_hot pad relu relu_ scaled_dot_product_attention sigmoid silu
        smooth_l1_loss softmax l1_loss cosine_similarity grid_sample hardswish""",
    "Tensor": """abs add add_ any all argmax backward bfloat16 bool clamp clamp_ clone contiguous copy_ cpu cuda
        data detach device dim div div_ double dtype eq exp expand fill_ flatten flip float gather grad half
        is_floating_point item long masked_fill matmul max mean median mul mul_ ndim ne nelement new_zeros numel
        numpy permute pow prod repeat requires_grad requires_grad_ reshape scatter_ shape size softmax split
        sqrt squeeze std sub sum t to tolist topk transpose type unsqueeze view zero_ is_contiguous float_power
        sigmoid log argsort cumsum neg norm""",
    "torch.optim": "SGD Adam AdamW RMSprop Adagrad LBFGS Optimizer lr_scheduler swa_utils",
    "torch.optim.lr_scheduler": """LambdaLR StepLR MultiStepLR ExponentialLR CosineAnnealingLR LinearLR SequentialLR
        OneCycleLR ReduceLROnPlateau CosineAnnealingWarmRestarts LRScheduler""",
    "torch.utils.data": """DataLoader Dataset TensorDataset Subset random_split DistributedSampler RandomSampler
        SequentialSampler BatchSampler Sampler default_collate get_worker_info IterableDataset ConcatDataset""",
    "torch.amp": "autocast GradScaler custom_fwd custom_bwd",
    "torch.cuda": """is_available device_count current_device set_device synchronize manual_seed manual_seed_all
        empty_cache memory_allocated max_memory_allocated reset_peak_memory_stats amp device is_bf16_supported
        get_rng_state set_rng_state""",
}

# Present with a difference (docs/differences.md says more).
DIFFERENCES = {
    "torch": {
        "manual_seed": "reproducible, not PyTorch's numbers", "save": "tinyamp's pickle-free checkpoints",
        "load": "reads tinyamp's checkpoints, not .pt files", "inference_mode": "is no_grad",
        "autocast": "float16 by default on every device", "dtype": "dtype objects equal to NumPy's dtypes",
        "device": "cuda means cuda:0; no `with device(...)`", "get_rng_state": "PCG64's 40 bytes on the CPU",
        "channels_last": "accepted; the layout stays row-major", "sort": "always stable",
    },
    "torch.nn (modules)": {
        "LSTM": "composed of ops; no PackedSequence", "GRU": "composed of ops; no PackedSequence",
        "MultiheadAttention": "refuses add_bias_kv/add_zero_attn", "SyncBatchNorm": "one process only",
        "ConvTranspose2d": "output_padding below the stride, zero padding", "Upsample": "no antialias",
        "AdaptiveAvgPool2d": "output sizes must divide the input's",
    },
    "torch.nn.functional": {
        "interpolate": "antialias=True refused", "adaptive_avg_pool2d": "output sizes must divide the input's",
        "relu": "inplace=True returns a new tensor", "kl_div": "size_average/reduce refused",
    },
    "Tensor": {
        "data": "PyTorch's; raw arrays are .array", "contiguous": "a no-op (ops read any strides)",
        "is_contiguous": "always True for contiguous_format", "pin_memory": "a no-op",
        "dtype": "a tinyamp.dtype (equal to the NumPy dtype)", "shape": "a tuple (no torch.Size)",
        "size": "a tuple (no torch.Size)", "detach_": "knows fewer views",
    },
    "torch.optim": {"LBFGS": "no AMP path (as PyTorch's)", "Optimizer": "foreach/fused/capturable flags accepted"},
    "torch.optim.lr_scheduler": {"ChainedScheduler": "multiplies closed forms"},
    "torch.utils.data": {
        "DataLoader": "batches built in the calling process", "RandomSampler": "tinyamp's generator",
        "DistributedSampler": "tinyamp's permutation", "default_collate": "NumPy stays NumPy",
    },
    "torch.amp": {"autocast": "float16 by default", "GradScaler": "warns once under bfloat16"},
    "torch.cuda": {"graph": "capture_error_mode defaults to relaxed", "is_bf16_supported": "compute capability only"},
}


# ------------------------------------------------------------------ PyTorch's lists (needs torch)
def torch_names() -> dict:
    """Every section's public names, read from torch."""
    import torch
    import torch.nn.functional as F  # noqa: N812
    import torch.optim.lr_scheduler as lr_scheduler
    import torch.utils.data
    modules = [n for n in dir(torch.nn) if not n.startswith("_") and isinstance(getattr(torch.nn, n), type)
               and issubclass(getattr(torch.nn, n), torch.nn.Module)]
    functional = [n for n in dir(F) if not n.startswith("_") and callable(getattr(F, n))
                  and not isinstance(getattr(F, n), type) and n not in _NOT_FUNCTIONAL]
    return {
        "version": torch.__version__,
        "torch": sorted(n for n in torch.__all__ if not n.startswith("_")),
        "torch.nn (modules)": sorted(modules),
        "torch.nn.functional": sorted(functional),
        "Tensor": sorted(n for n in dir(torch.Tensor) if not n.startswith("_")),
        "torch.optim": sorted(torch.optim.__all__),
        "torch.optim.lr_scheduler": sorted(lr_scheduler.__all__),
        "torch.utils.data": sorted(n for n in torch.utils.data.__all__ if not n.startswith("_")),
        "torch.amp": sorted(n for n in dir(torch.amp) if not n.startswith("_")),
        "torch.cuda": sorted(n for n in torch.cuda.__all__ if not n.startswith("_")),
    }


# ------------------------------------------------------------------ tinyamp's answers
def _has(obj: Any, name: str) -> bool:
    try:
        getattr(obj, name)
    except AttributeError:
        return False
    except Exception:  # noqa: BLE001 - a property that raises on this example (x.mT of a vector) exists
        return True
    return True


def targets() -> dict:
    import tinyamp as ta
    return {"torch": ta, "torch.nn (modules)": ta.nn, "torch.nn.functional": ta.nn.functional,
            "Tensor": ta.zeros(2, 2), "torch.optim": ta.optim, "torch.optim.lr_scheduler": ta.optim.lr_scheduler,
            "torch.utils.data": ta.utils.data, "torch.amp": ta.amp, "torch.cuda": ta.cuda}


def statuses(names: dict) -> dict:
    """section -> [(name, status, used, note)], used names first."""
    found = targets()
    table = {}
    for section in SECTIONS:
        used = set(USED[section].split())
        rows = []
        for name in names[section]:
            present = _has(found[section], name)
            note = DIFFERENCES.get(section, {}).get(name, "") if present else ""
            rows.append((name, "differs" if note else "present" if present else "absent", name in used, note))
        table[section] = sorted(rows, key=lambda r: (not r[2], r[0].lower()))
    return table


def _count(rows: list) -> tuple:
    have = sum(r[1] != "absent" for r in rows)
    return have, sum(r[1] == "differs" for r in rows), len(rows)


def render(names: dict) -> str:
    table = statuses(names)
    lines = ["# Coverage of PyTorch's public API", "",
             f"Generated by `docs/make_coverage.py` from PyTorch {names['version']}'s name lists "
             "(`docs/torch_2_13_api.json`); do not edit. *present*: tinyamp has the name; *differs*: present, with "
             "the difference noted (docs/differences.md says more); *absent*: not in tinyamp. "
             "**used** marks names that real training code touches (nanoGPT, timm, torchvision's references, "
             "Hugging Face's no-trainer examples, the porting issues' codebases); they come first.", "",
             "| section | present (of which differs) / names | used names present / used |",
             "| --- | --- | --- |"]
    for section in SECTIONS:
        rows = table[section]
        have, differs, total = _count(rows)
        used = [r for r in rows if r[2]]
        lines.append(f"| {section} | {have} ({differs}) / {total} | {sum(r[1] != 'absent' for r in used)} / "
                     f"{len(used)} |")
    for section in SECTIONS:
        lines += ["", f"## {section}", "", "| name | status | used | difference |", "| --- | --- | --- | --- |"]
        lines += [f"| `{n}` | {s} | {'**used**' if u else ''} | {note} |" for n, s, u, note in table[section]]
    return "\n".join(lines) + "\n"


def listed(text: str) -> dict:
    """section -> {name: status} as docs/coverage.md lists them."""
    out: dict = {}
    section = None
    for line in text.splitlines():
        if line.startswith("## "):
            section = line[3:]
            out[section] = {}
        elif section and line.startswith("| `"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            out[section][cells[0].strip("`")] = cells[1]
    return out


def check() -> list:
    """Problems with docs/coverage.md: names it lists as present that tinyamp lacks, then staleness."""
    names = json.loads(NAMES.read_text())
    text = TABLE.read_text()
    now = {s: {n: st for n, st, _, _ in rows} for s, rows in statuses(names).items()}
    problems = [f"{s}.{n}: listed {st}, but tinyamp has no such name" for s, table in listed(text).items()
                for n, st in table.items() if st != "absent" and now.get(s, {}).get(n) == "absent"]
    if text != render(names):
        problems.append("docs/coverage.md is stale: run python docs/make_coverage.py")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--names", action="store_true", help="read PyTorch's lists (needs torch 2.13)")
    parser.add_argument("--check", action="store_true", help="exit 1 when docs/coverage.md is stale")
    args = parser.parse_args()
    if args.names:
        NAMES.write_text(json.dumps(torch_names(), indent=0) + "\n")
        print(f"wrote {NAMES}")
        return 0
    if args.check:
        problems = check()
        print("\n".join(problems) or "docs/coverage.md is up to date")
        return 1 if problems else 0
    TABLE.write_text(render(json.loads(NAMES.read_text())))
    print(f"wrote {TABLE}")
    for section, rows in statuses(json.loads(NAMES.read_text())).items():
        have, differs, total = _count(rows)
        print(f"{section:26} {have:4} present ({differs} differ) of {total}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
