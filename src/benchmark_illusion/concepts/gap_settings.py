"""The settings of the competency gaps (config `concepts.gaps`): GapSettings, read by the concept
SQL's parameters, the damage tests (damage.py) and the stability subsamples (gaps.py).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GapSettings:
    """Config `concepts.gaps` (quantiles, minimum support, stability subsamples, the damage tests),
    seeded by `seed`; `ci_level` is the metric tables' (config `metrics.ci_level`)."""

    under_quantile: float = 0.1
    over_quantile: float = 0.9
    min_support: int = 20
    stability_fraction: float = 0.8
    stability_repeats: int = 10
    permutations: int = 1000
    fdr_q: float = 0.1
    ci_level: float = 0.95
    seed: int = 1234

    def check(self) -> None:
        if not 0 <= self.under_quantile < self.over_quantile <= 1:
            raise ValueError(
                f"concepts.gaps: need 0 <= under_quantile < over_quantile <= 1, got {self}"
            )
        if not 0 < self.stability_fraction <= 1:
            raise ValueError(
                f"concepts.gaps.stability_fraction must be in (0, 1], got {self.stability_fraction}"
            )
        if self.permutations < 1:
            raise ValueError(f"concepts.gaps.permutations must be >= 1, got {self.permutations}")
        if not 0 < self.fdr_q <= 1:
            raise ValueError(f"concepts.gaps.fdr_q must be in (0, 1], got {self.fdr_q}")
        if not 0 < self.ci_level < 1:
            raise ValueError(f"ci_level must be in (0, 1), got {self.ci_level}")
