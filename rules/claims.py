"""Honest accounting: each op's time is counted by at most one finding, so the savings add up.

Two rules can name the same op (a small all-gather is latency-bound, exposed and maybe recomputed). The
more specific diagnosis keeps the op; the other lists it as related and its saving shrinks to the ops it
keeps. "Specific" is about the op itself; each rule declares its rank as ``PRECEDENCE`` (``registry.PRECEDENCE``
collects them), most specific first:

1. ``retiling-copy``: the op should not exist at all (a layout change nobody asked for);
2. ``latency-bound-collective``: the op is too small for its link; its fix (combine) changes the op;
3. ``remat-overhead``: the op is forward work done again; its fix (keep the result) removes it;
4. ``sharding-intensity``: the op moves more bytes than the matmuls it feeds or follows can hide; its fix
   (more compute per byte) is what lets any schedule hide it;
5. ``hbm-headroom``: recomputed ops whose outputs fit in free HBM; the same ops and lever as remat-overhead,
   which keeps them when both fire (hbm-headroom counts them when remat-overhead is not selected);
6. ``exposed-collective`` and ``exposed-host-transfer``: the op is not hidden behind compute, which holds for
   any transfer: the most generic diagnosis, so it counts only what no other finding explains;
7. ``mxu-padding``: a matmul's padded share; a recomputed dot's time belongs to remat-overhead first;
8. ``materialized-attention``: the score chain's ops;
9. ``low-precision``: any compute-bound matmul, the most generic matmul diagnosis: it counts only the dots no
   finding above explains (a padded dot's time belongs to mxu-padding).

A rule without a rank (``base.LAST``) ranks after them. The recoverable total is the sum of the savings that remain.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace

from .base import LAST, Finding, format_seconds


def resolve_claims(findings: list[Finding], precedence: Mapping[str, float]) -> list[Finding]:
    """``findings`` with every claimed op counted by one finding only (same order as given).

    A finding that loses ops to a more specific one counts in the total only the share of its saving that its
    remaining ops carry (``counted_s_per_step``: its own estimate, prorated by claimed seconds), names the lost
    ops in ``related`` and says so in its evidence. Its saving alone (``est_savings_s_per_step``: what applying
    its fix by itself recovers) and its cost (``time_s_per_step``, the title) stay what the rule measured.
    ``precedence``: rule id -> rank (lower keeps a shared op first); a rule not in it ranks last."""
    def _rank(finding: Finding) -> tuple:
        return precedence.get(finding.rule, LAST), -finding.est_savings_s_per_step, finding.key

    owner: dict[tuple[str, str, str], Finding] = {}
    out = list(findings)
    for index in sorted(range(len(findings)), key=lambda i: _rank(findings[i])):
        finding = findings[index]
        lost = [c for c in finding.claims if c.op in owner]
        for claim in finding.claims:
            owner.setdefault(claim.op, finding)
        if not lost:
            continue
        claimed_s = sum(c.s_per_step for c in finding.claims)
        lost_s = sum(c.s_per_step for c in lost)
        kept = max(claimed_s - lost_s, 0.0) / claimed_s if claimed_s > 0 else 1.0
        counted = finding.est_savings_s_per_step * kept
        counters = sorted({owner[c.op].title for c in lost})
        rest = (f": alone its fix saves {format_seconds(finding.est_savings_s_per_step)} per step, of which "
                f"{format_seconds(counted)} counts in the total (the rest overlaps)"
                if finding.est_savings_s_per_step > 0 else "")
        evidence = (f"{finding.evidence} {len(lost)} of its {len(finding.claims)} ops "
                    f"({format_seconds(lost_s)} per step) are counted by a more specific finding "
                    f"({'; '.join(counters)}){rest}.")
        out[index] = replace(finding, counted_s_per_step=float(counted), evidence=evidence,
                             related=tuple((c.op_name, owner[c.op].key) for c in lost))
    return out


def recoverable_s_per_step(findings, step_s: float) -> float:
    """Sum of the findings' counted savings (their ops are disjoint after ``resolve_claims``), never above the
    step."""
    total = float(sum(f.counted for f in findings))
    return min(total, step_s) if step_s is not None and math.isfinite(step_s) and step_s > 0 else total


CPU_SCOPE = ("CPU capture: the program's ops, their counts, shapes and bytes, and the collectives' groups hold "
             "on the accelerator; times, overlap and what bounds each op are this host's (its chip numbers are "
             "a rough placeholder), so each saving is what its fix recovers on this host. Capture the step on "
             "the accelerator for its times.")


def capture_scope(analysis) -> str | None:
    """What the capture can and cannot tell, where that limits the findings (CPU captures); else None."""
    return CPU_SCOPE if analysis.platform == "cpu" and analysis.measured else None
