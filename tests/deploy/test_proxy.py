"""deploy/: a real nginx (Debian's package) in front of two real Streamlit replicas on 127.0.0.1 (deploy/cluster.py,
one SQLite plan library): the proxy sets its own affinity cookie, keeps a visitor (page, websocket) on one replica,
moves the visitor to the other when that replica dies, answers Streamlit's health check and refuses an oversized
upload. Skips without nginx, except under NGINX_REQUIRED=1 (set by .ci/run)."""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "deploy"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from cluster import Cluster, nginx_binary  # noqa: E402


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if nginx_binary() is None:
        if os.environ.get("NGINX_REQUIRED") == "1":
            pytest.fail("NGINX_REQUIRED=1 but nginx is not installed", pytrace=False)
        pytest.skip("nginx is not installed (apt-get install nginx)")
    work = tmp_path_factory.mktemp("cluster")
    with Cluster(2, database="sqlite", workdir=work, env={"HF_HUB_OFFLINE": "1"}) as c:
        yield c


def get(url: str, cookie: str | None = None) -> tuple[int, str | None]:
    """(status, the affinity cookie the proxy set)."""
    request = urllib.request.Request(url, headers={"Cookie": f"fit_affinity={cookie}"} if cookie else {})
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            status, headers = r.status, r.headers
    except urllib.error.HTTPError as exc:
        status, headers = exc.code, exc.headers
    set_cookie = next((h for h in headers.get_all("Set-Cookie") or [] if h.startswith("fit_affinity=")), None)
    return status, set_cookie.split(";")[0].split("=", 1)[1] if set_cookie else None


def upstreams(cluster, cookie: str) -> list[str]:
    """The replica (host:port) that answered each request with this affinity key, from nginx's access log (after a
    failed try, ``$upstream_addr`` lists every replica tried: the last one answered)."""
    log = (cluster.workdir / "nginx" / "access.log").read_text()
    return [line.split("upstream=")[1].split(" affinity=")[0].split(", ")[-1] for line in log.splitlines()
            if line.endswith(f"affinity={cookie}")]


def logged_upstreams(cluster, cookie: str, at_least: int, timeout_s: float = 10.0) -> list[str]:
    """:func:`upstreams`, waiting up to ``timeout_s`` until it has ``at_least`` lines: nginx writes a request's line when
    it finalises the request (a websocket's when it closes), which can be just after the client has moved on."""
    import time

    deadline = time.monotonic() + timeout_s
    while True:
        lines = upstreams(cluster, cookie)
        if len(lines) >= at_least or time.monotonic() > deadline:
            return lines
        time.sleep(0.1)


def test_the_proxy_sets_an_affinity_cookie_and_spreads_new_visitors(cluster):
    cookies = []
    for _ in range(16):
        status, cookie = get(cluster.url + "/")
        assert status == 200 and cookie and len(cookie) == 32
        cookies.append(cookie)
    assert len(set(cookies)) == 16  # one key per visitor, not per address (ip_hash would send all 16 to one replica)
    used = {u for c in cookies for u in upstreams(cluster, c)}
    assert used == {f"127.0.0.1:{p}" for p in cluster.replica_ports}  # 16 visitors on 2 replicas: both serve
    assert get(cluster.url + "/_stcore/health")[0] == 200


def test_a_visitor_stays_on_one_replica_and_moves_when_it_dies(cluster):
    from load import Session

    _, cookie = get(cluster.url + "/")
    for _ in range(4):
        assert get(cluster.url + "/memory", cookie) == (200, cookie)
    session = Session(cluster.url, 60.0, headers={"Cookie": f"fit_affinity={cookie}"})  # the app's websocket
    try:
        _, problems = session.rerun()
        assert problems == [] and session.metrics.get("Peak memory")
    finally:
        session.close()
    served = logged_upstreams(cluster, cookie, 6)
    assert len(served) >= 6 and len(set(served)) == 1, served  # page loads and the websocket upgrade: one replica
    home = cluster.replica_ports.index(int(served[0].rsplit(":", 1)[1]))
    cluster.kill_replica(home)
    try:
        assert get(cluster.url + "/memory", cookie) == (200, cookie)  # the other replica answers, same key
        after = logged_upstreams(cluster, cookie, len(served) + 1)[len(served):]
        assert after and after[-1] == f"127.0.0.1:{cluster.replica_ports[1 - home]}", after
    finally:
        cluster.start_replica(home)


def test_an_upload_over_the_limit_is_refused_by_the_proxy(cluster):
    request = urllib.request.Request(cluster.url + "/_stcore/upload_file/s/f", data=b"x" * 3_000_000, method="PUT")
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(request, timeout=30)
    assert info.value.code == 413  # client_max_body_size 2m: refused before any replica reads it
