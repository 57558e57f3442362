"""Records PyTorch's results for tests/support/module_cases.py into tests/module_references.npz.

Not run by the test suite (tests must not import torch). Run once, with torch
2.13.0 (CPU wheel), from the repository root::

    /work/torchvenv/bin/python tests/support/make_module_references.py

For each case: the inputs (seeded NumPy draws), the module's state_dict drawn
from NumPy too (uniform in [-0.5, 0.5), integer buffers kept), the outputs, a
seeded cotangent per output and the gradients of sum(output * cotangent) with
respect to each input that requires grad and each parameter, all in float64.
The state_dict's keys are stored in order, so the test also checks PyTorch's
parameter names and shapes.
"""

from __future__ import annotations

import numpy as np
import torch

from tests.support import SUPPORT
from tests.support.module_cases import CASES, Case

OUT = SUPPORT / "module_references.npz"


def flatten(value: object) -> list:
    """Outputs (a tensor, or nested tuples of them, None skipped) in order."""
    if value is None:
        return []
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in flatten(v)]
    return [value]


def draw_inputs(case: Case, rng: np.random.Generator) -> dict:
    arrays = {}
    for name, (shape, low, high, _) in case.inputs.items():
        arrays[name] = rng.random(shape) < 0.3 if low is None else rng.uniform(low, high, size=shape)
    return arrays


def record(case: Case, store: dict) -> None:
    rng = np.random.default_rng(case.seed)
    torch.manual_seed(case.seed)
    module = case.build(torch)
    prefix = case.name + "/"
    if module is not None:
        module = module.double().train(case.train)
        state = module.state_dict()
        store[prefix + "keys"] = np.array(list(state.keys()) or [""])
        values = {}
        for key, value in state.items():
            if value.is_floating_point():
                values[key] = torch.from_numpy(rng.uniform(-0.5, 0.5, size=tuple(value.shape)))
            else:
                values[key] = value
            store[prefix + "state/" + key] = values[key].numpy()
        module.load_state_dict(values)
    arrays = draw_inputs(case, rng)
    arrays.update(case.masks)
    tensors = {}
    for name, array in arrays.items():
        store[prefix + "in/" + name] = np.asarray(array)
        t = torch.from_numpy(np.asarray(array))
        grad = name in case.inputs and case.inputs[name][3]
        tensors[name] = t.requires_grad_() if grad else t
    outs = flatten(case.call(torch, module, tensors))
    total = 0
    for i, out in enumerate(outs):
        store[prefix + f"out/{i}"] = out.detach().numpy()
        if out.is_floating_point() and out.requires_grad:
            cot = rng.uniform(-1, 1, size=tuple(out.shape))
            store[prefix + f"cot/{i}"] = cot
            total = total + (out * torch.from_numpy(cot)).sum()
    if isinstance(total, int):
        return
    params = dict(module.named_parameters()) if module is not None else {}
    leaves = {**{"in/" + k: t for k, t in tensors.items() if t.requires_grad},
              **{"param/" + k: p for k, p in params.items()}}
    grads = torch.autograd.grad(total, list(leaves.values()), allow_unused=True)
    for key, g in zip(leaves, grads):
        if g is not None:
            store[prefix + "grad/" + key] = g.numpy()


def main() -> None:
    torch.set_default_dtype(torch.float64)
    store: dict = {"torch_version": np.array(torch.__version__)}
    for case in CASES:
        record(case, store)
    np.savez_compressed(OUT, **store)
    print(f"{len(CASES)} cases, {len(store)} arrays -> {OUT} ({OUT.stat().st_size} bytes), torch {torch.__version__}")


if __name__ == "__main__":
    main()
