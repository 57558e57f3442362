"""Fits the coefficients of tinyamp's erf (tinyamp/kernels/cpu/nn_numba.py: ERF_SMALL, ERF_LARGE) and prints them.

Not run by the test suite (it needs mpmath, which tinyamp does not depend on). Run by hand::

    python tests/kernels/make_erf_coefficients.py

- ``ERF_SMALL``: erf(x) / x as a degree-10 polynomial in x^2 on [0, 1] (least squares on 400
  Chebyshev nodes, 50 digits): relative error 8e-16.
- ``ERF_LARGE``: erfcx(x) = exp(x^2) erfc(x) as a degree-17 polynomial in u = (2x - 7) / 5 on
  [1, 6], weighted by exp(-x^2), so that 1 - exp(-x^2) Q(x) (erf) has absolute error 1.3e-15.
"""

from __future__ import annotations

import mpmath as mp

mp.mp.dps = 50


def fit(f, weight, a, b, degree, var, points=400):
    nodes = [(a + b) / 2 + (b - a) / 2 * mp.cos(mp.pi * (k + 0.5) / points) for k in range(points)]
    design = mp.matrix(points, degree + 1)
    values = mp.matrix(points, 1)
    for i, x in enumerate(nodes):
        u, w = var(x), weight(x)
        for j in range(degree + 1):
            design[i, j] = u ** j * w
        values[i] = f(x) * w
    return [float(c) for c in mp.qr_solve(design, values)[0]]


small = fit(lambda x: mp.erf(x) / x, lambda x: 1, mp.mpf(10) ** -30, mp.mpf(1), 10, lambda x: x * x)
large = fit(lambda x: mp.erfc(x) * mp.exp(x * x), lambda x: mp.exp(-x * x), mp.mpf(1), mp.mpf(6), 17,
            lambda x: (2 * x - 7) / 5)
print("ERF_SMALL =", tuple(small))
print("ERF_LARGE =", tuple(large))
