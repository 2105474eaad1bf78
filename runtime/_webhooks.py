"""Webhooks: hooks resumed by HTTP requests, through an ASGI app.

Inside workflow code, :func:`create_webhook` creates a hook marked as a webhook
(``is_webhook``) and records how its requests are answered in the hook's
metadata.  :func:`webhook_app` is an ASGI application (mount it in any ASGI
server) that turns a request to ``/webhooks/<token>`` into a
:class:`WebhookRequest` and resumes the hook with it (as :func:`resume_hook` does), so
the payload is durable before the app answers.

Two ways to answer:

- ``respond="accepted"``: ``202`` with the request id, as soon as the request
  is in the log.
- ``respond="manual"``: the app waits until the workflow answers from a step
  (``await request.respond(status, headers, body)``).  The response travels
  outside the log, through a World stream of the hook's run named after the
  request id; the app polls it until ``response_timeout`` (then ``504``).

A request with an ``Idempotency-Key`` header gets a request id derived from the
token and the key, used as the ``resume_id``: a retried HTTP call lands once,
and in manual mode reads the same response.  The same key with another request
(method, query or body) is refused with ``409`` and writes nothing; a retry
after the run ended still gets the original answer (the app finds the hook that
held the token last, ``hooks.last_by_token``).

Only the methods the webhook allows reach it (``POST`` unless
``create_webhook(methods=...)`` says otherwise); others get ``405`` with an
``Allow`` header.  The body is read within ``body_timeout`` seconds (else
``408``); deadlines for headers and idle connections belong to the server
(docs/webhooks.md).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import secrets
import urllib.parse
from collections.abc import Awaitable, Callable, Generator, Iterable, Mapping
from typing import Any, Literal

import attrs

from durasim.worlds import (
    EntityConflict,
    Event,
    EventRequest,
    HookNotFound,
    HookRecord,
    InvalidRequest,
    RunExpired,
    RunNotFound,
    StreamClosed,
    World,
    WorldError,
)

from ._hooks import Hook, HookConflict, _make_hook
from ._metadata import step_world
from ._wake import enqueue_wake
from .serialization import SerializationError, deserialize, serializable, serialize

__all__ = [
    "DEFAULT_METHODS",
    "MAX_BODY_BYTES",
    "URL_PREFIX",
    "Webhook",
    "WebhookRequest",
    "create_webhook",
    "response_stream",
    "webhook_app",
    "webhook_metadata",
    "webhook_methods",
    "webhook_path",
]

#: The path the app serves hooks under, relative to where it is mounted.
URL_PREFIX = "/webhooks/"

#: Default largest request body the app accepts (larger: ``413``).
MAX_BODY_BYTES = 1024 * 1024

#: The methods a webhook accepts unless ``create_webhook(methods=...)`` says otherwise.
DEFAULT_METHODS: tuple[str, ...] = ("POST",)

# An HTTP method is a token (RFC 9110, 5.6.2).
_METHOD = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,32}")

RespondMode = Literal["accepted", "manual"]
_MODES: tuple[RespondMode, ...] = ("accepted", "manual")

# The hook's metadata is a plain dict that any process can decode; the user's
# metadata rides inside it already serialized, so a webhook server that lacks
# the user's classes still reads the respond mode.
_MARK = "durasim.webhook"

# Characters a path segment carries as they are (RFC 3986 pchar); others are escaped.
_PATH_SAFE = "-._~!$&'()*+,;=:@"

# Headers the app computes itself; a workflow's response cannot set them.
_FRAMING_HEADERS = frozenset({"content-length", "transfer-encoding"})

Scope = Mapping[str, Any]
Receive = Callable[[], Awaitable[Mapping[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


def response_stream(request_id: str) -> str:
    """The name of the World stream (in the hook's run) that carries a request's response."""
    return f"webhook/response/{request_id}"


@serializable(class_id="class//durasim//WebhookRequest")
@attrs.frozen(kw_only=True)
class WebhookRequest:
    """One HTTP request to a webhook: the payload the workflow receives.

    Attributes:
        request_id: unique per request (derived from the ``Idempotency-Key``
            header when there is one); it is the ``resume_id`` in the log.
        run_id: the run the webhook belongs to.
        token: the webhook's token.
        method: ``"POST"``, ``"PUT"`` ...
        path: the request path as the app saw it (``/webhooks/<token>``).
        query: the raw query string, without ``?`` (``""`` when there is none).
        headers: ``(name, value)`` pairs in request order, names lower-case.
        body: the request body.
    """

    request_id: str
    run_id: str
    token: str
    method: str
    path: str
    query: str
    headers: tuple[tuple[str, str], ...]
    body: bytes

    def header(self, name: str, default: str | None = None) -> str | None:
        """The first value of header ``name`` (any case), or ``default``."""
        wanted = name.lower()
        return next((value for key, value in self.headers if key == wanted), default)

    def text(self, encoding: str = "utf-8") -> str:
        """The body decoded as text."""
        return self.body.decode(encoding)

    def json(self) -> Any:
        """The body parsed as JSON."""
        return json.loads(self.body)

    async def respond(
        self,
        status: int = 200,
        headers: Mapping[str, str] | Iterable[tuple[str, str]] = (),
        body: bytes | str = b"",
        *,
        world: World | None = None,
    ) -> bool:
        """Send the HTTP response of a ``respond="manual"`` webhook; from a step body.

        The first response of a request wins: a later call (a retried step, a
        second responder) changes nothing and returns False.  A request of an
        ``"accepted"`` webhook was answered already; its response is stored and
        never read.

        Args:
            status: the HTTP status, 100-599.
            headers: names and values (``Content-Length`` is computed by the app).
            body: bytes, or text sent as UTF-8.
            world: the World of the hook's run; by default the running step's.

        Returns:
            Whether this call's response is the one the caller gets.
        """
        chunk = _encode_response(status, headers, body)
        world = world if world is not None else step_world()
        name = response_stream(self.request_id)
        info = await world.streams.info(self.run_id, name)
        if info.closed or info.tail_index >= 0:
            return False
        try:
            await world.streams.write(self.run_id, name, chunk)
        except StreamClosed:
            return False
        await world.streams.close(self.run_id, name)
        return True


class Webhook:
    """A hook that HTTP requests resume; in workflow code, used like a :class:`Hook`.

    Awaiting it gives the next :class:`WebhookRequest`; ``async for`` gives
    them all; ``with webhook:`` disposes it on exit (its URL then answers 404).
    """

    def __init__(self, hook: Hook, *, respond: RespondMode) -> None:
        self.hook = hook
        self.respond: RespondMode = respond

    @property
    def token(self) -> str:
        """The token in the webhook's URL."""
        return self.hook.token

    @property
    def hook_id(self) -> str:
        """The hook's id in the run (``hook/<function>#<n>``, or ``hook=<digest>#<n>``)."""
        return self.hook.hook_id

    @property
    def url_path(self) -> str:
        """``/webhooks/<token>``: the path to request, relative to where the app is mounted."""
        return webhook_path(self.token)

    def __await__(self) -> Generator[Any, None, WebhookRequest]:
        request: WebhookRequest = yield from self.hook.__await__()
        return request

    def __aiter__(self) -> Webhook:
        return self

    async def __anext__(self) -> WebhookRequest:
        request: WebhookRequest = await self.hook.__anext__()
        return request

    async def conflict(self) -> HookConflict | None:
        """Wait until the log says whether this webhook holds its token; the conflict, if any."""
        return await self.hook.conflict()

    def dispose(self) -> None:
        """Free the token now (journaled); its URL answers 404 from then on."""
        self.hook.dispose()

    def __enter__(self) -> Webhook:
        return self

    def __exit__(self, *exc: object) -> None:
        self.dispose()

    async def __aenter__(self) -> Webhook:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.dispose()

    def __repr__(self) -> str:
        return f"Webhook({self.hook_id}, url_path={self.url_path!r}, respond={self.respond!r})"


def create_webhook(
    *,
    respond: RespondMode = "accepted",
    token: str | None = None,
    metadata: Any = None,
    methods: Iterable[str] = DEFAULT_METHODS,
) -> Webhook:
    """A new webhook of the running workflow (workflow code only).

    Args:
        respond: ``"accepted"`` (the app answers ``202`` once the request is
            durable) or ``"manual"`` (the app waits for
            :meth:`WebhookRequest.respond` from a step).
        token: the token in the URL; ``None`` generates an unguessable, URL-safe
            one.  A chosen token is escaped in :attr:`Webhook.url_path` as needed.
        metadata: any serializable value, stored with the hook.
        methods: the HTTP methods that resume the webhook (default ``("POST",)``);
            any other method gets ``405`` and writes nothing.  A link scanner's
            ``GET`` must not inject a request: allow ``GET`` only on purpose.
    """
    allowed = _check_methods(methods)
    if respond not in _MODES:
        raise ValueError(
            f"create_webhook(respond={respond!r}) is not a respond mode: use 'accepted' or 'manual'"
        )
    wrapped: dict[str, Any] = {
        _MARK: 1,
        "respond": respond,
        "metadata": None if metadata is None else serialize(metadata, root="webhook metadata"),
    }
    if allowed != DEFAULT_METHODS:  # absent: the default (older webhooks read the same)
        wrapped["methods"] = list(allowed)
    return Webhook(_make_hook("create_webhook()", token, wrapped, is_webhook=True), respond=respond)


def _check_methods(methods: Iterable[str]) -> tuple[str, ...]:
    if isinstance(methods, (str, bytes)):
        raise TypeError(
            f"create_webhook(methods={methods!r}): pass a sequence of methods, e.g. ('POST',)"
        )
    allowed: list[str] = []
    for method in methods:
        if not isinstance(method, str) or not _METHOD.fullmatch(method):
            raise ValueError(
                f"create_webhook(methods=...): {method!r} is not an HTTP method (a token of "
                "letters, digits and !#$%&'*+.^_`|~-, at most 32 characters)"
            )
        if method.upper() not in allowed:
            allowed.append(method.upper())
    if not allowed:
        raise ValueError("create_webhook(methods=()) allows no method: pass at least one")
    return tuple(allowed)


def _unwrap(hook: HookRecord) -> dict[str, Any] | None:
    try:
        wrapped = deserialize(hook.metadata) if hook.metadata is not None else None
    except SerializationError:
        wrapped = None
    return wrapped if isinstance(wrapped, dict) and wrapped.get(_MARK) == 1 else None


def webhook_methods(hook: HookRecord) -> tuple[str, ...]:
    """The HTTP methods a webhook's World entity accepts."""
    wrapped = _unwrap(hook)
    methods = wrapped.get("methods") if wrapped is not None else None
    if isinstance(methods, list) and methods and all(isinstance(m, str) for m in methods):
        return tuple(methods)
    return DEFAULT_METHODS


def webhook_metadata(hook: HookRecord) -> tuple[RespondMode, Any]:
    """The respond mode and the user's metadata of a webhook's World entity."""
    wrapped = _unwrap(hook)
    if wrapped is None:
        return "accepted", None
    respond = wrapped.get("respond")
    data = wrapped.get("metadata")
    return (
        respond if respond in _MODES else "accepted",
        deserialize(data) if isinstance(data, bytes) else None,
    )


def _encode_response(
    status: int, headers: Mapping[str, str] | Iterable[tuple[str, str]], body: bytes | str
) -> bytes:
    if isinstance(status, bool) or not isinstance(status, int) or not 100 <= status <= 599:
        raise ValueError(f"webhook response status {status!r} is not an HTTP status: use 100-599")
    pairs = list(headers.items()) if isinstance(headers, Mapping) else list(headers)
    checked: list[list[str]] = []
    for pair in pairs:
        name, value = pair
        if not isinstance(name, str) or not isinstance(value, str):
            raise TypeError(f"webhook response header {pair!r}: name and value must be str")
        if any(ch in name + value for ch in "\r\n\0") or not name or ":" in name:
            raise ValueError(
                f"webhook response header {name!r}: names and values may not hold CR, LF or NUL "
                "and names no ':': send one header per pair"
            )
        if name.lower() not in _FRAMING_HEADERS:
            checked.append([name, value])
    data = body.encode("utf-8") if isinstance(body, str) else body
    if not isinstance(data, bytes):
        raise TypeError(f"webhook response body is {type(body).__name__}: pass bytes or str")
    return serialize({"status": status, "headers": checked, "body": data}, root="response")


@attrs.frozen(kw_only=True)
class _Answer:
    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes


def _json_answer(status: int, **fields: Any) -> _Answer:
    return _Answer(
        status=status,
        headers=(("content-type", "application/json"),),
        body=json.dumps(fields, sort_keys=True).encode(),
    )


def webhook_app(
    world: World,
    *,
    response_timeout: float = 30.0,
    poll_interval: float = 0.02,
    max_body_bytes: int = MAX_BODY_BYTES,
    body_timeout: float = 30.0,
) -> Callable[[Scope, Receive, Send], Awaitable[None]]:
    """An ASGI app that resumes webhooks from HTTP requests to ``/webhooks/<token>``.

    Answers: ``202`` with ``{"request_id": ...}`` (``respond="accepted"``), or
    the workflow's response (``"manual"``); ``404`` when no live webhook holds
    the token (and for a token no World could hold: NUL, malformed); ``405``
    (with ``Allow``) for a method the webhook does not accept; ``408`` when the
    body did not arrive within ``body_timeout``; ``409`` when an
    ``Idempotency-Key`` already carried another request; ``413`` for a body
    over ``max_body_bytes``; ``504`` when a manual webhook did not answer
    within ``response_timeout`` seconds (the request is in the log all the
    same); ``502`` when its run ended without answering; ``503`` when the
    World failed.  Only ``202``, ``502``-``504`` and the workflow's answers
    follow a write.  Errors are JSON ``{"error": ...}``.  ``lifespan`` events
    are acknowledged.

    Args:
        world: the World the webhooks' runs live in.
        response_timeout: how long (real time) a manual webhook's request waits.
        poll_interval: how often (real time) the response stream is read.
        max_body_bytes: the largest request body accepted.
        body_timeout: how long (real time) the whole body may take to arrive.
    """
    return _WebhookApp(
        world=world,
        response_timeout=response_timeout,
        poll_interval=poll_interval,
        max_body_bytes=max_body_bytes,
        body_timeout=body_timeout,
    )


class _BodyTooLarge(Exception):
    pass


class _Disconnected(Exception):
    pass


def _addressable(token: str) -> bool:
    """Whether a World could hold ``token``: text without NUL that UTF-8 can carry."""
    if not token or "\x00" in token:
        return False
    try:
        token.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _same_request(earlier: Event, request: WebhookRequest) -> bool:
    """Whether the recorded request is ``request`` again (method, query and body)."""
    try:
        recorded = deserialize(earlier.data["payload"])
    except (KeyError, SerializationError):
        return False
    return isinstance(recorded, WebhookRequest) and (
        recorded.method,
        recorded.query,
        recorded.body,
    ) == (request.method, request.query, request.body)


_GONE = (HookNotFound, RunExpired, RunNotFound, EntityConflict, InvalidRequest)


@attrs.define(eq=False, kw_only=True)
class _WebhookApp:
    world: World
    response_timeout: float
    poll_interval: float
    max_body_bytes: int
    body_timeout: float

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            await _lifespan(receive, send)
        elif kind == "http":
            try:
                answer = await self._answer(scope, receive)
            except _Disconnected:
                return
            await _send(send, answer)
        elif kind == "websocket":
            await send({"type": "websocket.close", "code": 1003})
        else:
            raise ValueError(f"webhook_app got an ASGI {kind!r} scope: it serves 'http' only")

    async def _find(self, token: str, keyed: bool) -> tuple[HookRecord | None, bool]:
        """The webhook holding ``token`` and whether it is live.

        A keyed request to a token no live hook holds may be the retry of one
        delivered before the run ended: then the hook that held it last.
        """
        try:
            return await self.world.hooks.get_by_token(token), True
        except (HookNotFound, InvalidRequest):
            pass
        last = getattr(self.world.hooks, "last_by_token", None)
        if not keyed or last is None:
            return None, False
        try:
            found: HookRecord = await last(token)
        except (HookNotFound, InvalidRequest):
            return None, False
        return found, False

    async def _answer(self, scope: Scope, receive: Receive) -> _Answer:
        path = str(scope["path"])
        root = str(scope.get("root_path", ""))
        if root and path.startswith(root):
            path = path[len(root) :]
        token = path[len(URL_PREFIX) :] if path.startswith(URL_PREFIX) else ""
        if not token:
            return _json_answer(404, error=f"no webhook here: request {URL_PREFIX}<token>")
        if not _addressable(token):
            return _json_answer(404, error="no live webhook has this URL")
        headers = tuple(
            (bytes(name).decode("latin-1").lower(), bytes(value).decode("latin-1"))
            for name, value in scope.get("headers", ())
        )
        key = next((value for name, value in headers if name == "idempotency-key"), None)
        try:
            hook, live = await self._find(token, key is not None)
        except WorldError as exc:
            return _json_answer(503, error=f"the World failed: {exc}")
        if hook is None or not hook.is_webhook:
            return _json_answer(404, error="no live webhook has this URL")
        method = str(scope.get("method", "GET"))
        methods = webhook_methods(hook)
        if method not in methods:
            answer = _json_answer(
                405, error=f"this webhook accepts {', '.join(methods)}; nothing was written"
            )
            return attrs.evolve(answer, headers=(*answer.headers, ("allow", ", ".join(methods))))
        try:
            body = await asyncio.wait_for(self._read_body(headers, receive), self.body_timeout)
        except _BodyTooLarge:
            return _json_answer(
                413, error=f"the request body is over the limit of {self.max_body_bytes} bytes"
            )
        except TimeoutError:
            answer = _json_answer(
                408,
                error=f"the request body did not arrive within {self.body_timeout:g} s; "
                "nothing was written",
            )
            return attrs.evolve(answer, headers=(*answer.headers, ("connection", "close")))
        request = WebhookRequest(
            request_id=_request_id(token, key),
            run_id=hook.run_id,
            token=token,
            method=method,
            path=path,
            query=bytes(scope.get("query_string", b"")).decode("latin-1"),
            headers=headers,
            body=body,
        )
        respond, _ = webhook_metadata(hook)
        try:
            landed = await self._deliver(hook, request, live=live)
        except _GONE:
            return _json_answer(404, error="no live webhook has this URL")
        except WorldError as exc:
            return _json_answer(
                503, error=f"the World failed: {exc}", request_id=request.request_id
            )
        if not landed:
            return _json_answer(
                409,
                error="this Idempotency-Key was used for another request (method, query or "
                "body differ); nothing was written: use a new key for a new request",
                request_id=request.request_id,
            )
        try:
            if respond == "accepted":
                return _json_answer(202, request_id=request.request_id)
            return await self._wait_response(request)
        except WorldError as exc:
            return _json_answer(
                503, error=f"the World failed: {exc}", request_id=request.request_id
            )

    async def _deliver(self, hook: HookRecord, request: WebhookRequest, *, live: bool) -> bool:
        """Record ``request`` (once per request id) and wake its run; False: another
        request holds the id and nothing was written.

        Raises:
            HookNotFound, RunExpired ...: the webhook is gone (and this is no retry).
        """
        data = serialize(request, root="hook payload")
        written = await self.world.events.create(
            hook.run_id,
            EventRequest.of(
                "hook_received", hook.hook_id, payload=data, resume_id=request.request_id
            ),
        )
        event = written.event
        assert event is not None
        if written.allocated == 0 and not _same_request(event, request):
            return False
        if live or written.allocated:
            key = f"hook:{hook.run_id}:{event.seq}"
            await enqueue_wake(self.world, hook.run_id, key=key, seq=event.seq)
        return True

    async def _read_body(self, headers: tuple[tuple[str, str], ...], receive: Receive) -> bytes:
        declared = next((value for name, value in headers if name == "content-length"), None)
        if declared is not None and declared.isdigit() and int(declared) > self.max_body_bytes:
            raise _BodyTooLarge
        parts: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise _Disconnected
            part = bytes(message.get("body", b""))
            size += len(part)
            if size > self.max_body_bytes:
                raise _BodyTooLarge
            parts.append(part)
            if not message.get("more_body", False):
                return b"".join(parts)

    async def _wait_response(self, request: WebhookRequest) -> _Answer:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.response_timeout
        name = response_stream(request.request_id)
        while True:
            answer = await self._read_response(request.run_id, name)
            if answer is not None:
                return answer
            if (await self.world.runs.get(request.run_id)).status.terminal:
                # The response may have landed between the two reads.
                answer = await self._read_response(request.run_id, name)
                return answer or _json_answer(
                    502, error="the run ended without responding", request_id=request.request_id
                )
            if loop.time() >= deadline:
                return _json_answer(
                    504,
                    error=f"the workflow did not respond within {self.response_timeout} s; "
                    "the request was delivered",
                    request_id=request.request_id,
                )
            await asyncio.sleep(min(self.poll_interval, max(0.0, deadline - loop.time())))

    async def _read_response(self, run_id: str, name: str) -> _Answer | None:
        page = await self.world.streams.read(run_id, name, start=0, limit=1)
        if not page.chunks:
            return None
        data = deserialize(page.chunks[0].data)
        return _Answer(
            status=int(data["status"]),
            headers=tuple((str(k), str(v)) for k, v in data["headers"]),
            body=bytes(data["body"]),
        )


def _request_id(token: str, idempotency_key: str | None) -> str:
    if idempotency_key is None:
        return "whr_" + secrets.token_hex(16)
    digest = hashlib.sha256(f"{token}\n{idempotency_key}".encode()).hexdigest()
    return "whr_" + digest[:32]


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def _send(send: Send, answer: _Answer) -> None:
    headers = [(name.encode("latin-1"), value.encode("latin-1")) for name, value in answer.headers]
    headers.append((b"content-length", str(len(answer.body)).encode()))
    await send({"type": "http.response.start", "status": answer.status, "headers": headers})
    await send({"type": "http.response.body", "body": answer.body})


def webhook_path(token: str) -> str:
    """``/webhooks/<token>`` (escaped): the path a webhook with ``token`` is resumed at."""
    return URL_PREFIX + urllib.parse.quote(token, safe=_PATH_SAFE)
