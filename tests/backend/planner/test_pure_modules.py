"""The planner's model, fit, what-ifs and back-test stay pure: no database, web or UI imports."""

from __future__ import annotations

import subprocess
import sys

PURE = (
    "backend.planner.model",
    "backend.planner.fit",
    "backend.planner.whatif",
    "backend.demo.backtest",
)
FORBIDDEN = ("sqlalchemy", "fastapi", "starlette", "dash", "flask", "pydantic", "httpx")


def test_pure_modules_import_no_db_or_web_library():
    code = (
        "import sys\n"
        + "".join(f"import {m}\n" for m in PURE)
        + f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({FORBIDDEN!r})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", out.stdout
