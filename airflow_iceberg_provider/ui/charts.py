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
        return f'<svg class="chart" width="{width}" height="40" fill="currentColor"><text x="10" y="24">No snapshots.</text></svg>'
    t0, t1 = snaps[0]["timestamp_ms"], snaps[-1]["timestamp_ms"]
    span = max(t1 - t0, 1)
    plot_w = width - left - 20

    def x(ms: int) -> float:
        return round(left + (ms - t0) / span * plot_w, 1)

    by_id = {s["snapshot_id"]: s for s in snaps}
    out = [
        f'<svg class="chart" role="img" aria-label="snapshot timeline" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg" font-family="sans-serif" font-size="11" '
        'fill="currentColor">'
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


def _bytes(v: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(v) < 1024:
            return f"{v:.0f} {unit}" if unit == "B" else f"{v:.1f} {unit}"
        v /= 1024
    return f"{v:.1f} TB"


def _label(key: str) -> str:
    """``rewritten_data_files_count`` -> ``rewritten data files``."""
    for suffix in ("_count",):
        if key.endswith(suffix):
            key = key[: -len(suffix)]
    return key.replace("_", " ")


def _value_text(key: str, v: float) -> str:
    return _bytes(v) if "bytes" in key else f"{v:,.0f}" if float(v).is_integer() else f"{v:,.2f}"


def _ticks(peak: float) -> list[float]:
    """Round axis values from 0 to at least ``peak`` (0, 1/2, 1 of a 1-2-5 step)."""
    if peak <= 0:
        return [0.0, 1.0]
    step = 10 ** (len(str(int(peak))) - 1)
    for m in (1, 2, 5, 10):
        if peak <= step * m:
            top = step * m
            break
    return [0.0, top / 2, float(top)]


def _plan_text(r: Mapping[str, Any]) -> str:
    """The whole job's effect on the table, said once per job (not once per action)."""
    b, a = r.get("before"), r.get("after")
    if not (b and a):
        return ""
    return (
        f"table after the job: data files {b['data_files']} → {a['data_files']}, "
        f"avg file size {_bytes(b['avg_file_bytes'])} → {_bytes(a['avg_file_bytes'])}, "
        f"delete files {b['delete_files']} → {a['delete_files']}, manifests {b['manifests']} → {a['manifests']}"
    )


def _moment_rows(rows: list[str], run: Mapping[str, Any], y: int, row_h: int, label_x: int, x: int) -> int:
    """One text row per moment an action reported (a date) and per length of time (in words): text, never
    a bar; returns the new ``y``."""
    texts = [(k, "moment", f"{when:%Y-%m-%d %H:%M:%S UTC}") for k, when in (run.get("moments") or {}).items()]
    texts += [(k, "duration", str(text)) for k, text in (run.get("durations") or {}).items()]
    for key, kind, text in texts:
        y += row_h
        rows.append(f'<text x="{label_x}" y="{y - 5}">{escape(_label(key))}</text>')
        rows.append(f'<text class="{kind}" x="{x}" y="{y - 5}">{escape(text)}</text>')
    return y


def health_svg(runs: Sequence[Mapping[str, Any]], *, max_jobs: int = 3, width: int = 980) -> str:
    """What each maintenance action did: one horizontal bar per figure of its own output, with axis values.

    :param runs: :func:`.views.maintenance_runs` output (newest first). Actions of one job (one
        ``job_run_id``) are drawn together under one line that gives the table's health before and
        after the whole job; byte figures get their own axis, counts share one per action.
    """
    jobs: dict[str, list[Mapping[str, Any]]] = {}
    for r in runs:
        key = str(r.get("job_run_id") or r.get("event_id"))
        if key not in jobs and len(jobs) >= max_jobs:
            continue
        jobs.setdefault(key, []).append(r)
    if not jobs:
        return (
            '<svg class="chart" width="400" height="30" fill="currentColor">'
            '<text x="4" y="20">No maintenance runs yet.</text></svg>'
        )
    label_w, row_h, left_pad = 300, 18, 10
    plot_x0 = left_pad + label_w
    plot_w = width - plot_x0 - 90
    rows: list[str] = []
    y = 8
    for group in jobs.values():
        group = sorted(group, key=lambda r: str(r.get("event_id")))
        first = group[0]
        when = f"{first['finished_at']:%Y-%m-%d %H:%M UTC}" if first.get("finished_at") else ""
        y += 14
        rows.append(f'<text x="{left_pad}" y="{y}" font-weight="bold" font-size="12">Job of {escape(when)}</text>')
        y += 14
        rows.append(f'<text class="plan" x="{left_pad}" y="{y}" font-size="11">{escape(_plan_text(first))}</text>')
        y += 4
        for r in group:
            y += row_h
            status = "" if r.get("status") == "succeeded" else f" ({r.get('status')})"
            rows.append(
                f'<text class="action" x="{left_pad}" y="{y - 4}" font-weight="bold">{escape(str(r.get("action")))}{escape(status)}</text>'
            )
            out = r.get("output") or {}
            y = _moment_rows(rows, r, y, row_h, left_pad + 14, plot_x0)
            if not out:
                if not (r.get("moments") or r.get("durations")):
                    rows.append(f'<text x="{plot_x0}" y="{y - 4}" class="muted">no figures reported</text>')
                continue
            counts = {k: v for k, v in out.items() if "bytes" not in k}
            sizes = {k: v for k, v in out.items() if "bytes" in k}
            for figures in (counts, sizes):
                if not figures:
                    continue
                ticks = _ticks(max(figures.values()))
                top = ticks[-1] or 1
                axis_y = y + 2
                for key, v in figures.items():
                    y += row_h
                    w = round(max(v, 0) / top * plot_w, 1)
                    rows.append(f'<text x="{left_pad + 14}" y="{y - 5}">{escape(_label(key))}</text>')
                    rows.append(
                        f'<rect class="bar" x="{plot_x0}" y="{y - 14}" width="{w}" height="11" fill="#1565c0">'
                        f"<title>{escape(str(r.get('action')))}: {escape(_label(key))} {escape(_value_text(key, v))}</title></rect>"
                    )
                    rows.append(
                        f'<text class="value" x="{plot_x0 + w + 4}" y="{y - 5}">{escape(_value_text(key, v))}</text>'
                    )
                y += 14
                rows.append(
                    f'<line x1="{plot_x0}" x2="{plot_x0 + plot_w}" y1="{y - 10}" y2="{y - 10}" stroke="#9e9e9e"/>'
                )
                rows.append(f'<line x1="{plot_x0}" x2="{plot_x0}" y1="{axis_y}" y2="{y - 10}" stroke="#9e9e9e"/>')
                for t in ticks:
                    tx = round(plot_x0 + t / top * plot_w, 1)
                    key0 = next(iter(figures))
                    rows.append(f'<line x1="{tx}" x2="{tx}" y1="{y - 10}" y2="{y - 6}" stroke="#9e9e9e"/>')
                    rows.append(
                        f'<text class="tick" x="{tx}" y="{y + 2}" text-anchor="middle" font-size="9">'
                        f"{escape(_value_text(key0, t))}</text>"
                    )
        y += 8
    height = y + 8
    return (
        f'<svg class="chart" role="img" aria-label="what each maintenance action did" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg" font-family="sans-serif" font-size="10" '
        f'fill="currentColor">{"".join(rows)}</svg>'
    )
