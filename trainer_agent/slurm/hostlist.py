"""SLURM host lists: `SLURM_JOB_NODELIST` (`gpu[01-03,07],rack2-n[1-2]`) as host names.

`hostnames` asks `scontrol show hostnames` (SLURM's own expander) and falls back to `expand`,
the same grammar in pure Python: items separated by commas outside brackets; each bracket
holds comma-separated numbers and ranges `lo-hi`, zero-padded to the width of `lo` as written;
several brackets in one item multiply out. The result is cut at MAX_EXPANDED names, so a
malformed `[1-999999999]` cannot exhaust memory (the attempt_started bound is events.MAX_HOSTS).
"""

from __future__ import annotations

import logging
import re
import subprocess

log = logging.getLogger("trainer_agent")

# More than any cluster allocates to one job; attempt_started keeps the first MAX_HOSTS sorted.
MAX_EXPANDED = 100_000
_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


class HostlistError(ValueError):
    """A host list that is not SLURM's syntax."""


def _split_top(text: str) -> list[str]:
    items, depth, cur = [], 0, []
    for ch in text:
        if ch == "[":
            depth += 1
            if depth > 1:
                raise HostlistError(f"nested '[' in host list {text!r}")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise HostlistError(f"unbalanced ']' in host list {text!r}")
        if ch == "," and depth == 0:
            items.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth != 0:
        raise HostlistError(f"unbalanced '[' in host list {text!r}")
    items.append("".join(cur))
    return [i.strip() for i in items if i.strip()]


def _bracket(body: str, text: str) -> list[str]:
    out: list[str] = []
    for part in body.split(","):
        m = _RANGE.match(part.strip())
        if m is None:
            raise HostlistError(f"{part!r} in host list {text!r} is not a number or lo-hi range")
        lo_s, hi_s = m.group(1), m.group(2)
        lo, hi = int(lo_s), int(hi_s if hi_s is not None else lo_s)
        if hi < lo:
            raise HostlistError(f"range {part!r} in host list {text!r} runs backwards")
        if hi - lo >= MAX_EXPANDED:
            raise HostlistError(f"range {part!r} in host list {text!r} names over {MAX_EXPANDED}")
        width = len(lo_s)
        out.extend(str(n).zfill(width) for n in range(lo, hi + 1))
    return out


def _item(item: str, text: str, limit: int) -> list[str]:
    names = [""]
    pos = 0
    for m in re.finditer(r"\[([^\]]*)\]", item):
        prefix = item[pos : m.start()]
        choices = _bracket(m.group(1), text)
        names = [n + prefix + c for n in names for c in choices][:limit]
        pos = m.end()
    return [n + item[pos:] for n in names]


def expand(nodelist: str) -> list[str]:
    """The host names of a SLURM host list, in its order, without repeats (at most MAX_EXPANDED)."""
    seen: dict[str, None] = {}
    for item in _split_top(nodelist.strip()):
        for name in _item(item, nodelist, MAX_EXPANDED - len(seen)):
            seen.setdefault(name, None)
            if len(seen) >= MAX_EXPANDED:
                return list(seen)
    return list(seen)


def hostnames(nodelist: str, scontrol: str = "scontrol", timeout_s: float = 10.0) -> list[str]:
    """The host names of `nodelist`: `scontrol show hostnames` where it answers, else `expand`.

    A list neither can read gives [] (and a logged error): the attempt is reported without hosts.
    """
    text = (nodelist or "").strip()
    if not text:
        return []
    try:
        out = subprocess.run(
            [scontrol, "show", "hostnames", text],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
        if out.returncode == 0 and out.stdout.strip():
            return list(dict.fromkeys(out.stdout.split()))[:MAX_EXPANDED]
    except (OSError, subprocess.TimeoutExpired) as err:
        log.info("ett-slurm: scontrol show hostnames unavailable (%s); expanding it here", err)
    try:
        return expand(text)
    except HostlistError as err:
        log.error("ett-slurm: cannot read the host list: %s", err)
        return []
