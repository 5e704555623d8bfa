"""Run the app as a team would host it, on the loopback interface: N Streamlit replicas behind nginx (cookie
affinity, websockets, uploads; deploy/nginx.conf.template) sharing one plan library in PostgreSQL (deploy/postgres.sh)
or in one SQLite file.

    python deploy/cluster.py --replicas 3 --port 19480            # until Ctrl-C; restarts a replica that dies
    python deploy/cluster.py --replicas 3 --database sqlite       # no PostgreSQL: one SQLite file for every replica

Every replica gets the same ``server.cookieSecret``: Streamlit signs its XSRF cookie with it, so an upload still
validates when a dead replica's visitors land on another one. The library's URL goes to every replica as
``FINETUNE_FIT_PLANS_URL``. benchmarks/load_cluster.py and tests/deploy/ drive :class:`Cluster` directly.
Needs nginx (Debian's ``nginx`` package) and, for PostgreSQL, Debian's ``postgresql``; nothing listens beyond
127.0.0.1.
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def healthy(url: str, timeout_s: float = 2.0) -> bool:
    """Whether Streamlit's health endpoint at ``url`` answers 200."""
    try:
        with urllib.request.urlopen(f"{url}/_stcore/health", timeout=timeout_s) as r:
            return r.status == 200
    except OSError:
        return False


def stop_process(proc: subprocess.Popen, timeout_s: float = 10.0) -> None:
    """Stop ``proc`` as a supervisor does: SIGTERM, then SIGKILL if it has not exited within ``timeout_s``."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def nginx_binary() -> str | None:
    return shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if Path(p).is_file()), None)


class Cluster:
    """N replicas + nginx (+ PostgreSQL) in ``workdir``. Ports: the proxy's, then one per replica (free ones when not
    given). ``database``: "postgres" (started here), "sqlite" (one file in workdir), or an SQLAlchemy URL."""

    def __init__(self, replicas: int = 3, *, proxy_port: int | None = None, replica_ports: list[int] | None = None,
                 database: str = "postgres", pg_port: int | None = None, workdir: Path | None = None,
                 env: dict[str, str] | None = None) -> None:
        self._own_workdir = workdir is None  # a temp folder of ours: removed by stop()
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="finetune-fit-cluster-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.workdir.chmod(0o755)  # PostgreSQL runs as its own user when we are root: it must reach its folder
        self.proxy_port = proxy_port or free_port()
        self.replica_ports = replica_ports or [free_port() for _ in range(replicas)]
        self.database, self.pg_port = database, pg_port or free_port()
        self.env = {**os.environ, "HF_HUB_DISABLE_TELEMETRY": "1", **(env or {})}
        self.cookie_secret = secrets.token_hex(32)
        self.procs: dict[int, subprocess.Popen] = {}
        self.nginx: subprocess.Popen | None = None
        self.database_url = ""
        self._pg_dir: Path | None = None

    @property
    def url(self) -> str:
        """The proxy's URL: what visitors open."""
        return f"http://127.0.0.1:{self.proxy_port}"

    def replica_url(self, i: int) -> str:
        return f"http://127.0.0.1:{self.replica_ports[i]}"

    # --- pieces ----------------------------------------------------------------------------------------------------
    def _start_database(self) -> None:
        if self.database == "postgres":
            self._pg_dir = self.workdir / "postgres"
            out = subprocess.run([str(DEPLOY / "postgres.sh"), "start", str(self._pg_dir), str(self.pg_port)],
                                 capture_output=True, text=True)
            if out.returncode:
                raise RuntimeError(f"PostgreSQL did not start: {out.stderr.strip()[-500:]}")
            self.database_url = out.stdout.strip().splitlines()[-1]
        elif self.database == "sqlite":
            self.database_url = f"sqlite:///{self.workdir / 'plans.sqlite'}"
        else:
            self.database_url = self.database

    def start_replica(self, i: int, wait: bool = True) -> None:
        """Start (or restart) replica ``i`` on its port."""
        logs = self.workdir / f"replica{i}.log"
        env = {**self.env, "FINETUNE_FIT_PLANS_URL": self.database_url,
               "STREAMLIT_SERVER_COOKIE_SECRET": self.cookie_secret}  # Streamlit refuses it as a command-line flag
        self.procs[i] = subprocess.Popen(
            [sys.executable, "-m", "streamlit", "run", "streamlit_app.py", "--server.address", "127.0.0.1",
             "--server.port", str(self.replica_ports[i]), "--server.headless", "true",
             "--browser.gatherUsageStats", "false"],
            cwd=ROOT, env=env, stdout=logs.open("ab"), stderr=subprocess.STDOUT, start_new_session=True)
        if wait:
            self.wait_healthy(self.replica_url(i), self.procs[i])

    def kill_replica(self, i: int) -> None:
        """SIGKILL replica ``i``: a crash, no goodbye to its websockets."""
        proc = self.procs.pop(i, None)
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()

    def _render_nginx(self, ports: list[int]) -> Path:
        run = self.workdir / "nginx"
        run.mkdir(exist_ok=True)
        servers = "\n".join(f"        server 127.0.0.1:{p} max_fails=1 fail_timeout=10s;" for p in ports)
        text = (DEPLOY / "nginx.conf.template").read_text()
        text = (text.replace("@RUN@", str(run)).replace("@PORT@", str(self.proxy_port)).replace("@SERVERS@", servers)
                .replace("@USER@", "user root;" if os.geteuid() == 0 else ""))
        conf = run / "nginx.conf"
        conf.write_text(text)
        return conf

    def start_nginx(self) -> None:
        binary = nginx_binary()
        if binary is None:
            raise RuntimeError("nginx is not installed (apt-get install nginx)")
        conf = self._render_nginx(self.replica_ports)
        run = conf.parent
        self.nginx = subprocess.Popen([binary, "-p", str(run), "-e", str(run / "nginx-error.log"), "-c", str(conf),
                                       "-g", "daemon off;"], stdout=(run / "nginx.out").open("ab"),
                                      stderr=subprocess.STDOUT, start_new_session=True)
        self.wait_healthy(self.url, self.nginx)

    @staticmethod
    def wait_healthy(url: str, proc: subprocess.Popen | None = None, timeout_s: float = 90.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not healthy(url):
            if (proc is not None and proc.poll() is not None) or time.monotonic() > deadline:
                raise RuntimeError(f"{url} did not become healthy")
            time.sleep(0.2)

    # --- whole -----------------------------------------------------------------------------------------------------
    def start(self) -> "Cluster":
        self._start_database()
        for i in range(len(self.replica_ports)):
            self.start_replica(i, wait=False)
        for i in range(len(self.replica_ports)):
            self.wait_healthy(self.replica_url(i), self.procs[i])
        self.start_nginx()
        return self

    def stop(self) -> None:
        if self.nginx is not None and self.nginx.poll() is None:
            self.nginx.send_signal(signal.SIGQUIT)  # graceful
            try:
                self.nginx.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.nginx.kill()
                self.nginx.wait()
        for i in list(self.procs):
            stop_process(self.procs.pop(i))
        if self._pg_dir is not None:
            subprocess.run([str(DEPLOY / "postgres.sh"), "stop", str(self._pg_dir)], check=False, capture_output=True)
            self._pg_dir = None
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> "Cluster":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def supervise(self) -> None:
        """Until interrupted: restart a replica whose health check fails twice in a row."""
        misses = dict.fromkeys(range(len(self.replica_ports)), 0)
        while True:
            time.sleep(5)
            for i in misses:
                misses[i] = 0 if healthy(self.replica_url(i)) else misses[i] + 1
                if misses[i] >= 2:
                    print(f"replica {i} failed its health check: restarting it", file=sys.stderr)
                    self.kill_replica(i)
                    self.start_replica(i, wait=False)
                    misses[i] = -6  # give it half a minute to start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--port", type=int, default=8080, help="the proxy's port on 127.0.0.1 (default 8080)")
    parser.add_argument("--first-replica-port", type=int, default=8501, help="replicas on this port and up")
    parser.add_argument("--database", default="postgres", help="postgres (started here), sqlite, or an SQLAlchemy URL")
    parser.add_argument("--pg-port", type=int, default=5433)
    parser.add_argument("--workdir", type=Path, help="logs, nginx files, the database (default: a temp folder)")
    args = parser.parse_args(argv)
    cluster = Cluster(args.replicas, proxy_port=args.port,
                      replica_ports=[args.first_replica_port + i for i in range(args.replicas)],
                      database=args.database, pg_port=args.pg_port, workdir=args.workdir)
    try:
        cluster.start()
        print(f"{args.replicas} replicas behind {cluster.url} (plans: {cluster.database_url.split('://')[0]}; "
              f"logs in {cluster.workdir}); Ctrl-C stops everything", flush=True)
        cluster.supervise()
    except KeyboardInterrupt:
        pass
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
