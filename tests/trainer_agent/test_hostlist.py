"""SLURM host lists expanded (trainer_agent/slurm/hostlist.py) and the attempt_started bound.

The pure expander is checked against hand-expanded lists here, and against a real SLURM's
`scontrol show hostnames` in tests/trainer_agent/test_slurm.py.
"""

from __future__ import annotations

import pytest

from trainer_agent import events as ev
from trainer_agent.slurm import convert, hostlist

CASES = [
    ("node1", ["node1"]),
    ("gpu[01-03,07]", ["gpu01", "gpu02", "gpu03", "gpu07"]),
    ("a1,b[2-3],c", ["a1", "b2", "b3", "c"]),
    ("rack[1-2]-n[1-2]", ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]),
    ("n[8-11]", ["n8", "n9", "n10", "n11"]),
    ("n[098-101]", ["n098", "n099", "n100", "n101"]),
    ("x[1,1,2],x1", ["x1", "x2"]),
    ("", []),
]


@pytest.mark.parametrize(("text", "want"), CASES)
def test_expand_gives_slurms_names(text: str, want: list[str]) -> None:
    assert hostlist.expand(text) == want


@pytest.mark.parametrize("bad", ["n[1-2", "n1-2]", "n[a-b]", "n[3-1]", "n[[1]]"])
def test_expand_refuses_what_is_not_a_host_list(bad: str) -> None:
    with pytest.raises(hostlist.HostlistError):
        hostlist.expand(bad)


def test_hostnames_falls_back_when_scontrol_is_missing() -> None:
    assert hostlist.hostnames("gpu[1-2]", scontrol="/nonexistent/scontrol") == ["gpu1", "gpu2"]
    assert hostlist.hostnames("gpu[2-1]", scontrol="/nonexistent/scontrol") == []


def test_a_huge_range_is_cut_not_exhausting_memory() -> None:
    with pytest.raises(hostlist.HostlistError, match="over"):
        hostlist.expand("n[0-999999999]")
    names = hostlist.expand("a[0-60000],b[0-60000]")
    assert len(names) == hostlist.MAX_EXPANDED and names[-1] == "b39998"


def test_started_event_carries_every_host_up_to_the_bound() -> None:
    event = convert.started_event("j", 0, 1.0e9, 8, "gpu2", ["gpu2", "gpu1", "gpu1"])
    assert event["hosts"] == ["gpu1", "gpu2"] and "hosts_total" not in event
    many = [f"n{i:05d}" for i in range(ev.MAX_HOSTS + 5)]
    event = convert.started_event("j", 0, 1.0e9, 8, many[0], many[::-1])
    assert event["hosts"] == many[: ev.MAX_HOSTS]
    assert event["hosts_total"] == ev.MAX_HOSTS + 5
    assert "hosts" not in convert.started_event("j", 0, 1.0e9, 8, "", [])
