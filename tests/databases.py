"""Real databases for the plan-library tests (ui/plan_store.py): an SQLite file in the test's tmp_path, and a fresh
database on the PostgreSQL server ``FINETUNE_FIT_TEST_POSTGRES_URL`` names (.ci/run starts Debian's PostgreSQL on
127.0.0.1 and exports it). Without that variable the PostgreSQL cases skip, except under ``POSTGRES_REQUIRED=1``
(set by .ci/run), where they fail. Nothing here mocks a database."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import sqlalchemy as sa

PG_ENV = "FINETUNE_FIT_TEST_POSTGRES_URL"


def postgres_admin_url() -> str:
    """The server's URL, or skip (fail under POSTGRES_REQUIRED=1)."""
    url = os.environ.get(PG_ENV, "").strip()
    problem = None
    if not url:
        problem = f"{PG_ENV} is not set (.ci/run starts a PostgreSQL server and sets it)"
    else:
        try:
            with sa.create_engine(url).connect() as conn:
                conn.execute(sa.text("SELECT 1"))
        except Exception as exc:  # noqa: BLE001 - any driver error means: no server to test against
            problem = f"PostgreSQL at {PG_ENV} is unreachable: {type(exc).__name__}: {exc}"
    if problem:
        if os.environ.get("POSTGRES_REQUIRED") == "1":
            pytest.fail(f"POSTGRES_REQUIRED=1 but {problem}", pytrace=False)
        pytest.skip(problem)
    return url


@contextmanager
def fresh_postgres_database() -> Iterator[str]:
    """The URL of a new, empty database on the test server, dropped afterwards."""
    admin = sa.make_url(postgres_admin_url())
    name = f"fit_test_{uuid.uuid4().hex[:12]}"
    engine = sa.create_engine(admin, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    try:
        yield admin.set(database=name).render_as_string(hide_password=False)
    finally:
        with engine.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        engine.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request, tmp_path) -> Iterator[str]:
    """An empty database of each kind: an SQLite file, a fresh PostgreSQL database."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'plans.sqlite'}"
    else:
        with fresh_postgres_database() as url:
            yield url
