#!/usr/bin/env python3
"""Fits the rational erf used by crates/kernels/src/math.rs (`erf`):

    erf(x) ~= x * P(t) / Q(t),  t = x^2 / 16,  |x| <= 4,

P of degree 5, Q of degree 5 with Q(0) = 1. Method: linearized least
squares (x*P - erf*Q = 0, weighted by 1/Q of the previous pass) with
Lawson-style reweighting towards the minimax error. Then the f32-rounded
coefficients are evaluated the way the Rust code does (Horner with fused
multiply-adds in f32) and the worst absolute error on a dense grid printed.

    scripts/refenv python scripts/research/fit-erf.py

Needs numpy only. Prints the coefficients to paste into math.rs.
"""
from math import erf

import numpy as np

N_P, N_Q, X_MAX = 6, 5, 4.0


def fit():
    x = np.linspace(1e-4, X_MAX, 20000)
    y = np.array([erf(v) for v in x])
    t = x * x / 16
    w = np.ones_like(x)
    q_prev = np.ones_like(x)
    best = None
    for _ in range(200):
        a = np.hstack([x[:, None] * t[:, None] ** np.arange(N_P),
                       -(y[:, None] * t[:, None] ** np.arange(1, N_Q + 1))])
        scale = (w / q_prev)[:, None]
        sol, *_ = np.linalg.lstsq(a * scale, y * scale[:, 0], rcond=None)
        p, q = sol[:N_P], np.concatenate([[1.0], sol[N_P:]])
        q_val = np.polyval(q[::-1], t)
        err = x * np.polyval(p[::-1], t) / q_val - y
        if best is None or np.abs(err).max() < best[0]:
            best = (np.abs(err).max(), p, q)
        q_prev = q_val
        w = w * np.abs(err) ** 0.5
        w /= w.mean()
    return best


def f32_worst(p, q):
    """Worst |erf| error of the f32 evaluation (fma emulated in f64)."""
    f = np.float32
    xs = np.linspace(0, X_MAX, 400001).astype(f)
    t = (xs * xs * f(1 / 16)).astype(f)

    def horner(c):
        r = np.full_like(t, f(c[-1]))
        for cc in c[-2::-1]:
            r = (r.astype(np.float64) * t + f(cc)).astype(f)
        return r

    y = np.minimum((xs * (horner(p) / horner(q)).astype(f)).astype(f), f(1))
    ref = np.array([erf(float(v)) for v in xs])
    i = np.argmax(np.abs(y - ref))
    return abs(float(y[i]) - ref[i]), float(xs[i])


def main():
    err, p, q = fit()
    worst, at = f32_worst(p, q)
    print(f"fit (f64): {err:.3g}; f32 evaluation: {worst:.3g} at x = {at:.5f}")
    print("P =", [np.float32(c).item() for c in p])
    print("Q =", [np.float32(c).item() for c in q])


if __name__ == "__main__":
    main()
