"""Imports every domain's tables so Base.metadata is complete (Alembic and the drift test)."""

from backend.alerts import history as alerts_history  # noqa: F401
from backend.alerts import models as alerts_models  # noqa: F401
from backend.annotations import models as annotations_models  # noqa: F401
from backend.auth import models as auth_models  # noqa: F401
from backend.db import Base
from backend.ett import models as ett_models  # noqa: F401
from backend.events import models as events_models  # noqa: F401
from backend.fleet import models as fleet_models  # noqa: F401
from backend.jobs import models as jobs_models  # noqa: F401
from backend.live import models as live_models  # noqa: F401
from backend.owners import models as owners_models  # noqa: F401

metadata = Base.metadata
