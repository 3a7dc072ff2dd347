"""Tokens: creation, lookup, expiry, revocation, last use; shown once, stored as SHA-256 hashes."""

from __future__ import annotations

import hashlib
import logging
import re
import secrets
import time
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Engine, bindparam, or_, select, text, update
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from backend.auth.models import ApiToken
from backend.db import SQLITE_BUSY_TIMEOUT_MS
from backend.text import clean_tree, text_problem
from backend.timefmt import rfc3339

log = logging.getLogger(__name__)

SCOPES = ("ingest", "read", "admin")
TOKEN_PREFIX = "ett_"
# last_used_at is written at most this often per token, so a busy token costs no extra writes.
LAST_USED_RESOLUTION_S = 60.0
MAX_LIFETIME_S = 3650 * 86400.0
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@:+-]{0,127}$")
# An id as `revoke` reads one: ASCII digits only (str.isdigit also takes "¹" and "²").
_ID = re.compile(r"[0-9]{1,19}")


class TokenRefused(Exception):
    """A secret that does not open anything: unknown, revoked or expired; str() says which."""


class TokenNotFound(LookupError):
    """No token has that name or id."""


def hash_token(token: str) -> str:
    """The stored form of a token."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def check_name(name: str) -> str:
    """A token name as stored, or ValueError saying what a name may be."""
    name = (name or "").strip()
    if not _NAME.match(name):
        raise ValueError(
            f"token name {name[:40]!r} is not allowed: use 1 to 128 letters, digits and _.@:+- "
            "(starting with a letter or digit), e.g. trainer-fleet"
        )
    if name.isdigit():
        raise ValueError(f"token name {name!r} is only digits, which reads as an id; add a letter")
    return name


def create(
    *,
    db_session: Session,
    name: str,
    scope: str,
    models: Sequence[str] | None = None,
    expires_in_s: float | None = None,
    now: float | None = None,
) -> tuple[ApiToken, str]:
    """Create a token; returns the row and the secret, which is never stored."""
    name = check_name(name)
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {', '.join(SCOPES)}, not {scope!r}")
    if models is not None and not list(models):
        raise ValueError(
            "models: an empty list would let the token write no model; list the models it may "
            'write (e.g. ["ranker-v2"]), or leave models out for a token that writes any model'
        )
    clean_tree(list(models or []), "models")
    if expires_in_s is not None and not (0 < expires_in_s <= MAX_LIFETIME_S):
        raise ValueError("expires in must be a positive duration of at most 3650d, e.g. 30d or 12h")
    if db_session.scalar(select(ApiToken).where(ApiToken.name == name)) is not None:
        raise ValueError(f"a token named {name!r} exists already; pick another name")
    now = time.time() if now is None else now
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    row = ApiToken(
        name=name,
        token_hash=hash_token(secret),
        prefix=secret[:10],
        scope=scope,
        models=sorted(set(models)) if models else None,
        created_at=now,
        expires_at=None if expires_in_s is None else now + expires_in_s,
        revoked=False,
    )
    db_session.add(row)
    db_session.commit()
    return row, secret


def status(token: ApiToken, now: float | None = None) -> str:
    """active, revoked or expired."""
    if token.revoked:
        return "revoked"
    now = time.time() if now is None else now
    if token.expires_at is not None and token.expires_at <= now:
        return "expired"
    return "active"


def resolve(
    *, db_session: Session, secret: str, now: float | None = None, record_use: bool = True
) -> ApiToken:
    """The live token for a secret, or TokenRefused saying why not; records its use unless told
    not to (the caller then records it with `record_use`, in a bounded write of its own)."""
    row = db_session.scalar(select(ApiToken).where(ApiToken.token_hash == hash_token(secret)))
    row = _live(row, now)
    if record_use:
        touch(db_session=db_session, token=row, now=time.time() if now is None else now)
    return row


_BY_HASH = select(*ApiToken.__table__.c).where(ApiToken.token_hash == bindparam("token_hash"))


def resolve_detached(*, engine: Engine, secret: str, now: float | None = None) -> ApiToken:
    """`resolve` for a request on a server database: one statement outside any transaction.

    No session and no BEGIN/ROLLBACK: the lookup is one SELECT on a pooled connection in
    autocommit, and the token comes back detached (its use is recorded by `record_use`).
    The same refusals as `resolve`, read from the row as it is now, so a revoked or expired
    token is refused on its next request.
    """
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        found = conn.execute(_BY_HASH, {"token_hash": hash_token(secret)}).first()
    return _live(None if found is None else ApiToken(**found._asdict()), now)


def _live(row: ApiToken | None, now: float | None) -> ApiToken:
    if row is None:
        raise TokenRefused("unknown token")
    now = time.time() if now is None else now
    state = status(row, now)
    if state == "revoked":
        when = f" at {rfc3339(row.revoked_at)}" if row.revoked_at else ""
        raise TokenRefused(f"token {row.name!r} was revoked{when}; ask an admin for a new one")
    if state == "expired":
        raise TokenRefused(
            f"token {row.name!r} expired at {rfc3339(row.expires_at)}; "
            "create a new one with `ett token create`"
        )
    return row


def lookup(*, db_session: Session, secret: str, now: float | None = None) -> ApiToken | None:
    """The live token for a secret (not revoked, not expired), or None; records its use."""
    try:
        return resolve(db_session=db_session, secret=secret, now=now)
    except TokenRefused:
        return None


def touch(*, db_session: Session, token: ApiToken, now: float) -> None:
    """Move last_used_at to now if it is older than a minute, and commit (best effort).

    The session should be the caller's own for authentication (deps.authenticate opens one),
    so this commit takes nothing else with it.
    """
    if token.last_used_at is not None and now - token.last_used_at < LAST_USED_RESOLUTION_S:
        return
    try:
        # Conditional, so that replicas racing on one token write it once.
        db_session.execute(
            update(ApiToken)
            .where(
                ApiToken.id == token.id,
                or_(
                    ApiToken.last_used_at.is_(None),
                    ApiToken.last_used_at < now - LAST_USED_RESOLUTION_S,
                ),
            )
            .values(last_used_at=now)
            .execution_options(synchronize_session=False)
        )
        db_session.commit()
        token.last_used_at = now
    except SQLAlchemyError as err:  # a busy database must not refuse a valid token
        db_session.rollback()
        log.debug("could not record the use of token %s: %s", token.name, err)


# How long recording a token's use may wait for a lock: it is bookkeeping, never worth a
# request's time (a wait behind a writer was SQLite's 30 s busy timeout, or an unbounded row lock).
RECORD_USE_WAIT_MS = 200


def record_use(*, engine: Engine, token: ApiToken, now: float | None = None) -> None:
    """Move last_used_at to now if it is older than a minute, best effort and never slow.

    Its own connection; a lock it cannot get within RECORD_USE_WAIT_MS skips the write (the next
    minute's request writes it), and on Postgres the commit does not wait for the WAL flush.
    """
    now = time.time() if now is None else now
    if token.last_used_at is not None and now - token.last_used_at < LAST_USED_RESOLUTION_S:
        return
    with engine.connect() as conn:
        sqlite = conn.dialect.name == "sqlite"
        raw = conn.connection.driver_connection if sqlite else None
        try:
            if raw is not None:  # before BEGIN IMMEDIATE, which is where SQLite waits
                raw.execute(f"PRAGMA busy_timeout={RECORD_USE_WAIT_MS}")
            elif conn.dialect.name == "postgresql":
                conn.execute(text(f"SET LOCAL lock_timeout = '{RECORD_USE_WAIT_MS}ms'"))
                conn.execute(text("SET LOCAL synchronous_commit = off"))
            conn.execute(
                update(ApiToken)
                .where(
                    ApiToken.id == token.id,
                    or_(
                        ApiToken.last_used_at.is_(None),
                        ApiToken.last_used_at < now - LAST_USED_RESOLUTION_S,
                    ),
                )
                .values(last_used_at=now)
            )
            conn.commit()
            token.last_used_at = now
        except SQLAlchemyError as err:  # a busy database must not slow or refuse a valid token
            conn.rollback()
            log.debug("could not record the use of token %s: %s", token.name, err)
        finally:
            if raw is not None:
                raw.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")


def find(*, db_session: Session, ref: str) -> ApiToken:
    """The token with this name, or this id (digits); TokenNotFound otherwise."""
    ref = (ref or "").strip()
    if not ref or len(ref) > 128 or text_problem(ref):
        raise TokenNotFound(f"no token named {ref[:40]!r}")
    row = db_session.scalar(select(ApiToken).where(ApiToken.name == ref))
    if row is None and _ID.fullmatch(ref) and int(ref) < 2**63:
        row = db_session.get(ApiToken, int(ref))
    if row is None:
        raise TokenNotFound(f"no token named {ref[:40]!r}; `ett token list` shows names and ids")
    return row


def revoke(*, db_session: Session, ref: str, now: float | None = None) -> ApiToken:
    """Revoke a token by name or id; it stops working at once. Revoking twice is a no-op."""
    row = find(db_session=db_session, ref=ref)
    if not row.revoked:
        row.revoked = True
        row.revoked_at = time.time() if now is None else now
        db_session.commit()
    return row


def list_tokens(*, db_session: Session) -> list[ApiToken]:
    """Every token, by name."""
    return list(db_session.scalars(select(ApiToken).order_by(ApiToken.name)))


def token_doc(row: ApiToken, now: float | None = None) -> dict[str, Any]:
    """A token as the admin API and `ett token list --json` show it: never the secret."""
    return {
        "id": row.id,
        "name": row.name,
        "scope": row.scope,
        "models": row.models,
        "prefix": row.prefix,
        "created_at": rfc3339(row.created_at),
        "expires_at": rfc3339(row.expires_at),
        "last_used_at": rfc3339(row.last_used_at),
        "revoked_at": rfc3339(row.revoked_at),
        "status": status(row, now),
    }


def allows_scope(token: ApiToken, wanted: str) -> bool:
    """Admin tokens may do anything; others only their own scope."""
    return token.scope == "admin" or token.scope == wanted


def allows_model(token: ApiToken, model: str | None) -> bool:
    """Whether the token may write jobs of this model (None: unrestricted tokens only)."""
    if not token.models:
        return True
    return model is not None and model in token.models
