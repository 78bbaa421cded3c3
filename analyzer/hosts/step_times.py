"""Step time per host, and how far the slowest host lags the others (stragglers).

Read from the per-(device, step) table (``tables.DEVICE_STEPS``, built from each host's reduced steps, so
it holds whether hosts were reduced in worker processes or not) and the device -> host map. A host's step
time is the mean over its devices and measured steps; its busy and idle seconds split it the same way.
The lag is the slowest host's step time minus the median of the other hosts' step times: the typical host,
so one slow host stands out by what it adds, among two hosts or two hundred.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

COLUMNS = ["host", "devices", "device_steps", "step_s", "busy_s", "idle_s", "lag_s"]


@dataclass(frozen=True)
class HostSteps:
    table: pd.DataFrame  # one row per host (COLUMNS), slowest first
    median_step_s: float  # the median step time of the hosts other than the slowest (the one host's, alone)
    slowest_host: str | None  # None with fewer than two hosts
    lag_s: float  # slowest host's step time minus the median (0 with fewer than two hosts)

    @property
    def hosts(self) -> int:
        return int(len(self.table))


def host_step_times(device_steps: pd.DataFrame, devices: pd.DataFrame) -> HostSteps:
    """Per-host step, busy and idle seconds from the measured device-steps; an empty table without them."""
    if device_steps.empty or devices.empty or "host" not in devices.columns:
        return HostSteps(pd.DataFrame(columns=COLUMNS), float("nan"), None, 0.0)
    host_of = devices.drop_duplicates("device").set_index("device")["host"].astype(str)
    rows = device_steps.assign(host=host_of.reindex(device_steps["device"].to_numpy()).to_numpy())
    rows = rows[rows["host"].notna()]
    per = rows.groupby("host", sort=True).agg(devices=("device", "nunique"), device_steps=("step", "size"),
                                              step_s=("duration_s", "mean"), busy_s=("busy_s", "mean"),
                                              idle_s=("idle_s", "mean"))
    table = per.reset_index().sort_values(["step_s", "host"], ascending=[False, True], kind="stable")
    table = table.reset_index(drop=True)
    others = table["step_s"].to_numpy()[1:] if len(table) > 1 else table["step_s"].to_numpy()
    median = float(np.median(others)) if len(others) else float("nan")
    table["lag_s"] = table["step_s"] - median
    table = table[COLUMNS]
    if len(table) < 2:
        return HostSteps(table, median, None, 0.0)
    return HostSteps(table, median, str(table["host"].iat[0]), float(max(table["lag_s"].iat[0], 0.0)))
