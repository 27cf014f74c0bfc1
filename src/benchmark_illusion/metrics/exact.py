"""Closed-form intervals for proportions and their differences at small n, and their coverage.

The default run has 14-22 items per checkpoint and benchmark. At that size the percentile
bootstrap of a proportion inherits the Wald interval's weakness (it reads the spread of
Binomial(n, k/n) around the observed k/n): at a 95% level it covers some true rates between 0.1
and 0.9 in only 86-87% of samples (docs/metrics.md, "Which interval a rate gets", has the
coverage `coverage` computes). The rates table (workflow/sql/25_rates.sql) therefore gives

- a proportion (every item value 0 or 1) the Wilson score interval of its count (`wilson`);
- a paired difference of two proportions (every item value -1, 0 or 1: a drop, Delta_PR, a
  corrected recovery) the Bonett-Price adjusted Wald interval of its discordant counts
  (`bonett_price`);

and keeps the bootstrap for the other metrics. The SQL macros `wilson_low`, `wilson_high`,
`bonett_price_low` and `bonett_price_high` there are these formulas; tests/metrics/test_intervals.py
checks them against this module and measures the coverage with `coverage`.

References:
  Wilson EB (1927) Probable inference, the law of succession, and statistical inference.
    J Am Stat Assoc 22:209-212.
  Newcombe RG (1998) Two-sided confidence intervals for the single proportion: comparison of
    seven methods. Stat Med 17:857-872.
  Newcombe RG (1998) Interval estimation for the difference between independent proportions:
    comparison of eleven methods. Stat Med 17:873-890 (method 10, the hybrid score interval).
  Bonett DG, Price RM (2012) Adjusted Wald confidence interval for a difference of binomial
    proportions based on paired data. J Educ Behav Stat 37:479-488.
  Fagerland MW, Lydersen S, Laake P (2014) Recommended tests and confidence intervals for paired
    binomial proportions. Stat Med 33:2850-2875.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from statistics import NormalDist

NAN = float("nan")


def z_of(level: float) -> float:
    """The two-sided standard normal quantile of a confidence level: z with
    P(-z < Z < z) = level (1.959964 for 0.95)."""
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    return NormalDist().inv_cdf((1 + level) / 2)


def _clamp(x: float, lo: float, hi: float) -> float:
    return min(max(x, lo), hi)


def wilson(k: float, n: float, level: float = 0.95) -> tuple[float, float]:
    """The Wilson (1927) score interval of a proportion k/n: the p with
    |k/n - p| <= z * sqrt(p (1 - p) / n), i.e.

        (k + z^2/2) / (n + z^2)  -/+  z / (n + z^2) * sqrt(k (n - k) / n + z^2 / 4).

    k may be fractional (a count averaged over replicates), 0 <= k <= n; clamped to [0, 1],
    and exactly 0 at k = 0 and 1 at k = n (where the formula gives them up to rounding).
    n = 0 gives (nan, nan)."""
    if n <= 0:
        return NAN, NAN
    z = z_of(level)
    z2 = z * z
    centre = (k + z2 / 2) / (n + z2)
    half = z / (n + z2) * math.sqrt(max(k * (n - k) / n, 0.0) + z2 / 4)
    lo = 0.0 if k <= 0 else _clamp(centre - half, 0.0, 1.0)
    hi = 1.0 if k >= n else _clamp(centre + half, 0.0, 1.0)
    return lo, hi


def bonett_price(b: float, c: float, n: float, level: float = 0.95) -> tuple[float, float]:
    """The Bonett & Price (2012) adjusted Wald interval of a paired difference of proportions
    p1 - p2 from n pairs, b of them discordant one way (first right, second wrong: per-item
    value +1) and c the other way (value -1):

        p12 = (b + 1) / (n + 2),  p21 = (c + 1) / (n + 2),  d = p12 - p21,
        d -/+ z * sqrt((p12 + p21 - d^2) / (n + 2)),  clamped to [-1, 1].

    The interval is centred on the adjusted d; the point estimate stays (b - c) / n. n = 0 gives
    (nan, nan)."""
    if n <= 0:
        return NAN, NAN
    z = z_of(level)
    p12, p21 = (b + 1) / (n + 2), (c + 1) / (n + 2)
    d = p12 - p21
    half = z * math.sqrt(max(p12 + p21 - d * d, 0.0) / (n + 2))
    return _clamp(d - half, -1.0, 1.0), _clamp(d + half, -1.0, 1.0)


def newcombe_difference(
    k1: float, n1: float, k2: float, n2: float, level: float = 0.95
) -> tuple[float, float]:
    """Newcombe's (1998, method 10) hybrid score interval of the difference k1/n1 - k2/n2 of two
    independent proportions: the Wilson limits (l1, u1) and (l2, u2) of each, squared and added,

        d - sqrt((p1 - l1)^2 + (u2 - p2)^2),  d + sqrt((u1 - p1)^2 + (p2 - l2)^2).

    (nan, nan) when either n is 0."""
    if n1 <= 0 or n2 <= 0:
        return NAN, NAN
    p1, p2 = k1 / n1, k2 / n2
    l1, u1 = wilson(k1, n1, level)
    l2, u2 = wilson(k2, n2, level)
    d = p1 - p2
    return (
        _clamp(d - math.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2), -1.0, 1.0),
        _clamp(d + math.sqrt((u1 - p1) ** 2 + (p2 - l2) ** 2), -1.0, 1.0),
    )


def wald(k: float, n: float, level: float = 0.95) -> tuple[float, float]:
    """The Wald interval k/n -/+ z * sqrt(p (1 - p) / n), clamped to [0, 1]: the textbook
    interval, for comparison (it collapses to a point at 0/n and n/n)."""
    if n <= 0:
        return NAN, NAN
    p = k / n
    half = z_of(level) * math.sqrt(p * (1 - p) / n)
    return _clamp(p - half, 0.0, 1.0), _clamp(p + half, 0.0, 1.0)


def paired_wald(b: float, c: float, n: float, level: float = 0.95) -> tuple[float, float]:
    """The unadjusted Wald interval of a paired difference, (b - c)/n -/+
    z * sqrt((b + c)/n - ((b - c)/n)^2) / sqrt(n), clamped to [-1, 1]: for comparison (a point
    when no pair is discordant)."""
    if n <= 0:
        return NAN, NAN
    d = (b - c) / n
    half = z_of(level) * math.sqrt(max((b + c) / n - d * d, 0.0) / n)
    return _clamp(d - half, -1.0, 1.0), _clamp(d + half, -1.0, 1.0)


def _binomial_pmf(n: int, p: float) -> list[float]:
    return [math.comb(n, j) * p**j * (1 - p) ** (n - j) for j in range(n + 1)]


def percentile_bootstrap(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """The percentile bootstrap interval of a proportion k/n in the limit of infinitely many
    replicates, for comparison: a resample of n items with k right has Binomial(n, k/n) right,
    so the interval is that distribution's (1 -/+ level)/2 quantiles over n. At 0/n and n/n,
    where it is a point, the Clopper-Pearson interval [0, 1 - (alpha/2)^(1/n)] or
    [(alpha/2)^(1/n), 1] instead, as the rates table gives the metrics that keep the
    bootstrap."""
    if n <= 0:
        return NAN, NAN
    alpha = 1 - level
    if k == 0:
        return 0.0, 1 - (alpha / 2) ** (1 / n)
    if k == n:
        return (alpha / 2) ** (1 / n), 1.0
    cdf, lo, hi = 0.0, None, None
    for j, q in enumerate(_binomial_pmf(n, k / n)):
        cdf += q
        if lo is None and cdf >= alpha / 2:
            lo = j
        if hi is None and cdf >= 1 - alpha / 2:
            hi = j
    return lo / n, (hi if hi is not None else n) / n


ONE_SAMPLE: dict[str, Callable[[int, int, float], tuple[float, float]]] = {
    "wilson": wilson,
    "wald": wald,
    "percentile_bootstrap": percentile_bootstrap,
}
PAIRED: dict[str, Callable[[int, int, int, float], tuple[float, float]]] = {
    "bonett_price": bonett_price,
    "paired_wald": paired_wald,
}


def coverage(
    method: str, n: int, p_grid: Iterable, level: float = 0.95, n2: int | None = None
) -> list[float]:
    """The exact coverage of an interval at each point of p_grid: the probability, summed over
    every possible outcome of n items (no simulation), that the interval contains the truth.

    method  one proportion: 'wilson', 'wald', 'percentile_bootstrap'. p_grid: values of p;
            the outcome is k ~ Binomial(n, p), the truth p.
            a paired difference: 'bonett_price', 'paired_wald'. p_grid: pairs (p12, p21), the
            chances of the discordant outcomes +1 and -1 of one pair; the outcome is
            (b, c, n - b - c) ~ Multinomial(n; p12, p21, 1 - p12 - p21), the truth p12 - p21
            (n <= 40: at most 861 outcomes).
            a difference of independent proportions: 'newcombe'. p_grid: pairs (p1, p2); the
            outcome is k1 ~ Binomial(n, p1), k2 ~ Binomial(n2, p2) (n2 defaults to n), the
            truth p1 - p2.
    The interval of every outcome is computed once; a truth on a limit counts as covered (up
    to 1e-12)."""
    eps = 1e-12
    grid = list(p_grid)
    if method in ONE_SAMPLE:
        f = ONE_SAMPLE[method]
        limits = [f(k, n, level) for k in range(n + 1)]
        out = []
        for p in grid:
            pmf = _binomial_pmf(n, p)
            out.append(
                sum(q for q, (lo, hi) in zip(pmf, limits, strict=True) if lo - eps <= p <= hi + eps)
            )
        return out
    if method in PAIRED:
        outcomes = [(b, c) for b in range(n + 1) for c in range(n + 1 - b)]
        limits = [PAIRED[method](b, c, n, level) for b, c in outcomes]
        ways = [math.comb(n, b) * math.comb(n - b, c) for b, c in outcomes]
        out = []
        for p12, p21 in grid:
            d, p0 = p12 - p21, 1 - p12 - p21
            out.append(
                sum(
                    w * p12**b * p21**c * p0 ** (n - b - c)
                    for (b, c), w, (lo, hi) in zip(outcomes, ways, limits, strict=True)
                    if lo - eps <= d <= hi + eps
                )
            )
        return out
    if method == "newcombe":
        m = n if n2 is None else n2
        limits = {
            (k1, k2): newcombe_difference(k1, n, k2, m, level)
            for k1 in range(n + 1)
            for k2 in range(m + 1)
        }
        out = []
        for p1, p2 in grid:
            f1, f2, d = _binomial_pmf(n, p1), _binomial_pmf(m, p2), p1 - p2
            out.append(
                sum(
                    f1[k1] * f2[k2]
                    for (k1, k2), (lo, hi) in limits.items()
                    if lo - eps <= d <= hi + eps
                )
            )
        return out
    known = sorted([*ONE_SAMPLE, *PAIRED, "newcombe"])
    raise ValueError(f"coverage: unknown method {method!r}; one of {known}")
