"""Draw the pictures of docs/control-flow.md's checkpointing section as SVG (no plotting
library needed):

    python docs/scripts/checkpoint_figures.py

- docs/img/revolve_schedule.svg: the actions of ``checkpoint=("binomial", 3)`` reversing 10
  steps, from :func:`symgrad.ops.checkpoint._sg_reverse_plan` itself (one row per advance or
  reversed step, time going down; stored carries as dots);
- docs/img/checkpoint_policies.svg: W6m's peak memory against gradient time per policy, both
  as ratios to storing every step, from docs/data/w6m.json (the numbers of
  ``benchmarks/cpu.py --only W6m``).

Text is 13 px high at the pictures' natural size (check_layout.py wants 11 px or more).
"""
from __future__ import annotations

import json
import math
from pathlib import Path

from symgrad.ops.checkpoint import ADVANCE, REVERSE, STORE, _sg_reverse_plan

ROOT = Path(__file__).resolve().parents[2]
IMG = ROOT / "docs" / "img"
FONT = 'font-family="sans-serif" font-size="13"'


def _svg(width, height, body) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}">\n<rect width="{width}" height="{height}" '
            f'fill="white"/>\n<defs><marker id="head" viewBox="0 0 10 10" refX="9" refY="5" '
            f'markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path '
            f'd="M0,0 L10,5 L0,10 z" fill="context-stroke"/></marker></defs>\n'
            + "\n".join(body) + "\n</svg>\n")


def schedule_figure(steps=10, slots=3) -> str:
    left, step_width, top, row = 150, 52, 46, 17
    x = lambda t: left + t * step_width   # noqa: E731  (the carry before step t)
    body = [f'<text x="20" y="18" {FONT}>checkpoint=("binomial", {slots}) reversing {steps} '
            f'steps: carry before step t (t = 0 … {steps}) across, time going down</text>']
    for t in range(steps + 1):
        body.append(f'<text x="{x(t)}" y="36" {FONT} text-anchor="middle">{t}</text>')
    y, position, rows = top, 0, []
    for action, a, b in _sg_reverse_plan(steps, "binomial", slots):
        if action == ADVANCE:
            y += row
            rows.append(f'<line x1="{x(a)}" y1="{y}" x2="{x(b) - 4}" y2="{y}" stroke="#333" '
                        f'stroke-width="2" marker-end="url(#head)"/>')
            position = b
        elif action == STORE:
            rows.append(f'<circle cx="{x(b)}" cy="{max(y, top)}" r="5" fill="#1f6fb4"/>'
                        f'<text x="{x(b) + 7}" y="{max(y, top) - 5}" {FONT} '
                        f'fill="#1f6fb4">{a}</text>')
        elif action == REVERSE:
            y += row
            rows.append(f'<line x1="{x(a + 1)}" y1="{y}" x2="{x(a) + 4}" y2="{y}" '
                        f'stroke="#c0392b" stroke-width="3" marker-end="url(#head)"/>')
            position = a
    del position
    body += rows
    y += row + 12
    legend = [("#333", "advance (forward steps, nothing stored)", 2),
              ("#c0392b", "reverse one step (its forward recomputed, then its backward)", 3)]
    for index, (color, text, width) in enumerate(legend):
        ly = y + index * 20
        body.append(f'<line x1="20" y1="{ly}" x2="60" y2="{ly}" stroke="{color}" '
                    f'stroke-width="{width}"/><text x="70" y="{ly + 4}" {FONT}>{text}</text>')
    ly = y + 2 * 20
    body.append(f'<circle cx="40" cy="{ly}" r="5" fill="#1f6fb4"/><text x="70" y="{ly + 4}" '
                f'{FONT}>carry stored in slot n (at most {slots} at once)</text>')
    return _svg(left + steps * step_width + 40, ly + 20, body)


def policies_figure(data) -> str:
    """Peak memory (log scale) against gradient time, both relative to store-all."""
    width, height = 760, 430
    left, right, top, bottom = 90, 230, 30, 360
    points = data["points"]
    max_time = max(4.5, max(p["time"] for p in points) * 1.1)
    low = min(p["memory"] for p in points) / 2
    x = lambda v: left + (v - 0.5) / (max_time - 0.5) * (width - left - right)   # noqa: E731
    y = lambda v: top + (0 - math.log10(v)) / (0 - math.log10(low)) * (bottom - top) \
        if v < 1 else top   # noqa: E731
    body = [f'<text x="{left}" y="18" {FONT}>{data["title"]}</text>',
            f'<line x1="{left}" y1="{bottom}" x2="{width - right}" y2="{bottom}" stroke="#333"/>',
            f'<line x1="{left}" y1="{top}" x2="{left}" y2="{bottom}" stroke="#333"/>',
            f'<text x="{(left + width - right) / 2}" y="{bottom + 38}" {FONT} '
            f'text-anchor="middle">gradient time / store-all time</text>',
            f'<text x="20" y="{(top + bottom) / 2}" {FONT} transform="rotate(-90 20 '
            f'{(top + bottom) / 2})" text-anchor="middle">peak memory / store-all</text>']
    tick = 1.0
    while tick <= max_time:
        body.append(f'<line x1="{x(tick)}" y1="{bottom}" x2="{x(tick)}" y2="{bottom + 5}" '
                    f'stroke="#333"/><text x="{x(tick)}" y="{bottom + 20}" {FONT} '
                    f'text-anchor="middle">{tick:g}x</text>')
        tick += 0.5 if max_time < 6 else 1.0
    power = 0
    while 10.0 ** -power >= low:
        value = 10.0 ** -power
        label = "1" if power == 0 else f"1/{10 ** power:,}"
        body.append(f'<line x1="{left - 5}" y1="{y(value)}" x2="{width - right}" '
                    f'y2="{y(value)}" stroke="#ddd"/><text x="{left - 8}" y="{y(value) + 4}" '
                    f'{FONT} text-anchor="end">{label}</text>')
        power += 1
    for target in data.get("targets", ()):
        tx, ty = x(target["time"]), y(target["memory"])
        body.append(f'<rect x="{x(0.5)}" y="{ty}" width="{tx - x(0.5)}" height="{bottom - ty}" '
                    f'fill="{target["color"]}" fill-opacity="0.08" stroke="{target["color"]}" '
                    f'stroke-dasharray="4 3"/>')
    for point in points:
        px, py = x(point["time"]), y(point["memory"])
        body.append(f'<circle cx="{px}" cy="{py}" r="5" fill="{point["color"]}"/>'
                    f'<text x="{px + 8}" y="{py + 4 + point.get("dy", 0)}" {FONT}>'
                    f'{point["label"]}</text>')
    for index, target in enumerate(data.get("targets", ())):
        ly = top + 10 + index * 20
        body.append(f'<rect x="{width - right + 20}" y="{ly - 9}" width="14" height="12" '
                    f'fill="{target["color"]}" fill-opacity="0.15" stroke="{target["color"]}" '
                    f'stroke-dasharray="4 3"/><text x="{width - right + 40}" y="{ly + 2}" '
                    f'{FONT}>{target["label"]}</text>')
    return _svg(width, height, body)


def main() -> None:
    IMG.mkdir(exist_ok=True)
    (IMG / "revolve_schedule.svg").write_text(schedule_figure())
    print("wrote", IMG / "revolve_schedule.svg")
    data = json.loads((ROOT / "docs" / "data" / "w6m.json").read_text())
    (IMG / "checkpoint_policies.svg").write_text(policies_figure(data))
    print("wrote", IMG / "checkpoint_policies.svg")


if __name__ == "__main__":
    main()
