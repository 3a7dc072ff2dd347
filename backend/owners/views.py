"""Owner mapping REST: read it (JSON or CSV), replace it or reset it to the file (admin)."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Body, HTTPException, Query
from pydantic import ValidationError

from backend.auth.deps import AdminAccess, ReadAccess
from backend.deps import SessionDep, SettingsDep
from backend.owners import service
from backend.owners.schemas import OwnersAnswer
from backend.params import csv_response, with_rfc3339

router = APIRouter(prefix="/owners", tags=["owners"])

EXAMPLE = {
    "components": {"scheduling": {"system": "scheduler", "owner": "scheduler"}},
    "phases": {"custom.eval": {"component": "trainer_init", "owner": "eval-team"}},
}


@router.get(
    "",
    summary="The phase -> component -> system -> owner mapping in force",
    response_model=OwnersAnswer,
    response_model_exclude_none=False,
    responses={200: {"content": {"text/csv": {}}, "description": "JSON, or CSV with format=csv"}},
)
def get_owners(
    _auth: ReadAccess,
    db_session: SessionDep,
    settings: SettingsDep,
    format: Literal["json", "csv"] = Query("json"),
) -> Any:
    """`{"source": "api"|"file"|"default", "version", "components", "phases", "rows"}`."""
    answer = service.describe(db_session=db_session, settings=settings)
    if format == "csv":
        return csv_response(answer["rows"], ["phase", "component", "system", "owner"], "owners.csv")
    return with_rfc3339(answer)


@router.put(
    "",
    summary="Replace the mapping (admin); jobs a moved custom phase changes are re-accounted",
    response_model=OwnersAnswer,
)
def put_owners(
    token: AdminAccess,
    db_session: SessionDep,
    settings: SettingsDep,
    document: dict[str, Any] = Body(..., examples=[EXAMPLE]),
) -> Any:
    """Validate and store a new version; answers the mapping now in force.

    Owners and systems apply to every read at once. A custom phase moved to another component
    changes the jobs' accounting: those jobs are marked for recompute (`jobs_marked`).
    """
    try:
        service.put_mapping(db_session=db_session, document=document, actor=token.name)
    except ValidationError as err:
        detail = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'mapping'}: {e['msg']}" for e in err.errors()
        )
        raise HTTPException(422, detail) from err
    marked = service.mark_for_reaccount(db_session=db_session, settings=settings)
    db_session.commit()
    answer = service.describe(db_session=db_session, settings=settings)
    return with_rfc3339({**answer, "jobs_marked": marked})


@router.delete(
    "",
    summary="Forget the API versions: the owners file (or defaults) is in force",
    response_model=OwnersAnswer,
)
def reset_owners(_token: AdminAccess, db_session: SessionDep, settings: SettingsDep) -> Any:
    """Drop every stored version; answers the mapping now in force and `jobs_marked`."""
    service.reset_mapping(db_session=db_session)
    marked = service.mark_for_reaccount(db_session=db_session, settings=settings)
    db_session.commit()
    answer = service.describe(db_session=db_session, settings=settings)
    return with_rfc3339({**answer, "jobs_marked": marked})
