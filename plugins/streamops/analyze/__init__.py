"""Analyze: pure functions over a stage's recent metric window (POLICIES.md §2, §3.3)."""

from streamops.analyze.fuzzy import bottleneck_score, bottleneck_scores
from streamops.analyze.stats import StageStats, busy_fraction, ds2_target, true_rate_per_core

__all__ = ["StageStats", "busy_fraction", "true_rate_per_core", "ds2_target", "bottleneck_score", "bottleneck_scores"]
