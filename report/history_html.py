"""``diagnose history --format html``: one self-contained page (inline SVG small multiples, inline CSS, no
script, no URL): the headline, the change points, step time, MFU, the top ops and findings across the runs."""

from __future__ import annotations

from html import escape

from .. import __version__
from ..units import format_percent, format_seconds
from .history_svg import small_multiple

_CSS = """body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;margin:24px;color:#222;max-width:1100px}
h1{font-size:20px}h2{font-size:16px;margin-top:28px}table{border-collapse:collapse;font-size:13px}
td,th{border-bottom:1px solid #ddd;padding:3px 8px;text-align:left}td.n{text-align:right}
.grid{display:flex;flex-wrap:wrap;gap:8px}.grid svg{border:1px solid #eee}.warn{color:#8a5a00}
.slower{color:#c0392b}.faster{color:#2e7d32}"""


def _e(text) -> str:
    return escape("" if text is None else str(text), quote=True)


def _changes_table(data: dict) -> str:
    rows = []
    for c in data["change_points"]:
        rows.append(f"<tr><td class=n>{c['index'] + 1}</td><td>{_e(c['label'])}</td>"
                    f"<td class={c['direction']}>{format_percent(abs(c['change'] or 0.0))} {c['direction']}</td>"
                    f"<td class=n>{format_seconds(c['mean_before_s'])}</td>"
                    f"<td class=n>{format_seconds(c['mean_after_s'])}</td>"
                    f"<td>{_e(c['noise_test']['reason'])}</td></tr>")
    if not rows:
        return "<p>No change point beyond noise.</p>"
    return ("<table><tr><th>run</th><th>label</th><th>change</th><th>before</th><th>after</th><th>steps' test</th>"
            "</tr>" + "".join(rows) + "</table>")


def _runs_table(data: dict) -> str:
    rows = "".join(f"<tr><td class=n>{r['index'] + 1}</td><td>{_e(r['label'])}</td><td>{_e(r['run_time'] or '')}</td>"
                   f"<td class=n>{format_seconds(r['step_s'])}</td><td class=n>{format_percent(r['mfu'])}</td>"
                   f"<td class=n>{r['steps']}</td><td>{_e(r['chip'])}</td></tr>" for r in data["runs"])
    return ("<table><tr><th>run</th><th>label</th><th>run time</th><th>step</th><th>MFU</th><th>steps</th>"
            "<th>chip</th></tr>" + rows + "</table>")


def render_history_html(history) -> str:
    data = history.data
    changes = [c["index"] for c in data["change_points"]]
    labels = [r["label"] for r in data["runs"]]

    def chart(title, values, fmt):
        return small_multiple(title, values, fmt, changes, labels=labels)

    series = [chart("step time", [r["step_s"] for r in data["runs"]], format_seconds),
              chart("MFU", [r["mfu"] for r in data["runs"]], format_percent)]
    ops = [chart(row["key"], row["s_per_step"], format_seconds) for row in data["top_ops"]]
    findings = [chart(row["title"], row["s_per_step"], format_seconds) for row in data["top_findings"]]
    warnings = "".join(f'<p class="warn">warning: {_e(w)}</p>' for w in data["warnings"])
    regression = data["regression"]
    gate = f"<p><b>{'REGRESSED' if regression['regressed'] else 'gate ok'}:</b> {_e(regression['reason'])}</p>" \
        if regression["threshold"] is not None else ""
    return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="xladiag {_e(__version__)}">
<title>xladiag history</title>
<style>{_CSS}</style>
</head>
<body>
<h1>xladiag history</h1>
<p>{_e(data['headline'])}</p>
{gate}{warnings}
<h2>Change points</h2>
{_changes_table(data)}
<p><small>A change point: {_e(data['test']['rule'])}, {_e(data['test']['run_rule'])}. {_e(data['test']['method'])}.
</small></p>
<h2>Step time and MFU</h2>
<div class="grid">{''.join(series)}</div>
<h2>Top ops (time per step)</h2>
<div class="grid">{''.join(ops) or '<p>No ops.</p>'}</div>
<h2>Top findings (time per step)</h2>
<div class="grid">{''.join(findings) or '<p>No findings.</p>'}</div>
<h2>Runs</h2>
{_runs_table(data)}
</body>
</html>
"""
