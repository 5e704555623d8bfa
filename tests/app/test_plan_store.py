"""The team's plan library (ui/plan_store.py) against REAL databases: an SQLite file and a PostgreSQL server
(tests/databases.py; .ci/run starts Debian's PostgreSQL on 127.0.0.1). No mocks: every case opens its own engines,
as separate replicas would, and races them with threads released together by a barrier."""

from __future__ import annotations

import json
import threading

import pytest
import sqlalchemy as sa
import streamlit as st

from apptest_support import no_exception
from ui.formats import md_plain
from databases import database_url  # noqa: F401 - the fixture
from engine.model.sources import config_from_catalog
from engine.plan.plans import Plan
from engine.scenario.training import Method
from ui.plan_store import MIGRATIONS, SCHEMA_TABLE, SCHEMA_VERSION, PlanChanged, PlanExists, PlanStore

QWEN_05B = "Qwen/Qwen2.5-0.5B"
PAGE = "pages/plans.py"


def plan(name: str, **extra) -> Plan:
    return Plan(name=name, model_repo_id=QWEN_05B, gpu="NVIDIA A100 80GB", dataset_total_tokens=1_000_000, **extra)


def replica(url: str) -> PlanStore:
    """A store on its own engine (its own connection pool), like another app process."""
    return PlanStore(sa.create_engine(url))


def together(*calls):
    """Run the calls in threads released at the same instant; their results or exceptions, in order."""
    barrier = threading.Barrier(len(calls))
    out: list = [None] * len(calls)

    def run(i, call):
        barrier.wait()
        try:
            out[i] = call()
        except Exception as exc:  # noqa: BLE001 - the outcome under test
            out[i] = exc

    threads = [threading.Thread(target=run, args=(i, c)) for i, c in enumerate(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return out


def test_an_empty_database_is_migrated_once_by_replicas_starting_together(database_url):
    engines = [sa.create_engine(database_url) for _ in range(4)]
    with engines[0].connect() as conn:
        assert not sa.inspect(conn).has_table("plans")
    stores = together(*(lambda e=e: PlanStore(e) for e in engines))
    assert all(isinstance(s, PlanStore) for s in stores), stores
    assert {s.schema_version() for s in stores} == {SCHEMA_VERSION} == {2}
    with engines[0].connect() as conn:
        assert conn.execute(sa.text(f"SELECT COUNT(*) FROM {SCHEMA_TABLE}")).scalar_one() == 1  # one version row
        assert {c["name"] for c in sa.inspect(conn).get_columns("plans")} >= {"name", "author", "created_at",
                                                                              "updated_at", "version", "record", "config"}


def test_a_version_1_database_keeps_its_plans_when_migrated(database_url):
    engine = sa.create_engine(database_url)
    with engine.begin() as conn:  # the schema as the first release left it, with one plan
        conn.execute(sa.text(f"CREATE TABLE {SCHEMA_TABLE} (version INTEGER NOT NULL)"))
        conn.execute(sa.text(f"INSERT INTO {SCHEMA_TABLE} (version) VALUES (1)"))
        MIGRATIONS[0](conn)
        conn.execute(sa.text("INSERT INTO plans (name, author, created_at, updated_at, version, record) VALUES "
                             "('old', 'ana', '2026-01-01T00:00:00Z', '2026-01-01T00:00:00Z', 1, :r)"),
                     {"r": plan("old", seq_len=512).model_dump_json()})
    store = PlanStore(engine)
    assert store.schema_version() == 2
    (old,) = store.plans()
    assert (old.plan.name, old.plan.seq_len, old.author, old.version, old.config) == ("old", 512, "ana", 1, None)


def test_two_sessions_save_at_once_and_a_third_reads_both(database_url):
    a, b, c = replica(database_url), replica(database_url), replica(database_url)
    results = together(lambda: a.create(plan("from a")), lambda: b.create(plan("from b", method=Method.LORA)))
    assert all(not isinstance(r, Exception) for r in results), results
    assert {(p.plan.name, p.plan.method) for p in c.plans()} == {("from a", Method.FULL), ("from b", Method.LORA)}


def test_two_sessions_saving_one_name_at_once_never_overwrite_each_other(database_url):
    stores = [replica(database_url) for _ in range(4)]
    methods = [Method.FULL, Method.LORA, Method.QLORA, Method.FULL]
    results = together(*(lambda s=s, m=m: s.create(plan("same", method=m), author=f"user{i}")
                         for i, (s, m) in enumerate(zip(stores, methods))))
    won = [r for r in results if not isinstance(r, Exception)]
    assert len(won) == 1 and sum(isinstance(r, PlanExists) for r in results) == 3, results
    (kept,) = replica(database_url).plans()
    assert (kept.plan.method, kept.author, kept.version) == (won[0].plan.method, won[0].author, 1)  # the winner's


def test_replacing_names_the_version_seen_so_a_concurrent_change_is_refused(database_url):
    a, b = replica(database_url), replica(database_url)
    a.create(plan("p"))
    seen = b.get("p").version
    results = together(lambda: a.replace(plan("p", seq_len=1024), seen), lambda: b.replace(plan("p", seq_len=4096), seen))
    assert sorted(type(r).__name__ for r in results) == ["NoneType", "PlanChanged"], results
    now = a.get("p")
    assert now.version == 2 and now.plan.seq_len in (1024, 4096)
    with pytest.raises(PlanChanged, match="changed by anonymous"):
        b.delete("p", seen)  # b still holds version 1
    with pytest.raises(PlanChanged):
        b.rename("p", "q", seen)
    a.create(plan("q"))
    with pytest.raises(PlanExists):
        a.rename("p", "q", now.version)
    a.rename("p", "r", now.version)
    a.delete("r", now.version + 1)
    assert [p.plan.name for p in a.plans()] == ["q"]


def _apptest(new_app, url, monkeypatch):
    monkeypatch.setenv("FINETUNE_FIT_PLANS_URL", url)
    at = new_app()
    at.query_params["model"] = QWEN_05B
    at.switch_page(PAGE).run()
    no_exception(at)
    return at


def test_a_plan_saved_on_the_page_survives_an_app_restart_and_a_stale_page_never_overwrites(
        new_app, database_url, monkeypatch):
    first = _apptest(new_app, database_url, monkeypatch)
    second = _apptest(new_app, database_url, monkeypatch)  # drawn before `first` saved: it sees an empty library
    first.text_input(key="plan_name").input("team plan").run()
    first.button(key="plan_save").click().run()
    no_exception(first)
    second.radio(key="method").set_value(Method.QLORA).run()
    second.text_input(key="plan_name").input("team plan").run()
    # the name now clashes: the page offers the explicit replace (with who saved it) instead of saving over it
    assert any("Replace the saved plan 'team plan' (saved by anonymous" in c.label for c in second.checkbox)
    st.cache_resource.clear()  # the process restarts: connections and the migrated store are gone
    third = _apptest(new_app, database_url, monkeypatch)
    assert [(p.name, p.method) for p, _ in third.session_state["saved_plans"]] == [("team plan", Method.FULL)]
    assert third.dataframe[0].value["saved_by"].tolist() == ["anonymous"]


@pytest.mark.parametrize("new_app", ["served"], indirect=True)  # the page, not the routing: one mode is enough
def test_a_plan_of_an_uploaded_config_keeps_the_config(new_app, database_url, monkeypatch):
    cfg = {**config_from_catalog(QWEN_05B)[0], "num_hidden_layers": 12}
    at = _apptest(new_app, database_url, monkeypatch)
    at.radio(key="model_source").set_value("Upload config.json").run()
    at.file_uploader(key="config_upload").set_value(("my-model.json", json.dumps(cfg).encode(), "application/json")).run()
    at.text_input(key="plan_name").input("uploaded").run()
    at.button(key="plan_save").click().run()
    no_exception(at)
    (mine,) = at.session_state["saved_plans"]
    other = _apptest(new_app, database_url, monkeypatch)  # a catalog session: it never saw the upload
    (theirs,) = other.session_state["saved_plans"]
    assert theirs[0].model_repo_id == "upload:my-model.json"
    assert theirs[1].total_parameters == mine[1].total_parameters  # recomputed from the stored 12-layer config
    assert theirs[1].total_parameters < 494_032_768  # Qwen2.5-0.5B's 24 layers (its model card)


@pytest.mark.parametrize("new_app", ["served"], indirect=True)  # the page, not the routing: one mode is enough
def test_rename_and_remove_on_the_page(new_app, tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 'lib.sqlite'}"
    at = _apptest(new_app, url, monkeypatch)
    for name in ("first", "second"):
        at.text_input(key="plan_name").input(name).run()
        at.button(key="plan_save").click().run()
    at.selectbox(key="plans_chosen").set_value("first").run()
    at.text_input(key="plans_new_name").input("second").run()
    at.button(key="plans_rename").click().run()
    no_exception(at)
    assert any("Not renamed: a plan named 'second' is already saved" in w.value for w in at.warning)
    at.text_input(key="plans_new_name").input("renamed").run()
    at.button(key="plans_rename").click().run()
    no_exception(at)
    assert [p.plan.name for p in replica(url).plans()] == ["renamed", "second"]
    assert at.selectbox(key="plans_chosen").value == "renamed"
    at.button(key="plans_remove").click().run()  # arms the confirmation (tests/app/test_plan_actions.py)
    at.button(key="plans_remove_confirm").click().run()
    no_exception(at)
    assert [p.plan.name for p in replica(url).plans()] == ["second"]


@pytest.mark.parametrize("new_app", ["served"], indirect=True)  # the page, not the routing: one mode is enough
def test_an_unreachable_database_is_said_without_its_password(new_app, monkeypatch):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there
    at = _apptest(new_app, f"postgresql+psycopg://fit:S3cretPassw0rd@127.0.0.1:{port}/nowhere", monkeypatch)
    (error,) = at.error
    assert error.value.startswith("The saved plans are not available: the plans database cannot be reached")
    assert "S3cretPassw0rd" not in json.dumps([e.value for e in (*at.error, *at.warning, *at.markdown)])


@pytest.mark.parametrize("new_app", ["served"], indirect=True)  # the page, not the routing: one mode is enough
def test_a_database_that_goes_away_is_said_not_raised(new_app, monkeypatch):
    from databases import fresh_postgres_database, postgres_admin_url

    with fresh_postgres_database() as url:
        at = _apptest(new_app, url, monkeypatch)
        assert not at.error
        server = sa.create_engine(postgres_admin_url(), isolation_level="AUTOCOMMIT")
        try:
            with server.connect() as conn:  # the database is dropped under the running app
                conn.execute(sa.text(f'DROP DATABASE "{sa.make_url(url).database}" WITH (FORCE)'))
        finally:
            server.dispose()
        at.run()
        no_exception(at)
        reason = ("the plans database cannot be reached (OperationalError); check [connections.plans] in secrets.toml "
                  "or FINETUNE_FIT_PLANS_URL")
        assert [e.value for e in at.error] == [f"The saved plans are not available: {md_plain(reason)}."]
