"""Line charts over time as SVG, drawn on the server by pygal (no script in the page)."""

from __future__ import annotations

import time

import pygal
from pygal.style import LightStyle


def line_chart(title: str, times: list[float], series: dict[str, list[float]]) -> str:
    """An SVG line chart of ``series`` (name -> values) at ``times`` (epoch seconds, shown
    as UTC times of day, as every time the console shows is in UTC)."""
    chart = pygal.Line(
        title=f"{title}, UTC",
        width=720,
        height=260,
        style=LightStyle,
        show_dots=False,
        x_label_rotation=0,
        show_minor_x_labels=False,
        js=[],  # no script fetched from elsewhere: the chart is plain SVG
        disable_xml_declaration=True,
        no_data_text="no samples yet",
        explicit_size=True,
        truncate_label=-1,  # whole times of day under the axis
    )
    chart.x_labels = [time.strftime("%H:%M:%S", time.gmtime(t)) for t in times]
    chart.x_labels_major_every = max(1, len(times) // 6)
    for name, values in series.items():
        chart.add(name, values)
    return chart.render(is_unicode=True)
