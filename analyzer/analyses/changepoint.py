"""Change points in a series of measurements: E-Divisive, as Hunter / Apache Otava use it.

E-Divisive (Matteson & James, "A Nonparametric Approach for Multiple Change Point
Analysis of Multivariate Data", JASA 2014) places a change point where the energy
distance between the series before and after it, weighted by the sizes of the two
sides, is largest; the two halves are then searched again (binary segmentation).
Its original significance test is a permutation test, which cannot reach a small
p-value on the handful of points a firmware history has (six versions split 3 | 3
give at best p = 72 / 720 = 0.1). Hunter (Fleming et al., "Hunter: Using Change
Point Detection to Hunt for Performance Regressions", ICPE 2023; now Apache Otava)
replaced it with a two-sample Student t-test between the two sides, and so does
this module; a change must also be larger than a relative magnitude, so that a
real but tiny shift is not reported.

Splits are only allowed where the caller says (between firmware versions: repeated
runs of one version stay on one side). numpy only: the t distribution's tail is
the regularized incomplete beta function, by Lentz's continued fraction.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

MAX_PVALUE = 0.001
MIN_CHANGE_PCT = 5.0


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny, eps = 1e-300, 1e-15
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < eps:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    lbt = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
    front = math.exp(lbt + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1) / (a + b + 2):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_test(left: np.ndarray, right: np.ndarray) -> float:
    """Two-sided p-value of Student's two-sample t-test (pooled variance)."""
    n1, n2 = len(left), len(right)
    df = n1 + n2 - 2
    diff = float(np.mean(right) - np.mean(left))
    if df < 1:
        return 1.0
    ss = float(((left - left.mean()) ** 2).sum() + ((right - right.mean()) ** 2).sum())
    if ss <= 0:
        # No spread on either side: any difference is certain, none is nothing.
        return 0.0 if diff != 0 else 1.0
    t = diff / math.sqrt(ss / df * (1 / n1 + 1 / n2))
    return betainc(df / 2, 0.5, df / (df + t * t))


def energy(x: np.ndarray, tau: int) -> float:
    """Q̂ of splitting x at tau (x[:tau] | x[tau:]), alpha = 1: the sample sizes'
    harmonic weight times the energy distance between the two sides."""
    a, b = x[:tau], x[tau:]
    m, n = len(a), len(b)
    between = np.abs(a[:, None] - b[None, :]).mean()
    wa = np.abs(a[:, None] - a[None, :]).sum() / (m * (m - 1)) if m > 1 else 0.0
    wb = np.abs(b[:, None] - b[None, :]).sum() / (n * (n - 1)) if n > 1 else 0.0
    return m * n / (m + n) * (2 * between - wa - wb)


def e_divisive(
    values: Sequence[float],
    allowed: Sequence[int] | None = None,
    max_pvalue: float = MAX_PVALUE,
    min_change_pct: float = MIN_CHANGE_PCT,
) -> list[dict[str, Any]]:
    """Significant change points of `values`, in order. A change point at index i means
    values[i] is the first after the change. `allowed`: the indexes where a change may
    be (default: anywhere). Each: index, mean before and after (the neighbouring
    segments), change_pct, p_value, q (the energy statistic)."""
    x = np.asarray(values, dtype=np.float64)
    ok = set(range(1, len(x))) if allowed is None else {i for i in allowed if 0 < i < len(x)}
    found: list[dict[str, Any]] = []
    cuts = [0, len(x)]
    while True:
        best = None
        for a, b in itertools.pairwise(cuts):
            seg = x[a:b]
            for tau in sorted(i for i in ok if a < i < b):
                q = energy(seg, tau - a)
                if best is None or q > best[0]:
                    best = (q, tau, a, b)
        if best is None:
            break
        q, tau, a, b = best
        left, right = x[a:tau], x[tau:b]
        p = t_test(left, right)
        before, after = float(left.mean()), float(right.mean())
        pct = 100 * (after - before) / before if before else math.inf
        if p > max_pvalue or abs(pct) < min_change_pct:
            break
        found.append({"index": tau, "before": before, "after": after, "change_pct": pct,
                      "p_value": p, "q": float(q)})  # fmt: skip
        cuts = sorted([*cuts, tau])
    # Before/after as the final segments see them (a later split narrows them).
    found.sort(key=lambda c: c["index"])
    for c in found:
        i = cuts.index(c["index"])
        left, right = x[cuts[i - 1] : c["index"]], x[c["index"] : cuts[i + 1]]
        c["before"], c["after"] = float(left.mean()), float(right.mean())
        c["change_pct"] = 100 * (c["after"] - c["before"]) / c["before"] if c["before"] else None
    return found
