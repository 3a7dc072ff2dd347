"""Every chart and table as CSV: what the browser shows, written out row by row.

The browser sends what it draws (a chart's figure, a table's rows after its sort and filter);
these functions turn it into CSV text. A chart gives one row per point: its series, x, y (and
z, base and the point's key when it has them); a table its columns, headers as shown, a link
cell as its text.
"""

from __future__ import annotations

import base64
import csv
import io
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

_LINK = re.compile(r"^\[((?:\\.|[^\]\\])*)\]\((.*)\)$", re.DOTALL)


def values(spec: Any) -> list[Any]:
    """A figure's array as a list: plain, plotly's base64 typed array, or a typed array's JSON."""
    if spec is None:
        return []
    if isinstance(spec, dict):
        if "bdata" in spec:
            raw = np.frombuffer(base64.b64decode(spec["bdata"]), dtype=np.dtype(spec["dtype"]))
            shape = spec.get("shape")
            if shape:
                dims = [int(d) for d in str(shape).split(",")] if isinstance(shape, str) else shape
                raw = raw.reshape(dims)
            return raw.tolist()
        if all(k.isdigit() for k in spec):  # a Float64Array through JSON.stringify
            return [spec[str(i)] for i in range(len(spec))]
        return [spec]
    if isinstance(spec, list | tuple):
        return list(spec)
    return [spec]


def cell_text(value: Any) -> Any:
    """A table cell as CSV writes it: a markdown link as its text, None as empty."""
    if value is None:
        return ""
    if isinstance(value, str):
        hit = _LINK.match(value.strip())
        if hit:
            return re.sub(r"\\(.)", r"\1", hit.group(1))
    if isinstance(value, list | tuple):
        return "; ".join(str(cell_text(v)) for v in value)
    return value


def _write(header: Sequence[str], rows: list[list[Any]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return out.getvalue()


def _key(point: Any) -> Any:
    if isinstance(point, list | tuple):
        return "; ".join(str(cell_text(v)) for v in point)
    return cell_text(point)


def figure_csv(figure: dict[str, Any]) -> str:
    """One row per drawn point: series, x, y, and z, base or key where a trace has them."""
    rows: list[dict[str, Any]] = []
    for i, trace in enumerate(figure.get("data") or []):
        name = trace.get("name") or trace.get("legendgroup") or f"trace {i + 1}"
        xs, ys, zs = values(trace.get("x")), values(trace.get("y")), values(trace.get("z"))
        if zs and isinstance(zs[0], list):  # a heatmap: a row per cell
            for yi, row in enumerate(zs):
                for xi, z in enumerate(row):
                    x = xs[xi] if xi < len(xs) else xi
                    y = ys[yi] if yi < len(ys) else yi
                    rows.append({"series": name, "x": x, "y": y, "z": z})
            continue
        bases, keys = values(trace.get("base")), values(trace.get("customdata"))
        for j in range(max(len(xs), len(ys))):
            point = {
                "series": name,
                "x": xs[j] if j < len(xs) else None,
                "y": ys[j] if j < len(ys) else None,
            }
            if bases:
                point["base"] = bases[j] if j < len(bases) else bases[0]
            if keys and j < len(keys):
                point["key"] = _key(keys[j])
            rows.append(point)
    header = ["series", "x", "y"] + [k for k in ("z", "base", "key") if any(k in r for r in rows)]
    return _write(header, [[cell_text(r.get(k)) for k in header] for r in rows])


def _header(name: Any) -> str:
    return " ".join(str(n) for n in name) if isinstance(name, list | tuple) else str(name)


def table_csv(rows: list[dict[str, Any]], columns: list[dict[str, Any]]) -> str:
    """The table's columns as headed on the page, one line per row."""
    header = [_header(c.get("name", c["id"])) for c in columns]
    body = [[cell_text(r.get(c["id"])) for c in columns] for r in rows]
    return _write(header, body)


def filename(target: str) -> str:
    """The download's file name: the chart's or table's id, as a CSV."""
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "-", target).strip("-") or "data"
    return f"{stem.removesuffix('-graph').removesuffix('-table')}.csv"
