"""Inline SVG charts (server-rendered, no JavaScript, no CDN): snapshot timeline and health before/after.

Pure functions from the shaped values of :mod:`.views` to an SVG string; every label is escaped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from html import escape
from typing import Any

#: Lane order of the timeline; other operations go to the last lane.
LANES = ("append", "overwrite", "delete", "replace")
COLORS = {"append": "#2e7d32", "overwrite": "#1565c0", "delete": "#c62828", "replace": "#6a1b9a", "other": "#616161"}
REF_COLORS = {"branch": "#1565c0", "tag": "#ef6c00", "hold": "#b71c1c"}


def _ts(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def timeline_svg(
    data: Mapping[str, Any], *, highlight: str | None = None, width: int = 980, max_dots: int = 1500
) -> str:
    """Snapshots as dots in one lane per operation over time; refs as labelled vertical markers.

    :param data: :func:`.views.timeline` output (snapshot ids are strings).
    :param highlight: a snapshot id (string) drawn with a ring (the publish link's target).
    :param max_dots: above this many snapshots, snapshots of one operation within 2 px share a dot
        (its tooltip gives the count and time range); ref targets and the highlight keep their own.
    """
    snaps = data["snapshots"]
    refs = data["refs"]
    lanes = [*LANES, "other"]
    left, top, lane_h = 90, 14 + 16 * min(len(refs), 6), 26
    height = top + lane_h * len(lanes) + 30
    if not snaps:
        return f'<svg class="chart" width="{width}" height="40"><text x="10" y="24">No snapshots.</text></svg>'
    t0, t1 = snaps[0]["timestamp_ms"], snaps[-1]["timestamp_ms"]
    span = max(t1 - t0, 1)
    plot_w = width - left - 20

    def x(ms: int) -> float:
        return round(left + (ms - t0) / span * plot_w, 1)

    by_id = {s["snapshot_id"]: s for s in snaps}
    out = [
        f'<svg class="chart" role="img" aria-label="snapshot timeline" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg" font-family="sans-serif" font-size="11">'
    ]
    for i, lane in enumerate(lanes):
        y = top + i * lane_h + lane_h / 2
        out.append(f'<text x="4" y="{y + 4}" fill="{COLORS[lane]}">{lane}</text>')
        out.append(f'<line x1="{left}" x2="{width - 10}" y1="{y}" y2="{y}" stroke="#e0e0e0"/>')
    for i, ref in enumerate(refs):
        snap = by_id.get(ref["snapshot_id"])
        if snap is None:
            continue
        kind = "hold" if ref["legal_hold"] else ref["type"]
        rx = x(snap["timestamp_ms"])
        label_y = 12 + 16 * (i % 6)
        dash = "" if kind == "branch" else ' stroke-dasharray="4 3"'
        out.append(
            f'<line x1="{rx}" x2="{rx}" y1="{label_y + 2}" y2="{height - 28}" stroke="{REF_COLORS[kind]}"{dash}/>'
        )
        prefix = "⚖ hold " if kind == "hold" else "⎇ " if kind == "branch" else "◆ tag "
        anchor = "end" if rx > width - 160 else "start"
        out.append(
            f'<text class="ref ref-{kind}" x="{rx + (-3 if anchor == "end" else 3)}" y="{label_y}" '
            f'text-anchor="{anchor}" fill="{REF_COLORS[kind]}">{escape(prefix + ref["name"])} '
            f"@ {escape(ref['snapshot_id'])}</text>"
        )
    marked = {r["snapshot_id"] for r in refs} | {highlight}
    buckets: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for s in snaps:
        op = s["operation"] if s["operation"] in LANES else "other"
        cx = x(s["timestamp_ms"])
        # one dot per lane and 2-px column when the history is long (a 5,000-snapshot table stays a small page)
        key = (
            (op, int(cx // 2)) if len(snaps) > max_dots and s["snapshot_id"] not in marked else (op, -len(buckets) - 1)
        )
        buckets.setdefault(key, []).append(s)
    for (op, _), group in buckets.items():
        s = group[-1]
        cy = top + lanes.index(op) * lane_h + lane_h / 2
        cx = x(s["timestamp_ms"])
        if len(group) == 1:
            title = f"{s['snapshot_id']} · {s['operation']} · {_ts(s['timestamp_ms'])}"
        else:
            title = f"{len(group)} {op} snapshots {_ts(group[0]['timestamp_ms'])} – {_ts(s['timestamp_ms'])}"
        if s["snapshot_id"] == highlight:
            out.append(
                f'<circle class="highlight" cx="{cx}" cy="{cy}" r="8" fill="none" stroke="#000" stroke-width="2"/>'
            )
        r = 3.5 if len(group) == 1 else 4.5
        out.append(f'<circle cx="{cx}" cy="{cy}" r="{r}" fill="{COLORS[op]}"><title>{escape(title)}</title></circle>')
    base = height - 12
    out.append(f'<text x="{left}" y="{base}">{_ts(t0)}</text>')
    out.append(f'<text x="{width - 10}" y="{base}" text-anchor="end">{_ts(t1)}</text>')
    out.append("</svg>")
    return "".join(out)


_METRICS = (
    ("data_files", "data files", lambda v: str(v)),
    ("avg_file_bytes", "avg file size", lambda v: _bytes(v)),
    ("delete_files", "delete files", lambda v: str(v)),
)


def _bytes(v: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(v) < 1024:
            return f"{v:.0f} {unit}" if unit == "B" else f"{v:.1f} {unit}"
        v /= 1024
    return f"{v:.1f} TB"


def health_svg(runs: Sequence[Mapping[str, Any]], *, max_runs: int = 10, width: int = 980) -> str:
    """Grouped bars (before grey, after green) per maintenance run for file count, avg size, delete files.

    :param runs: :func:`.views.maintenance_runs` output (newest first); runs without figures are skipped.
    """
    runs = [r for r in runs if r.get("before") and r.get("after")][:max_runs][::-1]
    if not runs:
        return '<svg class="chart" width="400" height="30"><text x="4" y="20">No maintenance runs yet.</text></svg>'
    panel_w = (width - 20) // len(_METRICS)
    plot_h, top = 130, 24
    height = top + plot_h + 46
    out = [
        f'<svg class="chart" role="img" aria-label="health before and after maintenance" width="{width}" '
        f'height="{height}" xmlns="http://www.w3.org/2000/svg" font-family="sans-serif" font-size="10">'
    ]
    for p, (key, label, fmt) in enumerate(_METRICS):
        x0 = 10 + p * panel_w
        peak = max(max(r["before"][key], r["after"][key]) for r in runs) or 1
        out.append(f'<text x="{x0}" y="14" font-size="12" font-weight="bold">{escape(label)}</text>')
        group_w = (panel_w - 20) / len(runs)
        bar_w = max(min(group_w / 2 - 2, 26), 2)
        for i, r in enumerate(runs):
            gx = x0 + i * group_w
            for j, (which, color) in enumerate((("before", "#9e9e9e"), ("after", "#2e7d32"))):
                v = r[which][key]
                h = round(v / peak * plot_h, 1)
                bx = round(gx + j * (bar_w + 1), 1)
                tip = (
                    f"{r['action']} {r['finished_at']:%Y-%m-%d %H:%M} {which}: {fmt(v)}" if r.get("finished_at") else ""
                )
                out.append(
                    f'<rect class="bar-{which}" x="{bx}" y="{top + plot_h - h}" width="{bar_w}" height="{h}" '
                    f'fill="{color}"><title>{escape(tip)}</title></rect>'
                )
                if len(runs) <= 4:
                    out.append(
                        f'<text x="{bx + bar_w / 2}" y="{top + plot_h - h - 2}" text-anchor="middle">'
                        f"{escape(fmt(v))}</text>"
                    )
            out.append(
                f'<text x="{gx + bar_w}" y="{top + plot_h + 12}" text-anchor="middle">'
                f"{escape((r.get('action') or '')[:14])}</text>"
            )
    legend_y = height - 10
    out.append(f'<rect x="10" y="{legend_y - 8}" width="10" height="10" fill="#9e9e9e"/>')
    out.append(f'<text x="24" y="{legend_y}">before</text>')
    out.append(f'<rect x="70" y="{legend_y - 8}" width="10" height="10" fill="#2e7d32"/>')
    out.append(f'<text x="84" y="{legend_y}">after</text>')
    out.append("</svg>")
    return "".join(out)
