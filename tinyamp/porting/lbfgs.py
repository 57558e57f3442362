"""``optim.LBFGS``: limited-memory BFGS with an optional strong-Wolfe line search, PyTorch's algorithm.

``step(closure)`` re-evaluates the model through ``closure`` (which zeroes the
gradients, computes the loss, calls ``backward`` and returns the loss) up to
``max_eval`` times. The parameters are treated as one flat vector; the
two-loop recursion, the first step ``min(1, 1 / |g|_1) * lr``, the stopping
rules and the line search (cubic interpolation, bracketing and zoom) follow
``torch.optim.LBFGS`` line for line, on the parameters' arrays in their dtype
(scalars on the host: every iteration reads dot products, as PyTorch's does).
It has no AMP path (no ``found_inf``): GradScaler cannot drive it, as in PyTorch.
"""

from __future__ import annotations

from typing import Any, Callable

from .. import backend
from ..grad_mode import enable_grad, no_grad
from ..optim.optimizer import Optimizer
from ..tensor import Tensor


def _host(value: Any) -> float:
    """A device scalar read on the host (PyTorch's LBFGS reads the same ones)."""
    return float(backend.to_host(value, "LBFGS: a dot product or norm of the flat gradient"))


def _cubic_interpolate(x1: float, f1: float, g1: float, x2: float, f2: float, g2: float,
                       bounds: "tuple | None" = None) -> float:
    """The minimiser of the cubic through (x1, f1, g1) and (x2, f2, g2), clamped to ``bounds``."""
    xmin_bound, xmax_bound = bounds if bounds is not None else ((x1, x2) if x1 <= x2 else (x2, x1))
    d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2)
    d2_square = d1 ** 2 - g1 * g2
    if d2_square >= 0:
        d2 = d2_square ** 0.5
        if x1 <= x2:
            min_pos = x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2))
        else:
            min_pos = x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2))
        return min(max(min_pos, xmin_bound), xmax_bound)
    return (xmin_bound + xmax_bound) / 2.0


def _strong_wolfe(obj_func: Callable, x: list, t: float, d: Any, f: float, g: Any, gtd: float, c1: float = 1e-4,
                  c2: float = 0.9, tolerance_change: float = 1e-9, max_ls: int = 25) -> tuple:
    """(loss, flat gradient, step, evaluations) of a step along ``d`` meeting the strong Wolfe conditions."""
    d_norm = _host(abs(d).max())
    g = g.copy()
    f_new, g_new = obj_func(x, t, d)
    ls_func_evals = 1
    gtd_new = _host(g_new.dot(d))
    t_prev, f_prev, g_prev, gtd_prev = 0.0, f, g, gtd
    done = False
    ls_iter = 0
    while ls_iter < max_ls:  # bracket an interval holding a point that meets the conditions
        if f_new > (f + c1 * t * gtd) or (ls_iter > 1 and f_new >= f_prev):
            bracket, bracket_f = [t_prev, t], [f_prev, f_new]
            bracket_g, bracket_gtd = [g_prev, g_new.copy()], [gtd_prev, gtd_new]
            break
        if abs(gtd_new) <= -c2 * gtd:
            bracket, bracket_f, bracket_g = [t], [f_new], [g_new]
            done = True
            break
        if gtd_new >= 0:
            bracket, bracket_f = [t_prev, t], [f_prev, f_new]
            bracket_g, bracket_gtd = [g_prev, g_new.copy()], [gtd_prev, gtd_new]
            break
        min_step, max_step = t + 0.01 * (t - t_prev), t * 10
        tmp = t
        t = _cubic_interpolate(t_prev, f_prev, gtd_prev, t, f_new, gtd_new, bounds=(min_step, max_step))
        t_prev, f_prev, g_prev, gtd_prev = tmp, f_new, g_new.copy(), gtd_new
        f_new, g_new = obj_func(x, t, d)
        ls_func_evals += 1
        gtd_new = _host(g_new.dot(d))
        ls_iter += 1
    if ls_iter == max_ls:
        bracket, bracket_f, bracket_g = [0, t], [f, f_new], [g, g_new]
    insuf_progress = False
    low_pos, high_pos = (0, 1) if bracket_f[0] <= bracket_f[-1] else (1, 0)
    while not done and ls_iter < max_ls:  # zoom into the bracket
        if abs(bracket[1] - bracket[0]) * d_norm < tolerance_change:
            break
        t = _cubic_interpolate(bracket[0], bracket_f[0], bracket_gtd[0], bracket[1], bracket_f[1], bracket_gtd[1])
        eps = 0.1 * (max(bracket) - min(bracket))
        if min(max(bracket) - t, t - min(bracket)) < eps:
            if insuf_progress or t >= max(bracket) or t <= min(bracket):
                t = max(bracket) - eps if abs(t - max(bracket)) < abs(t - min(bracket)) else min(bracket) + eps
                insuf_progress = False
            else:
                insuf_progress = True
        else:
            insuf_progress = False
        f_new, g_new = obj_func(x, t, d)
        ls_func_evals += 1
        gtd_new = _host(g_new.dot(d))
        ls_iter += 1
        if f_new > (f + c1 * t * gtd) or f_new >= bracket_f[low_pos]:
            bracket[high_pos], bracket_f[high_pos] = t, f_new
            bracket_g[high_pos], bracket_gtd[high_pos] = g_new.copy(), gtd_new
            low_pos, high_pos = (0, 1) if bracket_f[0] <= bracket_f[1] else (1, 0)
        else:
            if abs(gtd_new) <= -c2 * gtd:
                done = True
            elif gtd_new * (bracket[high_pos] - bracket[low_pos]) >= 0:
                bracket[high_pos], bracket_f[high_pos] = bracket[low_pos], bracket_f[low_pos]
                bracket_g[high_pos], bracket_gtd[high_pos] = bracket_g[low_pos], bracket_gtd[low_pos]
            bracket[low_pos], bracket_f[low_pos] = t, f_new
            bracket_g[low_pos], bracket_gtd[low_pos] = g_new.copy(), gtd_new
    return bracket_f[low_pos], bracket_g[low_pos], bracket[low_pos], ls_func_evals


class LBFGS(Optimizer):
    """``torch.optim.LBFGS(params, lr=1, max_iter=20, max_eval=None, tolerance_grad=1e-7, tolerance_change=1e-9,
    history_size=100, line_search_fn=None)``; one parameter group."""

    def __init__(self, params: Any, lr: float = 1, max_iter: int = 20, max_eval: "int | None" = None,
                 tolerance_grad: float = 1e-7, tolerance_change: float = 1e-9, history_size: int = 100,
                 line_search_fn: "str | None" = None) -> None:
        if isinstance(lr, Tensor) and lr.numel() != 1:
            raise ValueError("Tensor lr must be 1-element")
        if not 0.0 <= float(lr):
            raise ValueError(f"Invalid learning rate: {lr}")
        if max_eval is None:
            max_eval = max_iter * 5 // 4
        defaults = {"lr": lr, "max_iter": max_iter, "max_eval": max_eval, "tolerance_grad": tolerance_grad,
                    "tolerance_change": tolerance_change, "history_size": history_size,
                    "line_search_fn": line_search_fn}
        super().__init__(params, defaults)
        if len(self.param_groups) != 1:
            raise ValueError("LBFGS doesn't support per-parameter options (parameter groups)")
        self._params = self.param_groups[0]["params"]

    def _gather_flat_grad(self) -> Any:
        xp = self._params[0].device.xp
        views = [xp.zeros(p.numel(), dtype=p.array.dtype) if p.grad is None else p.grad.array.reshape(-1)
                 for p in self._params]
        return xp.concatenate(views, 0)

    def _add_grad(self, step_size: float, update: Any) -> None:
        offset = 0
        for p in self._params:
            n = p.numel()
            p.add_(Tensor._wrap(update[offset:offset + n].reshape(p.shape)), alpha=step_size)
            offset += n

    def _clone_param(self) -> list:
        return [p.array.copy() for p in self._params]

    def _set_param(self, params_data: list) -> None:
        for p, data in zip(self._params, params_data):
            p.copy_(Tensor._wrap(data))

    def _directional_evaluate(self, closure: Callable, x: list, t: float, d: Any) -> tuple:
        self._add_grad(t, d)
        with enable_grad():
            loss = float(closure())
        flat_grad = self._gather_flat_grad()
        self._set_param(x)
        return loss, flat_grad

    def step(self, closure: Callable, **kwargs: Any) -> Any:  # type: ignore[override]
        """Up to ``max_iter`` L-BFGS iterations from ``closure``'s loss and gradients; returns the first loss."""
        if kwargs:
            raise TypeError(f"LBFGS.step() takes only a closure (no AMP arguments): got {sorted(kwargs)}")
        with no_grad():
            return self._step(closure)

    def _step(self, closure: Callable) -> Any:
        group = self.param_groups[0]
        lr = float(group["lr"])
        max_iter, max_eval = group["max_iter"], group["max_eval"]
        tolerance_grad, tolerance_change = group["tolerance_grad"], group["tolerance_change"]
        line_search_fn, history_size = group["line_search_fn"], group["history_size"]
        state = self.state[self._params[0]]
        state.setdefault("func_evals", 0)
        state.setdefault("n_iter", 0)
        with enable_grad():
            orig_loss = closure()
        loss = float(orig_loss)
        current_evals = 1
        state["func_evals"] += 1
        flat_grad = self._gather_flat_grad()
        if _host(abs(flat_grad).max()) <= tolerance_grad:
            return orig_loss
        d, t = state.get("d"), state.get("t")
        old_dirs, old_stps, ro = state.get("old_dirs"), state.get("old_stps"), state.get("ro")
        h_diag, prev_flat_grad, prev_loss = state.get("H_diag"), state.get("prev_flat_grad"), state.get("prev_loss")
        n_iter = 0
        while n_iter < max_iter:
            n_iter += 1
            state["n_iter"] += 1
            if state["n_iter"] == 1:  # steepest descent first
                d = -flat_grad
                old_dirs, old_stps, ro, h_diag = [], [], [], 1.0
            else:  # the two-loop recursion over the curvature pairs
                y = flat_grad - prev_flat_grad
                s = d * t
                ys = _host(y.dot(s))
                if ys > 1e-10:
                    if len(old_dirs) == history_size:
                        old_dirs.pop(0)
                        old_stps.pop(0)
                        ro.pop(0)
                    old_dirs.append(y)
                    old_stps.append(s)
                    ro.append(1.0 / ys)
                    h_diag = ys / _host(y.dot(y))
                num_old = len(old_dirs)
                al = state.setdefault("al", [None] * history_size)
                q = -flat_grad
                for i in range(num_old - 1, -1, -1):
                    al[i] = _host(old_stps[i].dot(q)) * ro[i]
                    q = q - al[i] * old_dirs[i]
                d = r = q * h_diag
                for i in range(num_old):
                    be_i = _host(old_dirs[i].dot(r)) * ro[i]
                    r += (al[i] - be_i) * old_stps[i]
            prev_flat_grad = flat_grad.copy()
            prev_loss = loss
            t = min(1.0, 1.0 / _host(abs(flat_grad).sum())) * lr if state["n_iter"] == 1 else lr
            gtd = _host(flat_grad.dot(d))
            if gtd > -tolerance_change:  # not a descent direction
                break
            ls_func_evals = 0
            if line_search_fn is not None:
                if line_search_fn != "strong_wolfe":
                    raise RuntimeError("only 'strong_wolfe' is supported")
                x_init = self._clone_param()

                def obj_func(x: list, step: float, direction: Any) -> tuple:
                    return self._directional_evaluate(closure, x, step, direction)

                loss, flat_grad, t, ls_func_evals = _strong_wolfe(obj_func, x_init, t, d, loss, flat_grad, gtd,
                                                                  max_ls=max_eval - current_evals)
                self._add_grad(t, d)
                opt_cond = _host(abs(flat_grad).max()) <= tolerance_grad
            else:
                self._add_grad(t, d)
                opt_cond = False
                if n_iter != max_iter:
                    with enable_grad():
                        loss = float(closure())
                    flat_grad = self._gather_flat_grad()
                    opt_cond = _host(abs(flat_grad).max()) <= tolerance_grad
                    ls_func_evals = 1
            current_evals += ls_func_evals
            state["func_evals"] += ls_func_evals
            if n_iter == max_iter or current_evals >= max_eval or opt_cond:
                break
            if _host(abs(d * t).max()) <= tolerance_change or abs(loss - prev_loss) < tolerance_change:
                break
        state.update({"d": d, "t": t, "old_dirs": old_dirs, "old_stps": old_stps, "ro": ro, "H_diag": h_diag,
                      "prev_flat_grad": prev_flat_grad, "prev_loss": prev_loss})
        return orig_loss
