"""The team's plan library in a SQL database: saved plans outlive a session, a replica and a restart.

Where (:func:`database_url`): ``FINETUNE_FIT_PLANS_URL`` (an SQLAlchemy URL, e.g.
``postgresql+psycopg://fit@db.internal/finetune_fit``), else ``.streamlit/secrets.toml`` ``[connections.plans]``
(``url = ...`` or Streamlit's dialect/host/... keys), else an embedded SQLite file, ``FINETUNE_FIT_PLANS_PATH`` or
``.streamlit/plans.sqlite``. The Streamlit side goes through ``st.connection("plans", type="sql")`` (SQLAlchemy);
:class:`PlanStore` itself takes any SQLAlchemy ``Engine``, so the benchmarks and tests use it without a session.

What a row holds: the plan's inputs (:class:`engine.plan.plans.Plan` as JSON: its results are recomputed on read,
like a CSV import, so a plan is never trusted for its numbers), who saved it (``st.user`` where the deployment turns
login on, else ``anonymous``), when it was created and last changed, a version counter, and the model's config when
the plan's model was an upload (a catalog or Hub model is found again by its repo id).

Never overwritten by accident, from any replica: names are UNIQUE in the database, so of two sessions saving one
name at once exactly one succeeds and the other gets :class:`PlanExists`; replacing, renaming and deleting name the
version the user saw (optimistic concurrency: ``UPDATE ... WHERE version = :seen``), and a plan changed meanwhile
by someone else raises :class:`PlanChanged` instead. The schema is created and migrated by the app (table
``finetune_fit_schema`` holds its version; :data:`MIGRATIONS`), under a lock, so replicas starting together migrate once.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import sqlalchemy as sa
import streamlit as st
from sqlalchemy.engine import Connection, Engine

from engine.plan.plan_names import same_name
from engine.plan.plans import Plan, unique_plan_name

URL_ENV = "FINETUNE_FIT_PLANS_URL"
PATH_ENV = "FINETUNE_FIT_PLANS_PATH"
DEFAULT_SQLITE_PATH = Path(".streamlit") / "plans.sqlite"
ANONYMOUS = "anonymous"
SCHEMA_TABLE = "finetune_fit_schema"
_MIGRATION_LOCK = 7_262_026  # pg_advisory_xact_lock key: any fixed number no other app on the database uses


class PlanStoreError(Exception):
    """The library could not do what was asked; the message says why in words a visitor can act on."""


def unavailable(exc: Exception) -> PlanStoreError:
    """A database failure (down, refused, timed out) as a :class:`PlanStoreError` naming its kind only: driver messages
    may quote the host, user or URL."""
    return PlanStoreError(f"the plans database cannot be reached ({type(exc).__name__}); check [connections.plans] in "
                          f"secrets.toml or {URL_ENV}")


class PlanExists(PlanStoreError):
    """A plan of that name is already saved (replacing it is an explicit, separate action)."""


class PlanChanged(PlanStoreError):
    """The plan was replaced, renamed or deleted by someone else since this session read it."""


@dataclass(frozen=True)
class StoredPlan:
    """One row of the library. ``version`` starts at 1 and grows with each replace or rename; times are UTC ISO 8601."""

    id: int
    plan: Plan
    author: str
    created_at: str
    updated_at: str
    version: int
    config: dict[str, Any] | None


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _v1(conn: Connection) -> None:
    """The plans table: one row per name."""
    conn.execute(sa.text(
        "CREATE TABLE plans (id INTEGER PRIMARY KEY, name VARCHAR(200) NOT NULL UNIQUE, author VARCHAR(200) NOT NULL, "
        "created_at VARCHAR(32) NOT NULL, updated_at VARCHAR(32) NOT NULL, version INTEGER NOT NULL, record TEXT NOT NULL)"
        if conn.dialect.name == "sqlite" else
        "CREATE TABLE plans (id BIGSERIAL PRIMARY KEY, name VARCHAR(200) NOT NULL UNIQUE, author VARCHAR(200) NOT NULL, "
        "created_at VARCHAR(32) NOT NULL, updated_at VARCHAR(32) NOT NULL, version INTEGER NOT NULL, record TEXT NOT NULL)"))


def _v2(conn: Connection) -> None:
    """An uploaded model's config stored with its plan (a plan of an upload could not be recomputed without it)."""
    conn.execute(sa.text("ALTER TABLE plans ADD COLUMN config TEXT"))


MIGRATIONS: tuple[Callable[[Connection], None], ...] = (_v1, _v2)
"""Schema version k is reached by running ``MIGRATIONS[k - 1]``; append, never edit, a migration."""
SCHEMA_VERSION = len(MIGRATIONS)

_PLANS = sa.table("plans", sa.column("id"), sa.column("name"), sa.column("author"), sa.column("created_at"),
                  sa.column("updated_at"), sa.column("version"), sa.column("record"), sa.column("config"))


def _sqlite_serialised(engine: Engine) -> None:
    """SQLite: every transaction takes the write lock at BEGIN (``BEGIN IMMEDIATE``), waiting up to 30 s for it, and
    the file is in WAL mode (readers never wait for a writer). Without this, pysqlite starts transactions lazily and
    two processes that both read then write fail with "database is locked" instead of taking turns; the migration's
    read-then-DDL would race. (SQLAlchemy 2.0 docs, "Serializable isolation / Savepoints / Transactional DDL".)"""
    if sa.event.contains(engine, "connect", _sqlite_connect):
        return
    sa.event.listen(engine, "connect", _sqlite_connect)
    sa.event.listen(engine, "begin", _sqlite_begin)


def _sqlite_connect(dbapi_connection: Any, _record: Any) -> None:
    dbapi_connection.isolation_level = None  # SQLAlchemy's "begin" event emits BEGIN itself
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA busy_timeout = 30000")
    # Switching a new file to WAL needs it alone for a moment and does not wait the busy timeout: replicas opening the
    # same new file together got "database is locked" (tests/app/test_plan_store.py), so it is retried for up to 30 s.
    for attempt in range(300):
        try:
            cursor.execute("PRAGMA journal_mode = WAL")
            break
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or attempt == 299:
                raise
            time.sleep(0.1)
    cursor.close()


def _sqlite_begin(conn: Connection) -> None:
    conn.exec_driver_sql("BEGIN IMMEDIATE")


class PlanStore:
    """The plan library on one SQLAlchemy engine (SQLite or PostgreSQL). Construction migrates the schema."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        if engine.dialect.name == "sqlite":
            _sqlite_serialised(engine)
        self.migrate()

    # --- schema ----------------------------------------------------------------------------------------------------
    def schema_version(self) -> int:
        """The database's schema version (0: empty database)."""
        with self.engine.connect() as conn:
            if not sa.inspect(conn).has_table(SCHEMA_TABLE):
                return 0
            return int(conn.execute(sa.text(f"SELECT version FROM {SCHEMA_TABLE}")).scalar_one())

    def migrate(self, target: int = SCHEMA_VERSION) -> int:
        """Bring the schema to version ``target``, in one transaction under a lock (PostgreSQL: an advisory lock;
        SQLite: the write lock): replicas starting at once run each migration once. Returns the version reached.

        Raises:
            PlanStoreError: the database's schema is newer than this app knows (an older replica after an upgrade).
        """
        with self.engine.begin() as conn:
            if conn.dialect.name == "postgresql":
                conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": _MIGRATION_LOCK})
            if not sa.inspect(conn).has_table(SCHEMA_TABLE):
                conn.execute(sa.text(f"CREATE TABLE {SCHEMA_TABLE} (version INTEGER NOT NULL)"))
                conn.execute(sa.text(f"INSERT INTO {SCHEMA_TABLE} (version) VALUES (0)"))
            current = int(conn.execute(sa.text(f"SELECT version FROM {SCHEMA_TABLE}")).scalar_one())
            if current > SCHEMA_VERSION:
                raise PlanStoreError(f"the plans database has schema version {current}, newer than this app's "
                                     f"{SCHEMA_VERSION}: upgrade this replica")
            for step in range(current, target):
                MIGRATIONS[step](conn)
            if target > current:
                conn.execute(sa.text(f"UPDATE {SCHEMA_TABLE} SET version = :v"), {"v": target})
            return max(current, target)

    # --- reads -----------------------------------------------------------------------------------------------------
    def plans(self) -> list[StoredPlan]:
        """Every saved plan, oldest first. A row whose record no longer validates (a field this version refuses) is
        left out, never rewritten."""
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(_PLANS).order_by(_PLANS.c.created_at, _PLANS.c.id)).mappings().all()
        out = []
        for row in rows:
            try:
                plan = Plan.model_validate({**json.loads(row["record"]), "name": row["name"]}, context={"stored": True})
            except ValueError:
                continue
            out.append(StoredPlan(id=int(row["id"]), plan=plan, author=row["author"], created_at=row["created_at"],
                                  updated_at=row["updated_at"], version=int(row["version"]),
                                  config=json.loads(row["config"]) if row["config"] else None))
        return out

    def get(self, name: str) -> StoredPlan | None:
        """The plan saved under ``name``, or None."""
        return next((p for p in self.plans() if p.plan.name == name), None)

    # --- writes ----------------------------------------------------------------------------------------------------
    def create(self, plan: Plan, *, author: str = ANONYMOUS, config: dict[str, Any] | None = None) -> StoredPlan:
        """Save a new plan under ``plan.name``.

        Raises:
            PlanExists: that name is taken (also when another replica saved it a moment ago).
        """
        self._refuse_lookalike(plan.name)
        now = _now()
        values = {"name": plan.name, "author": author[:200] or ANONYMOUS, "created_at": now, "updated_at": now,
                  "version": 1, "record": plan.model_dump_json(), "config": json.dumps(config) if config else None}
        try:
            with self.engine.begin() as conn:
                new_id = conn.execute(sa.insert(_PLANS).values(**values).returning(_PLANS.c.id)).scalar_one()
        except sa.exc.IntegrityError:
            raise PlanExists(f"a plan named '{plan.name}' is already saved") from None
        return StoredPlan(id=int(new_id), plan=plan, author=values["author"], created_at=now, updated_at=now, version=1,
                          config=config)

    def create_unique(self, plan: Plan, *, author: str = ANONYMOUS, config: dict[str, Any] | None = None,
                      attempts: int = 20) -> StoredPlan:
        """Save under ``plan.name``, or ``name (2)``, ``name (3)``, ... when taken (an import never replaces a plan)."""
        for _ in range(attempts):
            try:
                return self.create(plan, author=author, config=config)
            except PlanExists:
                plan = plan.model_copy(update={"name": unique_plan_name(plan.name, [p.plan.name for p in self.plans()])})
        raise PlanExists(f"could not find a free name for '{plan.name}'")

    def _refuse_lookalike(self, name: str, renaming: str | None = None) -> None:
        """PlanExists when another saved plan has ``name`` up to letter case, spacing or compatibility forms
        (:func:`engine.plan.plan_names.plan_name_key`): "plan a" beside "Plan A" would pass for it in the shared
        library. The same name exactly is left to the database's unique index (its message, and replicas' races).
        (Checked before the write, not by an index: two replicas saving look-alikes in the same instant can both
        pass; the exact-name index still holds.)"""
        others = [p.plan.name for p in self.plans() if p.plan.name not in (name, renaming)]
        clash = same_name(name, others)
        if clash is not None:
            raise PlanExists(f"a plan named '{clash}' is already saved, which differs from '{name}' only in letter "
                             "case, spacing or character forms: choose a name that reads differently")

    def _update(self, name: str, seen_version: int, values: dict[str, Any]) -> None:
        query = (sa.update(_PLANS).where(_PLANS.c.name == name, _PLANS.c.version == seen_version)
                 .values(version=_PLANS.c.version + 1, updated_at=_now(), **values))
        try:
            with self.engine.begin() as conn:
                changed = conn.execute(query).rowcount
        except sa.exc.IntegrityError:
            raise PlanExists(f"a plan named '{values.get('name')}' is already saved") from None
        if changed != 1:
            raise PlanChanged(self._changed_reason(name))

    def _changed_reason(self, name: str) -> str:
        now = self.get(name)
        if now is None:
            return f"the plan '{name}' was renamed or deleted by someone else since this page read it"
        return (f"the plan '{name}' was changed by {now.author} at {now.updated_at} since this page read it; look at "
                "it and save again to replace it")

    def replace(self, plan: Plan, seen_version: int, *, author: str = ANONYMOUS,
                config: dict[str, Any] | None = None) -> None:
        """Replace the plan saved under ``plan.name`` by ``plan``, if it is still at ``seen_version``.

        Raises:
            PlanChanged: someone changed, renamed or deleted it since.
        """
        self._update(plan.name, seen_version, {"record": plan.model_dump_json(), "author": author[:200] or ANONYMOUS,
                                               "config": json.dumps(config) if config else None})

    def rename(self, name: str, new_name: str, seen_version: int) -> None:
        """Rename a plan, if it is still at ``seen_version``.

        Raises:
            PlanExists: ``new_name`` is taken. PlanChanged: someone changed it since.
            ValueError: ``new_name`` is not a valid plan name (empty, too long, several lines).
        """
        stored = self.get(name)
        if stored is None:
            raise PlanChanged(self._changed_reason(name))
        renamed = Plan.model_validate({**stored.plan.model_dump(), "name": new_name})  # the name's own rules
        self._refuse_lookalike(renamed.name, renaming=name)
        self._update(name, seen_version, {"name": renamed.name, "record": renamed.model_dump_json()})

    def delete(self, name: str, seen_version: int) -> None:
        """Delete a plan, if it is still at ``seen_version``.

        Raises:
            PlanChanged: someone changed, renamed or deleted it since.
        """
        with self.engine.begin() as conn:
            gone = conn.execute(sa.delete(_PLANS).where(_PLANS.c.name == name, _PLANS.c.version == seen_version)).rowcount
        if gone != 1:
            raise PlanChanged(self._changed_reason(name))


# --- Streamlit side ----------------------------------------------------------------------------------------------------

def _secrets_connection() -> bool:
    """Whether ``.streamlit/secrets.toml`` (or the platform's secrets) configures ``[connections.plans]``."""
    try:
        return bool(st.secrets.get("connections", {}).get("plans"))
    except Exception:  # noqa: BLE001 - no secrets file: Streamlit raises instead of returning empty
        return False


def database_url() -> str | None:
    """The URL to pass to ``st.connection``: the environment's, else None when secrets configure the connection,
    else the embedded SQLite file (its folder created)."""
    url = (os.environ.get(URL_ENV) or "").strip()
    if url:
        return url
    if _secrets_connection():
        return None
    path = Path(os.environ.get(PATH_ENV) or DEFAULT_SQLITE_PATH).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{path.resolve()}"


@st.cache_resource(max_entries=8, show_spinner=False)
def _migrated(url: str, _engine: Engine) -> PlanStore:
    # Once per process and database (keyed by the URL; the engine itself is not hashed): the first visit migrates.
    return PlanStore(_engine)


def plan_store() -> PlanStore:
    """This deployment's library through ``st.connection("plans", type="sql")``.

    Raises:
        PlanStoreError: the database cannot be reached or migrated (the message names the kind, never the password).
    """
    url = database_url()
    try:
        conn = st.connection("plans", type="sql", **({"url": url} if url else {}))
        return _migrated(conn.engine.url.render_as_string(hide_password=False), conn.engine)
    except PlanStoreError:
        raise
    except Exception as exc:  # noqa: BLE001 - driver errors quote the URL (with its password): say the kind only
        raise unavailable(exc) from None


def current_author() -> str:
    """Who saves: the logged-in user's e-mail (or name) where the deployment turned on ``st.login``, else anonymous."""
    try:
        if st.user.get("is_logged_in"):
            return str(st.user.get("email") or st.user.get("name") or ANONYMOUS)
    except Exception:  # noqa: BLE001 - no auth configured: st.user may refuse to be read
        pass
    return ANONYMOUS
