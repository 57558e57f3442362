"""``einsum``: a sum of products over labelled axes (``torch.einsum("bij,bjk->bik", a, b)``).

LOWER under autocast, as on PyTorch's CUDA list (it is a contraction, like
matmul): float32 operands are cast to float16/bfloat16, and the products are
accumulated in float32 and rounded once. The gradient with respect to each
operand is another einsum of the output gradient with the other operands,
broadcast over the operand's labels that appear nowhere else. Supported:
explicit (``->``) and implicit outputs, ``...``, a list of operands; an
operand with a repeated label (a diagonal, ``"ii->i"``) runs forward but has no
gradient here (refused at backward).
"""

from __future__ import annotations

import string
from typing import Any

from .. import dtypes as dt
from ..precision import LOWER
from ..autograd.function import Function
from ..tensor import Tensor
from .broadcast import broadcast_to, sum_to


def _parse(equation: str, shapes: list) -> tuple:
    """(input label strings, output label string) with ``...`` spelled out in unused letters."""
    equation = equation.replace(" ", "")
    lhs, arrow, rhs = equation.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        raise RuntimeError(f"einsum(): {len(terms)} operands in the equation {equation!r} but {len(shapes)} given")
    used = set(equation) - set(".,->")
    free = [c for c in string.ascii_letters if c not in used]
    widest = max((len(s) - (len(t) - 3) for t, s in zip(terms, shapes) if "..." in t), default=0)
    ellipsis = "".join(free[:widest])
    subs = []
    for term, shape in zip(terms, shapes):
        if "..." in term:
            n = len(shape) - (len(term) - 3)
            term = term.replace("...", ellipsis[widest - n:] if n else "")
        if not all(c in string.ascii_letters for c in term):
            raise RuntimeError(f"einsum(): invalid subscript given in the equation {equation!r}; subscripts must be "
                               f"letters, ',', '...' and '->'")
        if len(term) != len(shape):
            raise RuntimeError(f"einsum(): the number of subscripts in the equation ({len(term)}) does not match "
                               f"the number of dimensions ({len(shape)}) for operand {len(subs)} (shape "
                               f"{list(shape)})")
        subs.append(term)
    if arrow:
        out = rhs.replace("...", ellipsis)
    else:
        counts = {c: sum(t.count(c) for t in subs) for c in set("".join(subs))}
        out = ellipsis + "".join(sorted(c for c, k in counts.items() if k == 1 and c not in ellipsis))
    return subs, out


class Einsum(Function):
    """y = einsum(eq, *xs); dx_i = einsum(eq_i, gy, *others) broadcast to x_i's labels"""

    precision = LOWER

    def __init__(self, subs: list, out: str) -> None:
        self.subs, self.out = subs, out
        self.save_inputs = tuple(range(len(subs)))

    def forward(self, xp: Any, *xs: Any) -> Any:
        cdt = dt.opmath_dtype(xs[0].dtype)
        for x in xs:
            if x.dtype != xs[0].dtype:
                raise RuntimeError(f"einsum(): expected operands of one dtype, got "
                                   f"{[dt.dtype_name(a.dtype) for a in xs]}")
        equation = ",".join(self.subs) + "->" + self.out
        y = xp.einsum(equation, *[x.astype(cdt, copy=False) for x in xs])
        return xp.asarray(y).astype(xs[0].dtype, copy=False)

    def backward(self, gy: Tensor) -> tuple:
        xs = self.saved_tensors
        grads = []
        for i, sub in enumerate(self.subs):
            if not self.needs_input_grad[i]:
                grads.append(None)
                continue
            if len(set(sub)) != len(sub):
                raise NotImplementedError(f"einsum: no gradient for an operand with a repeated subscript ({sub!r})")
            others = [(s, x) for j, (s, x) in enumerate(zip(self.subs, xs)) if j != i]
            present = set(self.out).union(*[set(s) for s, _ in others])
            kept = "".join(c for c in sub if c in present)
            g = Einsum([self.out] + [s for s, _ in others], kept)(gy, *[x for _, x in others])
            sizes, got = dict(zip(sub, self.input_shapes[i])), dict(zip(kept, g.shape))
            full = tuple(got.get(c, 1) for c in sub)  # a size-1 operand axis may have broadcast to gy's size
            g = broadcast_to(g.reshape(full), tuple(got.get(c, sizes[c]) for c in sub))
            grads.append(sum_to(g, self.input_shapes[i]) if g.shape != self.input_shapes[i] else g)
        return tuple(grads)


def einsum(equation: str, *operands: Any) -> Tensor:
    """``torch.einsum(equation, *operands)`` (or a list of operands)."""
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    if not isinstance(equation, str) or not operands:
        raise TypeError("einsum(): must specify the equation string and at least one operand")
    for t in operands:
        if not isinstance(t, Tensor):
            raise TypeError(f"einsum(): operands must be Tensors, got {type(t).__name__}")
    subs, out = _parse(equation, [t.shape for t in operands])
    return Einsum(subs, out)(*operands)


METHODS: dict = {}
