"""The fp8 training step the fp8 tests train with: bfloat16 autocast around fp8_autocast, backward, step."""

from __future__ import annotations

from typing import Any

import tinyamp as ta
import tinyamp.nn.functional as F


def fp8_step(model: Any, optimizer: Any, recipe: Any, x: Any, y: Any = None) -> Any:
    """One step: the model in fp8 under ``recipe`` inside bfloat16 autocast; the loss is cross-entropy against
    ``y``, or the mean square of the output without one. Returns the loss."""
    optimizer.zero_grad()
    with ta.autocast(dtype=ta.bfloat16):
        with ta.amp.fp8_autocast(fp8_recipe=recipe):
            out = model(x)
        loss = F.cross_entropy(out, y) if y is not None else out.float().square().mean()
    loss.backward()
    optimizer.step()
    return loss
