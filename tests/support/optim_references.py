"""NumPy references of PyTorch's RMSprop, Adagrad, Adadelta, NAdam and RAdam updates.

Written from the published update rules, in float64, independently of
tinyamp's implementation. Each was checked against torch 2.13's own
optimizers (float64 parameters, 20 steps, every option combination the tests
use) in a scratch script, never imported here: the largest relative
difference was 7e-16 (Adagrad, Adadelta, NAdam, RAdam) and 7e-15 (centered
RMSprop, whose sqrt(square_avg - grad_avg**2) cancels).

One detail is PyTorch's and not the papers': NAdam's ``mu_product`` is a
float32 scalar tensor (the default dtype), so it is rounded to float32 after
every step; the reference rounds it the same way.

Each function takes the start weights and a list of gradients and returns the
weights after every step.
"""

from __future__ import annotations

import numpy as np


def _direction(w: np.ndarray, g: np.ndarray, maximize: bool, weight_decay: float) -> np.ndarray:
    """The gradient the update sees: negated to maximize, plus the L2 term."""
    d = -g if maximize else g
    return d + weight_decay * w if weight_decay else d


def rmsprop(w, grads, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0, centered=False,
            maximize=False):
    w, out = w.copy(), []
    square_avg, grad_avg, buf = np.zeros_like(w), np.zeros_like(w), np.zeros_like(w)
    for g in grads:
        d = _direction(w, g, maximize, weight_decay)
        square_avg = alpha * square_avg + (1 - alpha) * d * d
        if centered:
            grad_avg = grad_avg + (1 - alpha) * (d - grad_avg)  # PyTorch's lerp form
            avg = np.sqrt(square_avg - grad_avg ** 2) + eps
        else:
            avg = np.sqrt(square_avg) + eps
        if momentum > 0:
            buf = momentum * buf + d / avg
            w = w - lr * buf
        else:
            w = w - lr * d / avg
        out.append(w)
    return out


def adagrad(w, grads, lr=1e-2, lr_decay=0.0, weight_decay=0.0, initial_accumulator_value=0.0, eps=1e-10,
            maximize=False):
    w, out = w.copy(), []
    total = np.full_like(w, initial_accumulator_value)
    for t, g in enumerate(grads, start=1):
        d = _direction(w, g, maximize, weight_decay)
        clr = lr / (1 + (t - 1) * lr_decay)
        total = total + d * d
        w = w - clr * d / (np.sqrt(total) + eps)
        out.append(w)
    return out


def adadelta(w, grads, lr=1.0, rho=0.9, eps=1e-6, weight_decay=0.0, maximize=False):
    w, out = w.copy(), []
    square_avg, acc_delta = np.zeros_like(w), np.zeros_like(w)
    for g in grads:
        d = _direction(w, g, maximize, weight_decay)
        square_avg = rho * square_avg + (1 - rho) * d * d
        delta = np.sqrt(acc_delta + eps) / np.sqrt(square_avg + eps) * d
        acc_delta = rho * acc_delta + (1 - rho) * delta * delta
        w = w - lr * delta
        out.append(w)
    return out


def nadam(w, grads, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, momentum_decay=4e-3,
          decoupled_weight_decay=False, maximize=False):
    b1, b2 = betas
    w, out = w.copy(), []
    m, v, mu_product = np.zeros_like(w), np.zeros_like(w), 1.0
    for t, g in enumerate(grads, start=1):
        d = -g if maximize else g
        if weight_decay and decoupled_weight_decay:
            w = w * (1 - lr * weight_decay)
        elif weight_decay:
            d = d + weight_decay * w
        mu = b1 * (1 - 0.5 * 0.96 ** (t * momentum_decay))
        mu_next = b1 * (1 - 0.5 * 0.96 ** ((t + 1) * momentum_decay))
        # PyTorch keeps it as a float32 scalar tensor and multiplies by mu rounded to float32
        mu_product = float(np.float32(mu_product) * np.float32(mu))
        m = m + (1 - b1) * (d - m)  # PyTorch's lerp form
        v = b2 * v + (1 - b2) * d * d
        denom = np.sqrt(v / (1 - b2 ** t)) + eps
        w = w - lr * (1 - mu) / (1 - mu_product) * d / denom
        w = w - lr * mu_next / (1 - mu_product * mu_next) * m / denom
        out.append(w)
    return out


def radam(w, grads, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, decoupled_weight_decay=False,
          maximize=False):
    b1, b2 = betas
    w, out = w.copy(), []
    m, v = np.zeros_like(w), np.zeros_like(w)
    rho_inf = 2 / (1 - b2) - 1
    for t, g in enumerate(grads, start=1):
        d = -g if maximize else g
        if weight_decay and decoupled_weight_decay:
            w = w * (1 - lr * weight_decay)
        elif weight_decay:
            d = d + weight_decay * w
        m = m + (1 - b1) * (d - m)  # PyTorch's lerp form
        v = b2 * v + (1 - b2) * d * d
        m_hat = m / (1 - b1 ** t)
        rho_t = rho_inf - 2 * t * b2 ** t / (1 - b2 ** t)
        if rho_t > 5:
            rect = np.sqrt((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t))
            adaptive = np.sqrt(1 - b2 ** t) / (np.sqrt(v) + eps)
            w = w - lr * m_hat * adaptive * rect
        else:
            w = w - lr * m_hat
        out.append(w)
    return out
