"""The summary parts of the HTML report: the headline cards, the capture table (every number with where it
came from) and the hosts section; formatted from :func:`.json_out.report_to_dict`'s numbers.
"""

from __future__ import annotations

from pathlib import Path

from ..units import count, format_percent, format_seconds, format_si
from .choices import choice_rows, program_share_text
from .model import memory_name, mfu_value

# How each number's origin is written in the report (one legend, used everywhere).
SRC_MEASURED = "measured"
SRC_PREDICTED = "predicted"


def summary_cards(data: dict, time_word: str) -> list[dict]:
    """The headline numbers at the top: step time, MFU, ideal step, idle, recoverable, biggest fix."""
    measured, step_s = data["measured"], data["step_s"]
    ideal_known = data["ideal_step_s"] is not None  # None: no op has a prediction (not 'an ideal of 0 s')
    cards = [
        {"label": "Step time", "value": format_seconds(step_s), "source": time_word,
         "sub": (f"mean of {count(data['steps']['count'], 'step')} per device{program_share_text(data['steps'])}"
                 if measured
                 else "sum of per-op roofline predictions")},
        {"label": "MFU", "value": mfu_value(data),
         "source": "model FLOPs (trace metadata / HLO dump) ÷ (step × chip peak)",
         "sub": f"peak {format_si(data['chip']['peak_flops_per_s'], 'FLOP/s')}"},
        {"label": "Roofline ideal step", "value": format_seconds(data["ideal_step_s"]) if ideal_known else "n/a",
         "source": SRC_PREDICTED,
         "sub": "every op at its roofline" if ideal_known else "no op has FLOPs or bytes: pass --hlo-dir"},
    ]
    if data["unpriced_share"]:
        cards.append({"label": "Unpriced", "value": format_percent(data["unpriced_share"]),
                      "source": "ops with no cost model (bound unknown)",
                      "sub": "of the step; left out of the ideal step" + ("; MFU a lower bound"
                                                                          if data["mfu_at_least"] else "")})
    if measured and data["steps"]["idle_s"] is not None:
        cards.append({"label": "Idle per step", "value": format_seconds(data["steps"]["idle_s"]),
                      "source": SRC_MEASURED,
                      "sub": f"{format_percent(data['steps']['idle_s'] / step_s) if step_s else 'n/a'} of the step"})
    rec = data["recoverable"]
    cards.append({"label": "Recoverable per step", "value": format_seconds(rec["s_per_step"]),
                  "source": "sum of the findings' savings, each op counted by one finding",
                  "sub": f"{format_percent(rec['fraction_of_step'])} of the step"
                  if rec["fraction_of_step"] is not None else "per step"})
    if data["findings"]:
        top = data["findings"][0]
        cards.append({"label": "Biggest fix saves", "value": format_seconds(top["est_savings_s_per_step"]),
                      "source": "estimated by rule " + top["rule"],
                      "sub": f"per step, by {top['lever']}" if top["lever"] else "per step"})
    return cards


def capture_rows(data: dict, analysis) -> list[tuple[str, str, str]]:
    """(what, value, where it came from) for the capture summary."""
    chip, steps, run = data["chip"], data["steps"], data["run"]
    src = chip["source"]
    rows = [
        ("Chip", chip["name"], chip["detected_as"]),
        ("Peak compute", format_si(chip["peak_flops_per_s"], "FLOP/s") + " (bf16)", src["peak_flops_per_s"]),
        (f"{memory_name(data)} bandwidth".replace("memory", "Memory"), format_si(chip["hbm_bytes_per_s"], "B/s"),
         src["hbm_bytes_per_s"]),
        ("Ridge point", format_si(chip["ridge_flops_per_byte"], "FLOP/B"), f"peak ÷ {memory_name(data)} bandwidth"),
    ]
    for key, label, unit in (("ici_link_bytes_per_s_oneway", "Interconnect link (one way)", "B/s"),
                             ("pcie_bytes_per_s", "Host link (PCIe)", "B/s"),
                             ("per_hop_latency_s", "Collective per-hop latency", "s")):
        if chip["other_numbers"].get(key) is not None:
            value = chip["other_numbers"][key]
            rows.append((label, format_seconds(value) if unit == "s" else format_si(value, unit), src.get(key, "")))
    types = sorted({str(d.get("device_type") or "") for d in data["device_list"]} - {""})
    rows += [
        ("Platform", data["platform"] + ("" if data["measured"] else " (HLO dump only: nothing measured)"), ""),
        ("Devices", f"{data['devices']}" + (f" × {', '.join(types)}" if types else ""),
         "trace" if data["measured"] else ""),
        ("Hosts", ", ".join(data["hosts"]) or "—", "trace" if data["measured"] else ""),
        ("Run", run["name"] or "—", str(run["dir"] or "")),
    ]
    if run.get("note"):
        rows.append(("Runs", run["note"], "others: " + ", ".join(run["other_runs"])))
    elif run["other_runs"]:
        rows.append(("Other runs present", ", ".join(run["other_runs"]), "pick one with --run NAME"))
    rows += choice_rows(data.get("choices") or {})
    if data["measured"]:
        warm = "first execution excluded as warm-up" if steps["warmup_excluded"] else "no warm-up excluded"
        rows += [
            ("Steps", f"{steps['count']} measured ({warm})", steps["source"]),
            ("Mean step time", f"{format_seconds(steps['mean_s'])} (min {format_seconds(steps['min_s'])}, "
                               f"max {format_seconds(steps['max_s'])})", SRC_MEASURED),
            ("Busy / idle per step", f"{format_seconds(steps['busy_s'])} / {format_seconds(steps['idle_s'])}",
             SRC_MEASURED + " (union of op intervals; idle = the gaps)"),
        ]
    else:
        rows.append(("Step time", format_seconds(data["step_s"]) + " (sum of per-op predictions)", SRC_PREDICTED))
    if data["model_flops_per_step"]:
        rows.append(("Model FLOPs per step", format_si(data["model_flops_per_step"], "FLOP"),
                     "trace metadata / HLO dump, per device"))
    rows.append(("Trace files", ", ".join(Path(p).name for p in run["xplane_files"]) or "—", ""))
    rows.append(("HLO dump files", ", ".join(Path(p).name for p in run["hlo_files"]) or "—", ""))
    return rows


def host_rows(host_steps: dict | None) -> dict | None:
    """The hosts section (two hosts or more): per host, slowest first, and the slowest host's lag."""
    if not host_steps or len(host_steps["hosts"]) < 2:
        return None
    rows = [{"host": h["host"], "devices": h["devices"], "step": format_seconds(h["step_s"]),
             "busy": format_seconds(h["busy_s"]), "idle": format_seconds(h["idle_s"]),
             "lag": format_seconds(h["lag_s"]), "slowest": h["host"] == host_steps["slowest_host"]}
            for h in host_steps["hosts"]]
    return {"rows": rows, "slowest": host_steps["slowest_host"], "lag": format_seconds(host_steps["lag_s"]),
            "share": format_percent(host_steps["lag_fraction"]), "median": format_seconds(host_steps["median_step_s"])}
