"""How long a job may be silent and still be taken for alive (docs/ACCOUNTING.md).

The one source of the defaults of ETT_HEARTBEAT_TIMEOUT_S and ETT_ABANDON_TIMEOUT_S
(backend/config.py) and of the engine's arguments (backend/ett/timeline.py, engine.py). A
bottom module: the settings and the pure engine both read it. The agent ships alone, so it
keeps its own copy of the heartbeat timeout (trainer_agent/events.py) and beats well inside
it; tests/trainer_agent/test_agent_constants.py checks the two agree.
"""

from __future__ import annotations

# A running attempt silent this long (no event at all) is taken for dead at its last event.
HEARTBEAT_TIMEOUT_S = 300.0
# An open job silent this long ends at its last event, flagged abandoned.
ABANDON_TIMEOUT_S = 3600.0
