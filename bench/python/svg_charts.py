"""Line charts as SVG text, in plain Python, for the bench scripts (the hosts have no matplotlib).

A chart is axes from 0 (or the lowest value, where it is negative) to the data's maxima, with lines,
dots (single measurements), dashed horizontal targets and labelled markers (a published figure, with
its spread as an error bar). Charts are placed on a page by their top-left corner; `page` wraps them
with a legend line on top. Text is XML-escaped, so any label may be passed.
"""
import math
from xml.sax.saxutils import escape


def line(color, points, width=1.5, opacity=0.8, kind="line"):
    """A polyline through [(x, y)]; kind becomes its class, so that a reader of the SVG can tell lines apart."""
    return {"color": color, "points": list(points), "width": width, "opacity": opacity, "kind": kind}


def dot(x, y, color, kind="dot"):
    return {"x": x, "y": y, "color": color, "kind": kind}


def marker(x, y, label, color="black", spread=None):
    """A labelled point drawn as a diamond; spread: the +- drawn as a vertical bar."""
    return {"x": x, "y": y, "label": label, "color": color, "spread": spread}


def _extent(lines, dots, targets, markers):
    xs = [x for ln in lines for x, _ in ln["points"]] + [d["x"] for d in dots] + [m["x"] for m in markers]
    ys = ([y for ln in lines for _, y in ln["points"]] + [d["y"] for d in dots] + list(targets)
          + [m["y"] + s for m in markers for s in (m["spread"] or 0, -(m["spread"] or 0))])
    xmax = max(xs, default=1) or 1
    ymin, ymax = min(0.0, min(ys, default=0)), max(ys, default=1) or 1
    return xmax, ymin, (ymax if ymax > ymin else ymin + 1)


def ticks(lo, hi):
    """Round values from lo to hi, three to seven of them (multiples of 1, 2, 2.5 or 5 times a power of
    ten), and the decimal places that show them."""
    span = hi - lo
    power = math.floor(math.log10(span / 4))
    m = next(m for m in (1, 2, 2.5, 5, 10) if span / (10 ** power * m) <= 6)
    step = 10 ** power * m
    first = math.ceil(lo / step) * step
    places = max(0, -power + (1 if m == 2.5 else 0) - (1 if m == 10 else 0))
    return [round(first + i * step, places) for i in range(int((hi - first) / step + 1e-9) + 1)], places


def chart(x0, y0, w, h, title, xlabel, lines=(), dots=(), targets=(), markers=(), note=""):
    """One chart's SVG elements in the box (x0, y0, w, h); note: a small gray line under the title."""
    xmax, ymin, ymax = _extent(lines, dots, targets, markers)
    sx = lambda x: x0 + 55 + (w - 90) * x / xmax
    sy = lambda y: y0 + h - 30 - (h - 75) * (y - ymin) / (ymax - ymin)
    parts = [f'<text x="{x0 + w / 2}" y="{y0 + 14}" text-anchor="middle" font-size="13">{escape(title)}</text>',
             f'<line x1="{sx(0)}" y1="{sy(ymin)}" x2="{sx(xmax)}" y2="{sy(ymin)}" stroke="black"/>',
             f'<line x1="{sx(0)}" y1="{sy(ymin)}" x2="{sx(0)}" y2="{sy(ymax)}" stroke="black"/>',
             f'<text x="{x0 + w / 2}" y="{y0 + h - 4}" text-anchor="middle" font-size="11">{escape(xlabel)}</text>']
    if note:
        parts.append(f'<text x="{x0 + w / 2}" y="{y0 + 28}" text-anchor="middle" font-size="10" fill="gray">'
                     f'{escape(note)}</text>')
    xs, xplaces = ticks(0, xmax)
    parts += [f'<text x="{sx(v)}" y="{sy(ymin) + 13}" text-anchor="middle" font-size="10">{v:,.{xplaces}f}</text>'
              for v in xs]
    ys, yplaces = ticks(ymin, ymax)
    parts += [f'<text x="{sx(0) - 4}" y="{sy(v) + 3}" text-anchor="end" font-size="10">{v:,.{yplaces}f}</text>'
              for v in ys]
    for ln in lines:
        parts.append(f'<polyline class="{escape(ln["kind"])}" fill="none" stroke="{ln["color"]}" '
                     f'stroke-width="{ln["width"]}" stroke-opacity="{ln["opacity"]}" points="'
                     + " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in ln["points"]) + '"/>')
    parts += [f'<circle class="{escape(d["kind"])}" cx="{sx(d["x"]):.1f}" cy="{sy(d["y"]):.1f}" r="3" '
              f'fill="{d["color"]}" stroke="black" stroke-width="0.5"/>' for d in dots]
    parts += [f'<line x1="{sx(0)}" y1="{sy(t):.1f}" x2="{sx(xmax)}" y2="{sy(t):.1f}" stroke="gray" '
              'stroke-dasharray="4,3"/>' for t in targets]
    for m in markers:
        x, y = sx(m["x"]), sy(m["y"])
        if m["spread"]:
            parts.append(f'<line x1="{x:.1f}" y1="{sy(m["y"] - m["spread"]):.1f}" x2="{x:.1f}" '
                         f'y2="{sy(m["y"] + m["spread"]):.1f}" stroke="{m["color"]}"/>')
        parts.append(f'<path class="marker" d="M{x:.1f},{y - 6:.1f} L{x + 6:.1f},{y:.1f} L{x:.1f},{y + 6:.1f} '
                     f'L{x - 6:.1f},{y:.1f} Z" fill="white" stroke="{m["color"]}" stroke-width="1.5"/>')
        anchor = "end" if x > x0 + w / 2 else "start"
        parts.append(f'<text x="{x + (-8 if anchor == "end" else 8):.1f}" y="{y - 6:.1f}" text-anchor="{anchor}" '
                     f'font-size="10" fill="{m["color"]}">{escape(m["label"])}</text>')
    return "\n".join(parts)


def page(width, height, legend, charts):
    """An SVG document: a white page, the legend [(color, text)] along the top, then the charts."""
    items, x = [], 10
    for color, text in legend:
        items.append(f'<text x="{x}" y="18" font-size="12" fill="{color}">{escape(text)}</text>')
        x += round(6.5 * len(text)) + 24  # about a 12-px sans-serif character
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif">'
            '<rect width="100%" height="100%" fill="white"/>' + "".join(items) + "\n"
            + "\n".join(charts) + "\n</svg>\n")


def write(path, svg_text):
    with open(path, "w", encoding="utf-8") as f:
        f.write(svg_text)
