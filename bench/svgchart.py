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


def plot_area(x0, y0, w, h, ticks, py, label):
    """The frame of a plot at (x0, y0), w by h, with a grid line and a `label`led
    tick at each of `ticks` (placed by `py`)."""
    out = [f'<rect x="{x0}" y="{y0}" width="{w}" height="{h}" fill="none" stroke="#999"/>']
    for t in ticks:
        y = py(t)
        out.append(f'<line x1="{x0}" y1="{y:.1f}" x2="{x0 + w}" y2="{y:.1f}" stroke="#e5e5e5"/>')
        out.append(f'<text x="{x0 - 6}" y="{y + 4:.1f}" text-anchor="end" font-size="11">{label(t)}</text>')
    return out


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
    out += plot_area(x0, y0, w, h, ticks, py, fmt)
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


BAR_PANEL_W, BAR_PANEL_H = 470, 300


def bar_panel(title, subtitle, groups, series, colors, ox, oy, reference=None):
    """Grouped bars at (ox, oy): `groups` are the x labels, `series` maps a
    name to one value per group (None = no bar). `reference` draws a dashed
    line at that value, labelled (e.g. direct PostgreSQL at 1.0)."""
    out = []
    w = BAR_PANEL_W - MARGIN_L - MARGIN_R
    h = BAR_PANEL_H - MARGIN_T - MARGIN_B - 20
    x0, y0 = ox + MARGIN_L, oy + MARGIN_T + 20
    values = [v for ys in series.values() for v in ys if v is not None] + ([reference] if reference else [])
    ticks = nice_ticks(max(values) * 1.1 if values else 1)
    top = ticks[-1] or 1

    def py(v):
        return y0 + h - h * v / top

    out.append(f'<text x="{ox + BAR_PANEL_W / 2}" y="{oy + 22}" text-anchor="middle" font-weight="bold">{escape(title)}</text>')
    out.append(f'<text x="{ox + BAR_PANEL_W / 2}" y="{oy + 40}" text-anchor="middle" font-size="11">{escape(subtitle)}</text>')
    out += plot_area(x0, y0, w, h, ticks, py, lambda t: f"{t:g}x")
    slot = w / len(groups)
    bar = slot * 0.8 / max(1, len(series))
    for i, group in enumerate(groups):
        gx = x0 + slot * i + slot * 0.1
        out.append(f'<text x="{x0 + slot * (i + 0.5):.1f}" y="{y0 + h + 16}" text-anchor="middle" font-size="11">{escape(group)}</text>')
        for k, (name, ys) in enumerate(series.items()):
            v = ys[i]
            if v is None:
                continue
            bx = gx + bar * k
            out.append(f'<rect x="{bx:.1f}" y="{py(v):.1f}" width="{bar - 2:.1f}" height="{y0 + h - py(v):.1f}" fill="{colors[name]}"/>')
            out.append(f'<text x="{bx + (bar - 2) / 2:.1f}" y="{py(v) - 3:.1f}" text-anchor="middle" font-size="9">{v:.2f}</text>')
    if reference is not None:
        y = py(reference)
        out.append(f'<line x1="{x0}" y1="{y:.1f}" x2="{x0 + w}" y2="{y:.1f}" stroke="#333" stroke-dasharray="5,4"/>')
    out.append(f'<text x="{x0 + w / 2}" y="{y0 + h + 34}" text-anchor="middle" font-size="11">protocol, clients</text>')
    out.append(f'<text transform="translate({ox + 16},{y0 + h / 2}) rotate(-90)" text-anchor="middle" font-size="11">tps / direct PostgreSQL\'s tps</text>')
    return out


def bar_chart(title, panels, footnote=""):
    """`panels`: list of (title, subtitle, groups, {series: values}, reference).

    One row of grouped-bar panels under a shared legend; returns an SVG document."""
    names = []
    for _, _, _, series, _ in panels:
        names += [n for n in series if n not in names]
    palette = list(COLORS.values()) + FALLBACK
    colors = {n: palette[k % len(palette)] for k, n in enumerate(names)}
    width = len(panels) * BAR_PANEL_W
    legend_rows = (len(names) + 1) // 2
    legend_h = 34 + 20 * legend_rows
    height = legend_h + BAR_PANEL_H + (22 if footnote else 0)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="DejaVu Sans, Arial, sans-serif" font-size="13">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{width / 2}" y="20" text-anchor="middle" font-size="15" font-weight="bold">{escape(title)}</text>']
    for k, name in enumerate(names):
        lx, ly = 20 + (k // legend_rows) * (width / 2), 30 + 20 * (k % legend_rows)
        out.append(f'<rect x="{lx}" y="{ly}" width="14" height="14" fill="{colors[name]}"/>')
        out.append(f'<text x="{lx + 20}" y="{ly + 12}">{escape(name)}</text>')
    for c, (ptitle, subtitle, groups, series, reference) in enumerate(panels):
        out += bar_panel(ptitle, subtitle, groups, series, colors, c * BAR_PANEL_W, legend_h, reference)
    if footnote:
        out.append(f'<text x="{width / 2}" y="{height - 8}" text-anchor="middle" font-size="11">{escape(footnote)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"
