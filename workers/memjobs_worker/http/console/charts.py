"""The console's graphs, drawn on the server as inline SVG: no script, no
library, nothing fetched. A chart is bars, one per time bucket of
:mod:`memjobs_worker.observability.timeline`, scaled to the window's largest
value; each bar carries a ``<title>`` (a tooltip) with its value and time.
Only numbers and fixed labels go into the markup.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from markupsafe import Markup

from memjobs_worker.observability.timeline import Bucket, Window

WIDTH, HEIGHT, LEFT, BOTTOM = 560, 120, 44, 18


def _number(value: float) -> str:
    if value >= 10_000:
        return f"{value / 1000:.0f}k"
    if value >= 100 or value == int(value):
        return f"{value:.0f}"
    return f"{value:.1f}"


def chart(
    buckets: Sequence[Bucket],
    window: Window,
    value: Callable[[Bucket], float | None],
    *,
    label: str,
    unit: str,
    css_class: str,
) -> Markup:
    """An SVG bar chart of ``value`` over ``buckets`` (oldest first)."""
    values = [value(b) for b in buckets]
    top = max([v for v in values if v is not None] + [0.0])
    scale = top if top > 0 else 1.0
    plot_w, plot_h = WIDTH - LEFT, HEIGHT - BOTTOM
    step = plot_w / max(1, len(buckets))
    parts = [
        f'<svg class="chart {css_class}" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" '
        f'height="{HEIGHT}" role="img" aria-label="{label} over the last {window.name}">',
        f'<line class="axis" x1="{LEFT}" y1="{plot_h}" x2="{WIDTH}" y2="{plot_h}"/>',
        f'<text class="tick" x="{LEFT - 4}" y="10" text-anchor="end">{_number(top)}</text>',
        f'<text class="tick" x="{LEFT - 4}" y="{plot_h}" text-anchor="end">0</text>',
    ]
    for i, (bucket, v) in enumerate(zip(buckets, values, strict=True)):
        if not v:
            continue
        h = max(1.0, plot_h * v / scale)
        at = datetime.fromtimestamp(bucket.start, UTC).strftime("%H:%M")
        parts.append(
            f'<rect x="{LEFT + i * step + 0.5:.1f}" y="{plot_h - h:.1f}" '
            f'width="{max(1.0, step - 1):.1f}" height="{h:.1f}">'
            f"<title>{at} UTC: {_number(v)} {unit}</title></rect>"
        )
    span = window.resolution_s * window.buckets
    start_label = f"-{span // 3600} h" if span >= 7200 else f"-{span // 60} min"
    parts.append(f'<text class="tick" x="{LEFT}" y="{HEIGHT - 4}">{start_label}</text>')
    parts.append(f'<text class="tick" x="{WIDTH}" y="{HEIGHT - 4}" text-anchor="end">now</text>')
    parts.append("</svg>")
    return Markup("".join(parts))  # noqa: S704 - numbers and fixed labels only


def charts(buckets: Sequence[Bucket], window: Window) -> dict[str, Markup]:
    """Throughput, failures and mean run time over ``window``."""
    per = "a minute" if window.resolution_s == 60 else f"per {window.resolution_s // 60} min"
    return {
        "throughput": chart(
            buckets, window, lambda b: b.jobs, label="jobs ended", unit=f"jobs {per}", css_class="jobs"
        ),
        "failures": chart(
            buckets, window, lambda b: b.failed, label="jobs failed", unit=f"failed {per}", css_class="failed"
        ),
        "latency": chart(
            buckets, window, lambda b: b.mean_ms, label="mean run time", unit="ms on average", css_class="latency"
        ),
    }
