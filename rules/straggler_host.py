"""One host whose steps take longer than the other hosts' steps (a straggler).

What it finds:
    In a capture of several hosts, the host with the longest mean step time when it lags the median of the
    other hosts by at least 3 % of the step, with every host's step, busy and idle time as evidence.
Why it costs time:
    A synchronous job runs at the pace of its slowest host: the others wait for it at the next
    collective, so one slow host's lag is every host's lag.
How the cost is estimated:
    Cost = the lag: the slowest host's mean step time (over its devices and measured steps) minus the
    median step time of the other hosts. The lag splits into busy time (its devices compute longer) and idle
    time (they wait for their host) against the others' median. Savings = the idle part: what a fix on that
    host's side (its input pipeline, host-side work) recovers; the busy part is the hardware's (a
    replaced or repaired host removes it), so it is not counted.
Fix:
    By where the lag is. Idle lag: the host feeds its devices late; look at its input pipeline (more
    loader workers, e.g. MaxText `grain_worker_count`; confirm with `dataset_type=synthetic`) and at
    host-side work that runs on that host only (callbacks, logging, checkpoint writes). Busy lag: its
    devices compute slower on the same program; check that host's chips for thermal throttling, a
    degraded chip or interconnect link, or other processes, and drain it if it stays slow.
Details:
    slowest_host (text): the host with the longest mean step time
    lag_s (s): its step time minus the other hosts' median (the finding's cost)
    busy_lag_s (s): of the lag, its devices' extra busy time over the other hosts' median
    idle_lag_s (s): of the lag, its devices' extra idle time over the other hosts' median
    median_step_s (s): the median of the other hosts' mean step times
    hosts (list): per host, slowest first: `host`, `devices`, `device_steps`, `step_s`, `busy_s`, `idle_s`,
        `lag_s`
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..analyzer.hosts.step_times import host_step_times
from ..units import count
from . import framework_levers as fwl
from .base import Priced, Target, compose, format_percent, format_seconds
from .levers import name

RULE_ID = "straggler-host"
MIN_LAG_FRACTION = 0.03  # "a few %" of the step: run-to-run noise between identical hosts stays below it
MAX_HOSTS_IN_TEXT = 8


@dataclass(frozen=True)
class Numbers:
    slowest_host: str
    lag_s: float  # s
    busy_lag_s: float  # s
    idle_lag_s: float  # s
    median_step_s: float  # s
    hosts: list  # per host, slowest first
    priced: Priced


def check(analysis) -> list:
    return compose(RULE_ID, measure, title, evidence, fix, analysis)


def measure(analysis) -> Numbers | None:
    if not analysis.measured:
        return None
    hs = host_step_times(analysis.device_steps, analysis.devices)
    if hs.slowest_host is None or not (hs.median_step_s > 0) or hs.lag_s < MIN_LAG_FRACTION * hs.median_step_s:
        return None
    table = hs.table
    slow = table.iloc[0]
    busy_lag = float(slow["busy_s"] - np.median(table["busy_s"].iloc[1:]))
    idle_lag = float(slow["idle_s"] - np.median(table["idle_s"].iloc[1:]))
    lag = hs.lag_s
    savings = max(0.0, min(lag, idle_lag))
    rows = [{"host": str(r.host), "devices": int(r.devices), "device_steps": int(r.device_steps),
             "step_s": float(r.step_s), "busy_s": float(r.busy_s), "idle_s": float(r.idle_s),
             "lag_s": float(r.lag_s)} for r in table.itertuples()]
    return Numbers(
        slowest_host=str(slow["host"]), lag_s=lag, busy_lag_s=busy_lag, idle_lag_s=idle_lag,
        median_step_s=hs.median_step_s, hosts=rows,
        priced=Priced(time_s_per_step=lag, est_savings_s_per_step=savings, step_s=analysis.step_s,
                      confidence="medium", ops=(),
                      lever="feeding that host's devices on time (its input pipeline, host-side work)"
                      if savings > 0 else ""))


def title(n: Numbers) -> str:
    return f"Host {n.slowest_host} lags the other hosts by {format_seconds(n.lag_s)} per step"


def evidence(n: Numbers) -> str:
    slow, lag, savings = n.hosts[0], n.lag_s, n.priced.est_savings_s_per_step
    shown = ", ".join(f"{r['host']} {format_seconds(r['step_s'])}" for r in n.hosts[:MAX_HOSTS_IN_TEXT])
    more = f" and {len(n.hosts) - MAX_HOSTS_IN_TEXT} more" if len(n.hosts) > MAX_HOSTS_IN_TEXT else ""
    text = (
        f"{n.slowest_host}'s steps take {format_seconds(slow['step_s'])} (mean over its {slow['devices']} "
        f"devices and measured steps) against a median of {format_seconds(n.median_step_s)} over the other "
        f"{count(len(n.hosts) - 1, 'host')}: {format_seconds(lag)} ({format_percent(lag / n.median_step_s)}) "
        f"behind. Of the lag, {format_seconds(max(n.busy_lag_s, 0.0))} is busy time (its devices compute longer) "
        f"and {format_seconds(max(n.idle_lag_s, 0.0))} idle time (they wait for the host) against the others. "
        f"Step time per host, slowest first: {shown}{more}.")
    if savings < lag:
        text += (f" The saving counts the idle part only ({format_seconds(savings)}): busy lag is the "
                 "hardware's, not something a setting recovers.")
    return text


def fix(n: Numbers, target: Target) -> str:
    where = "idle" if n.idle_lag_s > n.busy_lag_s else "busy"
    fw = fwl.other(target)
    if fw:
        pipeline = (f"the host feeds its devices late: look at its input pipeline ({fwl.loader(fw)}; to confirm, "
                    "feed one cached batch every step and see the lag go) and at host-side work that runs on that "
                    "host only (Python callbacks, logging, checkpoint writes)")
    else:
        pipeline = (f"the host feeds its devices late: look at its input pipeline (more loader workers, e.g. MaxText "
                    f"{name('grain_worker_count')}; to confirm, rerun with {name('dataset_type')}=synthetic or "
                    f"{name('reuse_example_batch')}=1 and see the lag go) and at host-side work that runs on that "
                    "host only (Python callbacks, logging, checkpoint writes)")
    hardware = ("its devices compute slower than the other hosts' on the same program: check that host's chips "
                "for thermal throttling, a degraded chip or interconnect link, or other processes using them, "
                "check it runs the same program and flags as the others, and drain it if it stays slow")
    first, second = (pipeline, hardware) if where == "idle" else (hardware, pipeline)
    return (f"The lag on {n.slowest_host} is mostly {where} time, so most likely {first}. If that is not it, "
            f"{second}. In a synchronous job every other host waits for {n.slowest_host} at the next collective, "
            "so the whole job runs at its pace.")
