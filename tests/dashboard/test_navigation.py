"""The navigation is the page registry: every module of dashboard/pages, in its `order`."""

from __future__ import annotations

import json
import os
import pkgutil
import shutil
import subprocess
import sys
from pathlib import Path

import dash

import dashboard
import dashboard.pages
from dashboard.app import get_dash_app, nav

ROOT = Path(__file__).resolve().parents[2]


def test_every_page_module_is_in_the_navigation_in_its_order() -> None:
    get_dash_app()
    modules = {m.name for m in pkgutil.iter_modules(dashboard.pages.__path__)}
    links = nav()
    assert {link.key for link in links} == modules and len(modules) >= 6
    orders = [dash.page_registry[f"dashboard.pages.{link.key}"]["order"] for link in links]
    assert all(isinstance(o, int) for o in orders), "each page gives its place: order="
    assert orders == sorted(orders) and len(set(orders)) == len(orders)
    assert links[0].href == "/" or orders[0] < 0  # the fleet page is home, unless one comes first
    for link in links:
        page = dash.page_registry[f"dashboard.pages.{link.key}"]
        assert (link.label, link.href) == (page["name"], page["path"])


PROBE = '''
"""A page written to the recipe of docs/ARCHITECTURE.md, and nothing else."""

import dash
from dash import html


def layout(**_query):
    return html.Div("probe", id="probe-page")


dash.register_page(__name__, path="/probe", name="Probe", order={order}, layout=layout)
'''

SHOW_NAV = """
import json
from dashboard.app import get_dash_app, nav

app = get_dash_app()
client = app.server.test_client()
print(json.dumps({
    "nav": [list(link) for link in nav()],
    "layout": client.get("/_dash-layout").get_data(as_text=True),
}))
"""


def test_a_new_page_module_is_served_and_linked_without_touching_the_app(tmp_path) -> None:
    """A module dropped into dashboard/pages appears in the navigation at its order."""
    copy = tmp_path / "dashboard"
    shutil.copytree(
        Path(dashboard.__file__).parent,
        copy,
        ignore=shutil.ignore_patterns("__pycache__", "vendor"),
    )
    (copy / "pages" / "probe.py").write_text(PROBE.format(order=-5))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    out = subprocess.run(
        [sys.executable, "-c", SHOW_NAV],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    shown = json.loads(out.stdout.strip().splitlines()[-1])
    assert shown["nav"][0] == ["probe", "Probe", "/probe"]  # order -5: before the fleet page
    assert [key for key, _, _ in shown["nav"][1:]] == [link.key for link in nav()]
    assert '"id": "shell-nav-probe"' in shown["layout"].replace('":"', '": "')
