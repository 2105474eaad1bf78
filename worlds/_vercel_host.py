"""The Node side of the Vercel bridge: installing a World package and talking to its host.

:func:`install_vercel_package` puts a Vercel World package (``@workflow/world-local@4.4.1``, or
a local package directory) into a cache directory with npm, once; later runs use the
cache offline.  :class:`NodeHost` starts ``node vercel_host.mjs`` (shipped beside this
module) for ONE World and exchanges JSON lines with it: many requests in flight, bytes
and dates carried losslessly, each request stamped with durasim's clock so the Node
process's ``Date`` follows it (docs/vercel.md).
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import contextlib
import hashlib
import itertools
import json
import os
import re
import shutil
import subprocess
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import attrs

from ._errors import WorldError
from ._setup import FactoryError
from ._time import Clock

__all__ = [
    "HOST_SCRIPT",
    "InstalledPackage",
    "NodeHost",
    "NodeMissing",
    "VercelCallError",
    "cache_root",
    "install_vercel_package",
    "require_node",
]

#: The host program, shipped as package data beside this module.
HOST_SCRIPT = Path(__file__).with_name("vercel_host.mjs")

_SPEC = re.compile(r"^(?P<name>(@[a-z0-9][\w.-]*/)?[a-z0-9][\w.-]*)(@(?P<version>[\w.+-]+))?$")


class NodeMissing(FactoryError):
    """Node.js (or npm) is not on PATH: the Vercel bridge cannot start."""


class VercelCallError(WorldError):
    """An error the Vercel World (or its host) raised, as the host described it.

    Attributes:
        name: the JavaScript error's class name (``EntityConflictError``).
        status: its HTTP-like status, when it carries one.
        retry_after: its ``retryAfter`` (seconds or a date), when it carries one.
    """

    def __init__(self, name: str, message: str, status: Any = None, retry_after: Any = None):
        super().__init__(f"{name}: {message}")
        self.name = name
        self.message = message
        self.status = status
        self.retry_after = retry_after


def require_node() -> str:
    """The path of ``node``; :class:`NodeMissing` (one line saying what to install) if absent."""
    node = shutil.which("node")
    if node is None or shutil.which("npm") is None:
        raise NodeMissing(
            "durasim conformance --vercel needs Node.js 20 or newer and npm on PATH: "
            "install them (https://nodejs.org/, or your package manager's nodejs and npm)"
        )
    return node


def cache_root() -> Path:
    """Where installed packages are kept: ``$DURASIM_VERCEL_CACHE`` or ~/.cache/durasim-vercel."""
    configured = os.environ.get("DURASIM_VERCEL_CACHE")
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "durasim-vercel"


@attrs.frozen
class InstalledPackage:
    """A World package ready for the host.

    Attributes:
        name: the package name (``@workflow/world-local``).
        version: the installed version (read from its package.json).
        directory: the directory whose ``node_modules`` holds it.
    """

    name: str
    version: str
    directory: Path

    @property
    def label(self) -> str:
        """``@workflow/world-local@4.4.1``."""
        return f"{self.name}@{self.version}"


def _installed_version(directory: Path, name: str) -> str | None:
    manifest = directory / "node_modules" / name / "package.json"
    try:
        version = json.loads(manifest.read_text())["version"]
    except (OSError, ValueError, KeyError):
        return None
    return str(version)


def _npm(args: list[str], cwd: Path) -> str:
    done = subprocess.run(  # noqa: S603 -- fixed program, arguments from the caller's spec
        ["npm", *args],  # noqa: S607 -- npm from PATH, checked by require_node
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    if done.returncode:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise FactoryError(f"npm {' '.join(args)} failed: {' / '.join(tail)}")
    return done.stdout


def _local_package(path: Path, root: Path) -> InstalledPackage:
    manifest = path / "package.json"
    try:
        data = json.loads(manifest.read_text())
        name, version = str(data["name"]), str(data.get("version", "0.0.0"))
    except (OSError, ValueError, KeyError) as exc:
        raise FactoryError(
            f"{path} is not a World package: it needs a package.json with a name ({exc})"
        ) from exc
    digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
    directory = root / f"local-{digest}"
    link = directory / "node_modules" / name
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(path.resolve(), target_is_directory=True)
    (directory / "package.json").write_text('{"private": true}\n')
    return InstalledPackage(name=name, version=version, directory=directory)


def install_vercel_package(spec: str, *, root: Path | None = None) -> InstalledPackage:
    """Install ``spec`` (``NAME[@VERSION]`` or a package directory) into the cache, once.

    A pinned version already in the cache is used offline.  Without a version the
    registry names the newest (``latest``); if it cannot be reached, the newest
    cached install of the package is used.

    Raises:
        NodeMissing: Node.js or npm is not on PATH.
        FactoryError: the spec is malformed or npm failed (its last lines say why).
    """
    require_node()
    root = root or cache_root()
    root.mkdir(parents=True, exist_ok=True)
    path = Path(spec).expanduser()
    if spec.startswith((".", "/", "~")) or path.is_dir():
        return _local_package(path, root)
    match = _SPEC.match(spec)
    if match is None:
        raise FactoryError(
            f"{spec!r} is not a package: write NAME[@VERSION] "
            "(@workflow/world-local@4.4.1) or a path to a package directory"
        )
    name, version = match["name"], match["version"]
    if version is None:
        try:
            version = _npm(["view", name, "version"], root).strip().splitlines()[-1]
        except (FactoryError, IndexError, subprocess.TimeoutExpired):
            cached = sorted(root.glob(name.replace("/", "+") + "@*"))
            for directory in reversed(cached):
                found = _installed_version(directory, name)
                if found is not None:
                    return InstalledPackage(name=name, version=found, directory=directory)
            raise
    directory = root / f"{name.replace('/', '+')}@{version}"
    found = _installed_version(directory, name)
    if found is not None:
        return InstalledPackage(name=name, version=found, directory=directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "package.json").write_text('{"private": true}\n')
    _npm(["install", "--no-audit", "--no-fund", "--loglevel=error", f"{name}@{version}"], directory)
    found = _installed_version(directory, name)
    if found is None:
        raise FactoryError(f"npm installed {name}@{version} but its package.json is missing")
    return InstalledPackage(name=name, version=found, directory=directory)


# --- values on the wire ------------------------------------------------------------


def encode(value: Any) -> Any:
    """A Python value as the host's JSON (bytes and datetimes tagged)."""
    if isinstance(value, bytes | bytearray | memoryview):
        return {"$bytes": base64.b64encode(bytes(value)).decode()}
    if isinstance(value, datetime):
        moment = value if value.tzinfo else value.replace(tzinfo=UTC)
        return {"$date": round(moment.timestamp() * 1000)}
    if isinstance(value, dict):
        return {str(k): encode(v) for k, v in value.items() if v is not _OMIT}
    if isinstance(value, list | tuple):
        return [encode(v) for v in value]
    return value


def decode(value: Any) -> Any:
    """The host's JSON as Python values (bytes, aware UTC datetimes)."""
    if isinstance(value, list):
        return [decode(v) for v in value]
    if isinstance(value, dict):
        if "$bytes" in value:
            return base64.b64decode(value["$bytes"])
        if "$date" in value:
            return datetime.fromtimestamp(value["$date"] / 1000, tz=UTC)
        if "$undefined" in value:
            return None
        return {k: decode(v) for k, v in value.items()}
    return value


class _Omit:
    """A dict value the encoder leaves out (JavaScript ``undefined``)."""


_OMIT = _Omit()


# --- the host process ----------------------------------------------------------------


class NodeHost:
    """One ``node vercel_host.mjs`` process hosting one World.

    Usable from any thread and any event loop: requests are written under a lock,
    a reader thread resolves their futures, and :meth:`call` awaits them.
    """

    def __init__(self, package: InstalledPackage, clock: Clock, *, log: Path | None = None):
        node = require_node()
        #: durasim's clock, stamped on every request (a spare host gets its World's clock).
        self.package = package
        self.clock = clock
        self._log: IO[bytes] | int = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115
        self._process = subprocess.Popen(  # noqa: S603 -- our own host script
            [node, str(HOST_SCRIPT), str(package.directory), package.name],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
        )
        #: When a list: every call made, for a plain-Node reproduction: ``now``, ``path``,
        #: ``args`` as sent, ``minted`` (the run id a ``run_created`` without one got),
        #: ``task`` (the asyncio task that called), ``start`` and ``end`` (one counter for
        #: sends and answers: calls whose spans overlap were in flight together), and
        #: ``answer`` or ``error`` (the error's class name).
        self.transcript: list[dict[str, Any]] | None = None
        self._ticks = itertools.count(1)
        self._ids = itertools.count(1)
        self._pending: dict[int, concurrent.futures.Future[Any]] = {}
        self._lock = threading.Lock()
        self._closed = False
        self._reader = threading.Thread(target=self._read, name="durasim-vercel-host", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        stdout = self._process.stdout
        assert stdout is not None
        for line in stdout:
            try:
                message = json.loads(line)
            except ValueError:
                continue
            with self._lock:
                future = self._pending.pop(message.get("id"), None)
            if future is None:
                continue
            if "error" in message:
                error = message["error"]
                future.set_exception(
                    VercelCallError(
                        str(error.get("name", "Error")),
                        str(error.get("message", "")),
                        decode(error.get("status")),
                        decode(error.get("retryAfter")),
                    )
                )
            else:
                future.set_result(decode(message.get("ok")))
        with self._lock:
            pending, self._pending = self._pending, {}
        for future in pending.values():
            future.set_exception(
                VercelCallError("HostExited", f"the Node host of {self.package.label} exited")
            )

    def submit(self, op: str, **fields: Any) -> concurrent.futures.Future[Any]:
        """Send one request; its future holds the decoded answer or a VercelCallError."""
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        now = self.clock.now()
        with self._lock:
            if self._closed:
                future.set_exception(VercelCallError("HostClosed", "the World is closed"))
                return future
            number = next(self._ids)
            self._pending[number] = future
            message = {"id": number, "now": round(now.timestamp() * 1000), "op": op}
            message.update({k: encode(v) for k, v in fields.items()})
            stdin = self._process.stdin
            assert stdin is not None
            try:
                stdin.write((json.dumps(message) + "\n").encode())
                stdin.flush()
            except (BrokenPipeError, OSError):
                self._pending.pop(number, None)
                future.set_exception(
                    VercelCallError("HostExited", f"the Node host of {self.package.label} exited")
                )
        return future

    def request(self, op: str, timeout: float = 120.0, **fields: Any) -> Any:
        """:meth:`submit` and wait (for set-up, outside any event loop)."""
        return self.submit(op, **fields).result(timeout=timeout)

    async def call(self, path: str, *args: Any) -> Any:
        """Call ``world.<path>(*args)`` in the host; the decoded answer."""
        record: dict[str, Any] | None = None
        if self.transcript is not None:
            task = asyncio.current_task()
            record = {
                "now": round(self.clock.now().timestamp() * 1000),
                "path": path,
                "args": encode(list(args)),
                "task": task.get_name() if task is not None else "",
                "start": next(self._ticks),
            }
            self.transcript.append(record)
        try:
            answer = await asyncio.wrap_future(self.submit("call", path=path, args=list(args)))
        except VercelCallError as exc:
            if record is not None:
                record.update(end=next(self._ticks), error=exc.name)
            raise
        if record is not None:
            record.update(end=next(self._ticks), answer=answer)
            if path == "events.create" and args and args[0] is None:
                event = answer.get("event") if isinstance(answer, dict) else None
                if isinstance(event, dict) and isinstance(event.get("runId"), str):
                    record["minted"] = event["runId"]
        return answer

    def close(self) -> None:
        """Ask the World to close, then end the process (idempotent)."""
        with self._lock:
            if self._closed:
                return
        with contextlib.suppress(VercelCallError, concurrent.futures.TimeoutError):
            self.request("close", timeout=30)
        with self._lock:
            self._closed = True
            stdin = self._process.stdin
            if stdin is not None:
                with contextlib.suppress(OSError):
                    stdin.close()
        try:
            self._process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        if self._process.stdout is not None:
            self._process.stdout.close()
        self._reader.join(timeout=5)
        if not isinstance(self._log, int):
            self._log.close()
