"""Line charts as standalone SVG, with nothing but the standard library.

Owns drawing only: bench/compare hands it panels of series (x = connection
counts, y = a metric per target) and gets back one SVG document. It reads no
files and knows nothing about benchmarks.
"""
from html import escape
import math

COLORS = {"direct": "#4c72b0", "pglane": "#dd8452", "pgbouncer": "#55a868"}
FALLBACK = ["#c44e52", "#8172b3", "#937860", "#da8bc3"]

PANEL_W, PANEL_H = 420, 260
MARGIN_L, MARGIN_R, MARGIN_T, MARGIN_B = 70, 20, 40, 45


def nice_ticks(top, count=5):
    """Round tick values from 0 to at least `top`."""
    if top <= 0:
        return [0, 1]
    raw = top / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    ticks, value = [], 0.0
    while value < top + step * 0.999:
        ticks.append(value)
        value += step
    return ticks


def fmt(v):
    if v >= 1000:
        return f"{v / 1000:g}k"
    return f"{v:g}"


def panel(title, ylabel, xs, series, ox, oy):
    """One panel at (ox, oy): `series` maps a target name to y values (None = no data)."""
    out = []
    w = PANEL_W - MARGIN_L - MARGIN_R
    h = PANEL_H - MARGIN_T - MARGIN_B
    x0, y0 = ox + MARGIN_L, oy + MARGIN_T
    values = [v for ys in series.values() for v in ys if v is not None]
    ticks = nice_ticks(max(values) if values else 1)
    top = ticks[-1] or 1

    def px(i):
        return x0 + (w * (i + 0.5) / len(xs))

    def py(v):
        return y0 + h - h * v / top

    out.append(f'<text x="{ox + PANEL_W / 2}" y="{oy + 22}" text-anchor="middle" font-weight="bold">{escape(title)}</text>')
    out.append(f'<rect x="{x0}" y="{y0}" width="{w}" height="{h}" fill="none" stroke="#999"/>')
    for t in ticks:
        y = py(t)
        out.append(f'<line x1="{x0}" y1="{y:.1f}" x2="{x0 + w}" y2="{y:.1f}" stroke="#e5e5e5"/>')
        out.append(f'<text x="{x0 - 6}" y="{y + 4:.1f}" text-anchor="end" font-size="11">{fmt(t)}</text>')
    for i, x in enumerate(xs):
        out.append(f'<text x="{px(i):.1f}" y="{y0 + h + 16}" text-anchor="middle" font-size="11">{x}</text>')
    out.append(f'<text x="{x0 + w / 2}" y="{y0 + h + 34}" text-anchor="middle" font-size="11">connections</text>')
    out.append(f'<text transform="translate({ox + 16},{y0 + h / 2}) rotate(-90)" text-anchor="middle" font-size="11">{escape(ylabel)}</text>')
    for k, (name, ys) in enumerate(series.items()):
        color = COLORS.get(name, FALLBACK[k % len(FALLBACK)])
        points = [(px(i), py(v)) for i, v in enumerate(ys) if v is not None]
        if len(points) > 1:
            path = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
            out.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"/>')
        for x, y in points:
            out.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3.5" fill="{color}"/>')
    return out


def chart(title, rows, targets):
    """`rows`: list of (row title, xs, [(panel title, y label, {target: ys}), ...]).

    Returns an SVG document with one row of panels per entry and a legend.
    """
    columns = max(len(panels) for _, _, panels in rows)
    width = columns * PANEL_W
    legend_h = 50
    height = legend_h + len(rows) * PANEL_H
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="DejaVu Sans, Arial, sans-serif" font-size="13">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{width / 2}" y="20" text-anchor="middle" font-size="15" font-weight="bold">{escape(title)}</text>']
    lx = 20
    for k, name in enumerate(targets):
        color = COLORS.get(name, FALLBACK[k % len(FALLBACK)])
        out.append(f'<rect x="{lx}" y="30" width="14" height="14" fill="{color}"/>')
        out.append(f'<text x="{lx + 20}" y="42">{escape(name)}</text>')
        lx += 30 + 9 * len(name)
    for r, (row_title, xs, panels) in enumerate(rows):
        for c, (panel_title, ylabel, series) in enumerate(panels):
            out += panel(f"{row_title}: {panel_title}", ylabel, xs, series, c * PANEL_W, legend_h + r * PANEL_H)
    out.append("</svg>")
    return "\n".join(out) + "\n"
