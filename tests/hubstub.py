"""A local HTTP stub of the Hugging Face Hub's file-resolve endpoint, for offline tests.

It is a real HTTP server (``http.server.ThreadingHTTPServer`` in a daemon thread) bound to 127.0.0.1 on a random
port. It answers ``HEAD`` and ``GET`` on ``/{repo_id}/resolve/{revision}/{filename}`` the way huggingface.co does,
as read by huggingface_hub 2.4 (``file_download.get_hf_file_metadata`` / ``hf_hub_download`` and
``utils._http.hf_raise_for_status``):

* success: ``200`` with ``Content-Length``, ``ETag`` (quoted git blob sha1, as the Hub sends for non-LFS files),
  ``X-Repo-Commit`` (40 hex chars) and ``Accept-Ranges``; ``HEAD`` carries the same headers without a body.
* optional resolve-cache redirect (``redirect=True``): the first answer is a ``307`` with a *relative* ``Location``
  to ``/api/resolve-cache/models/{repo_id}/{commit}/{filename}``, ``X-Repo-Commit``, ``X-Linked-Etag`` and
  ``X-Linked-Size``, as huggingface.co does for regular files since 2025; the target answers like a ``200`` above.
* errors carry ``X-Error-Code`` / ``X-Error-Message`` headers and, for ``GET``, a JSON body ``{"error": ...}``:

  - unknown repo, or private repo without access: ``401`` without a valid token, ``404`` with one
    (``RepoNotFound``);
  - gated repo: ``401`` without a token, ``403`` with a valid token that has not accepted the terms (``GatedRepo``);
  - any ``Authorization`` header whose token the Hub does not know: ``401`` with
    ``X-Error-Message: Invalid credentials in Authorization header`` and no error code (the Hub rejects an invalid
    token even on public repos);
  - unknown revision: ``404`` ``RevisionNotFound``; missing file: ``404`` ``EntryNotFound`` (with ``X-Repo-Commit``).

Any other path is recorded in :attr:`HubStub.unexpected` and answered ``404`` (plain text), like the Hub's router.

Configure it with a mapping of repo ids to :class:`StubRepo`::

    with HubStub(
        {
            "meta-llama/Llama-3.2-1B": StubRepo(config=llama_cfg, gated=True),
            "acme/broken": StubRepo(config=b"<html>oops</html>"),
            "acme/down": StubRepo(config={}, status=503),
            "acme/slow": StubRepo(config={}, delay_s=5.0),
        },
        valid_tokens={"hf_good"},
    ) as hub:
        os.environ["HF_ENDPOINT"] = hub.url
        ...
        assert hub.requests[-1].path == "/meta-llama/Llama-3.2-1B/resolve/main/config.json"

Requests are recorded as :class:`RecordedRequest` (method, path, whether an ``Authorization`` header was sent, and
whether its token was accepted): the token value itself is only compared, never stored.

:func:`refused_endpoint` gives a base URL on 127.0.0.1 where nothing listens (connection refused).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import socket
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import quote, unquote, urlsplit

__all__ = ["HubStub", "RecordedRequest", "StubRepo", "refused_endpoint"]

_RESOLVE_RE = re.compile(r"^/(?P<repo>[^/]+(?:/[^/]+)?)/resolve/(?P<rev>[^/]+)/(?P<file>.+)$")
_RESOLVE_CACHE_RE = re.compile(r"^/api/resolve-cache/models/(?P<repo>[^/]+/[^/]+)/(?P<rev>[0-9a-f]{40})/(?P<file>.+)$")
_COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")


@dataclass
class StubRepo:
    """Behaviour of one repo served by :class:`HubStub`.

    Attributes:
        config: body of ``config.json``; a dict/list is served as JSON (``json.dumps``, UTF-8), bytes are served
            verbatim (use it for non-JSON or oversized bodies). ``None``: the repo has no ``config.json``
            (``404 EntryNotFound``).
        files: other files of the repo, path -> bytes.
        gated: access needs a valid token that accepted the terms (see ``granted``).
        private: the repo is invisible (``RepoNotFound``) to anyone but ``granted`` tokens.
        granted: tokens that accepted the terms / may see the private repo; ``None`` means every token in
            ``HubStub.valid_tokens``.
        revisions: branch/tag names that exist; any 40-hex commit id is accepted as well. Others: ``RevisionNotFound``.
        status: if set (e.g. 500, 503), every request to this repo is answered with this status and a plain-text body.
        delay_s: seconds to sleep before answering (to exercise client timeouts).
        redirect: answer ``/resolve/`` with the Hub's ``307`` to ``/api/resolve-cache/...``.
        trickle_s: send a ``GET`` body in 8 pieces with this many seconds between them (headers come at once), to
            exercise a client's overall deadline rather than its per-read timeout.
        drop: close the connection without any answer (after ``delay_s``), like a crashed Hub behind a load
            balancer: the client sees the server disconnect.
        file_delay_s: extra seconds to sleep before answering for the named files only (e.g.
            ``{"model.safetensors": 3.0}``: a Hub that serves config.json but hangs on the weights' headers).
    """

    config: dict[str, Any] | list[Any] | bytes | None = None
    files: dict[str, bytes] = field(default_factory=dict)
    gated: bool = False
    private: bool = False
    granted: frozenset[str] | None = None
    revisions: frozenset[str] = frozenset({"main"})
    status: int | None = None
    delay_s: float = 0.0
    redirect: bool = False
    trickle_s: float = 0.0
    drop: bool = False
    file_delay_s: dict[str, float] = field(default_factory=dict)

    def body_of(self, filename: str) -> bytes | None:
        """Bytes of ``filename`` in this repo, or None if it has no such file."""
        if filename == "config.json":
            if self.config is None:
                return None
            if isinstance(self.config, bytes):
                return self.config
            return json.dumps(self.config, indent=2).encode("utf-8")
        return self.files.get(filename)


@dataclass(frozen=True)
class RecordedRequest:
    """One request the stub received. The token is never stored, only whether one was sent and accepted."""

    method: str
    path: str
    has_authorization: bool
    token_accepted: bool
    user_agent: str


_RANGE_RE = re.compile(r"bytes=(\d+)-(\d*)")


def _git_blob_sha1(data: bytes) -> str:
    """The git blob id of ``data`` (what the Hub sends as ETag for files stored in git, not LFS)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _commit_of(repo_id: str, revision: str) -> str:
    """A stable fake commit id for a (repo, revision) pair; a 40-hex revision is its own commit."""
    if _COMMIT_RE.match(revision):
        return revision
    return hashlib.sha1(f"{repo_id}@{revision}".encode()).hexdigest()


class HubStub:
    """A local, threaded HTTP server mimicking huggingface.co's ``/resolve/`` endpoint (see module docstring).

    Use as a context manager, or call :meth:`start` / :meth:`stop`. ``url`` is the base URL to put in
    ``HF_ENDPOINT``. ``requests`` lists every request received, in order; ``unexpected`` the ones the stub does not
    implement (answered ``404``).
    """

    def __init__(self, repos: Mapping[str, StubRepo] | None = None, *, valid_tokens: set[str] | None = None) -> None:
        self.repos: dict[str, StubRepo] = dict(repos or {})
        #: Tokens the stub's Hub knows (mutable: tests may add tokens while it runs).
        self.valid_tokens: set[str] = set(valid_tokens or ())
        self.requests: list[RecordedRequest] = []
        self.unexpected: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ------------------------------------------------------------------------------------------------
    def start(self) -> HubStub:
        handler = _make_handler(self)
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> HubStub:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """Base URL of the running stub, e.g. ``http://127.0.0.1:54321`` (no trailing slash)."""
        if self._server is None:
            raise RuntimeError("HubStub is not running")
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    # -- introspection helpers --------------------------------------------------------------------------------------
    def add(self, repo_id: str, repo: StubRepo) -> None:
        """Serve (or replace) ``repo_id`` while running."""
        with self._lock:
            self.repos[repo_id] = repo

    def requests_for(self, repo_id: str, filename: str = "config.json") -> list[RecordedRequest]:
        """Requests so far that asked for ``filename`` of ``repo_id`` (``/resolve/`` and ``/api/resolve-cache/``)."""
        with self._lock:
            return [
                r for r in self.requests
                if (f"/{repo_id}/resolve/" in r.path or f"/models/{repo_id}/" in r.path)
                and urlsplit(r.path).path.endswith("/" + filename)
            ]

    def paths(self, method: str | None = None) -> list[str]:
        """Paths requested so far, optionally only those of one HTTP method."""
        with self._lock:
            return [r.path for r in self.requests if method is None or r.method == method]

    def _record(self, rec: RecordedRequest, *, unexpected: bool = False) -> None:
        with self._lock:
            self.requests.append(rec)
            if unexpected:
                self.unexpected.append(rec)


def _make_handler(stub: HubStub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "HubStub/1.0"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
            pass  # keep pytest output clean; requests are recorded on the stub instead

        def do_HEAD(self) -> None:  # noqa: N802 - stdlib naming
            self._handle(send_body=False)

        def do_GET(self) -> None:  # noqa: N802
            self._handle(send_body=True)

        def do_POST(self) -> None:  # noqa: N802
            self._handle(send_body=True)

        # -- helpers -----------------------------------------------------------------------------------------------
        def _token_state(self) -> tuple[bool, str | None, bool]:
            """(has Authorization header, the token if the Hub knows it, whether it was accepted)."""
            auth = self.headers.get("Authorization")
            if auth is None:
                return False, None, True
            scheme, _, token = auth.partition(" ")
            if scheme.lower() == "bearer" and token in set(stub.valid_tokens):
                return True, token, True
            return True, None, False

        def _send(
            self,
            status: int,
            body: bytes = b"",
            *,
            send_body: bool,
            headers: Mapping[str, str] | None = None,
            content_type: str = "text/plain; charset=utf-8",
            trickle_s: float = 0.0,
        ) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("X-Request-Id", f"Root=1-stub-{len(stub.requests)}")
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            if send_body and body:
                try:
                    if trickle_s > 0:
                        step = max(1, -(-len(body) // 8))
                        for i in range(0, len(body), step):
                            self.wfile.write(body[i : i + step])
                            self.wfile.flush()
                            time.sleep(trickle_s)
                    else:
                        self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):  # client gave up (timeout test)
                    pass

        def _error(self, status: int, code: str | None, message: str, *, send_body: bool, extra=None) -> None:
            headers = {"X-Error-Message": message, **(extra or {})}
            if code is not None:
                headers["X-Error-Code"] = code
            body = json.dumps({"error": message}).encode()
            self._send(status, body, send_body=send_body, headers=headers, content_type="application/json")

        def _handle(self, *, send_body: bool) -> None:
            # Drain a request body if any (POST), so keep-alive stays in sync.
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)

            path = urlsplit(self.path).path
            has_auth, token, token_ok = self._token_state()
            rec = RecordedRequest(
                method=self.command,
                path=self.path,
                has_authorization=has_auth,
                token_accepted=has_auth and token_ok,
                user_agent=self.headers.get("User-Agent", ""),
            )

            via_cache = False
            m = _RESOLVE_RE.match(path)
            if m is None:
                m = _RESOLVE_CACHE_RE.match(path)
                via_cache = m is not None
            if m is None or self.command == "POST":
                stub._record(rec, unexpected=True)
                self._send(404, b"Not Found", send_body=send_body)
                return
            stub._record(rec)

            repo_id = unquote(m.group("repo"))
            revision = unquote(m.group("rev"))
            filename = unquote(m.group("file"))
            with stub._lock:
                repo = stub.repos.get(repo_id)

            if repo is not None and repo.delay_s > 0:
                time.sleep(repo.delay_s)
            if repo is not None and repo.file_delay_s.get(filename, 0) > 0:
                time.sleep(repo.file_delay_s[filename])
            if repo is not None and repo.drop:
                self.close_connection = True
                with contextlib.suppress(OSError):
                    self.connection.shutdown(socket.SHUT_RDWR)
                return

            # The Hub rejects an unknown token before anything else, even for public repos.
            if has_auth and not token_ok:
                self._error(401, None, "Invalid credentials in Authorization header", send_body=send_body)
                return

            granted = repo.granted if repo is not None and repo.granted is not None else set(stub.valid_tokens)
            has_access = token is not None and token in granted

            if repo is None or (repo.private and not has_access):
                self._error(
                    404 if token is not None else 401, "RepoNotFound", "Repository not found", send_body=send_body
                )
                return

            if repo.status is not None:
                self._send(repo.status, b"Internal Error - We're working hard to fix this as soon as possible!",
                           send_body=send_body)
                return

            if repo.gated and not has_access:
                if token is None:
                    msg = (
                        f"Access to model {repo_id} is restricted. You must have access to it and be authenticated"
                        " to access it. Please log in."
                    )
                    self._error(401, "GatedRepo", msg, send_body=send_body)
                else:
                    msg = (
                        f"Access to model {repo_id} is restricted and you are not in the authorized list."
                        f" Visit https://huggingface.co/{repo_id} to ask for access."
                    )
                    self._error(403, "GatedRepo", msg, send_body=send_body)
                return

            if not (_COMMIT_RE.match(revision) or revision in repo.revisions):
                self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}", send_body=send_body)
                return

            commit = _commit_of(repo_id, revision)
            body = repo.body_of(filename)
            if body is None:
                self._error(
                    404, "EntryNotFound", f"{filename} does not exist on \"{revision}\"", send_body=send_body,
                    extra={"X-Repo-Commit": commit},
                )
                return

            etag = _git_blob_sha1(body)
            if repo.redirect and not via_cache:
                location = (
                    f"/api/resolve-cache/models/{repo_id}/{commit}/{quote(filename)}"
                    f"?{quote(path, safe='')}=&etag=%22{etag}%22"
                )
                self._send(
                    307,
                    f"Temporary Redirect. Redirecting to {location}".encode(),
                    send_body=send_body,
                    headers={
                        "Location": location,
                        "X-Repo-Commit": commit,
                        "X-Linked-Etag": f'"{etag}"',
                        "X-Linked-Size": str(len(body)),
                    },
                )
                return

            headers = {"ETag": f'"{etag}"', "X-Repo-Commit": commit, "Accept-Ranges": "bytes"}
            status = 200
            ranged = _RANGE_RE.fullmatch(self.headers.get("Range", "").strip())
            if ranged and send_body:
                # Like the Hub's storage, answer a byte range with 206 and the slice (safetensors headers).
                start = int(ranged.group(1))
                end = min(int(ranged.group(2) or len(body) - 1), len(body) - 1)
                headers["Content-Range"] = f"bytes {start}-{end}/{len(body)}"
                body, status = body[start : end + 1], 206
            self._send(
                status,
                body,
                send_body=send_body,
                headers=headers,
                content_type="text/plain; charset=utf-8",
                trickle_s=repo.trickle_s,
            )

    return Handler


@contextlib.contextmanager
def refused_endpoint() -> Iterator[str]:
    """Yield a base URL on 127.0.0.1 where nothing listens: connecting to it is refused at once.

    The port is held bound (but not listening) for the duration, so no other process can take it meanwhile.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        yield f"http://127.0.0.1:{port}"
    finally:
        sock.close()
