"""Webhooks over real HTTP: uvicorn on 127.0.0.1 serves webhook_app, httpx sends requests.

Each test runs the ASGI server, a serving Worker and the HTTP client on the
test's event loop.  Waits are conditions with a deadline (``wait_until``);
the only wall-clock waiting is the server's and the worker's own polling.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import pytest
import uvicorn
from _drive import check_cold_replay

from durasim.runtime import (
    HookNotFoundError,
    Run,
    Webhook,
    WebhookRequest,
    Worker,
    create_hook,
    create_webhook,
    get_workflow_metadata,
    resume_hook,
    start,
    step,
    webhook_app,
    workflow,
)
from durasim.runtime._webhooks import response_stream, webhook_metadata
from durasim.runtime.serialization import deserialize, serialize
from durasim.worlds import Event, EventType, HookStatus, World

DEADLINE = 20.0

#: url paths announced by running workflows, by run id (the steps run in this process).
ANNOUNCED: dict[str, str] = {}


@pytest.fixture(autouse=True)
def _forget_announcements() -> None:
    """Run ids repeat across tests (counting ids): an earlier test's URL must not be read."""
    ANNOUNCED.clear()


async def wait_until(condition: Callable[[], Awaitable[bool]], what: str) -> None:
    """Poll ``condition`` until it holds; fail after :data:`DEADLINE` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE
    while not await condition():
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.005)


@contextlib.asynccontextmanager
async def http_server(app: Any) -> AsyncIterator[str]:
    """Serve ``app`` with uvicorn on a free loopback port; yields the base URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, http="h11", ws="none", lifespan="on", log_config=None)
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))

    async def started() -> bool:
        assert not task.done(), "the server stopped while starting"
        return server.started

    try:
        await wait_until(started, "the server to start")
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task
        sock.close()


@contextlib.asynccontextmanager
async def serving(world: World, **options: Any) -> AsyncIterator[httpx.AsyncClient]:
    """A worker serving ``world`` and an HTTP client of its webhook app."""
    stop = asyncio.Event()
    worker = asyncio.create_task(Worker(world).serve(stop=stop, poll=0.01))
    try:
        async with (
            http_server(webhook_app(world, **options)) as base,
            httpx.AsyncClient(base_url=base) as client,
        ):
            yield client
    finally:
        stop.set()
        await worker


async def announced(run: Run) -> str:
    """The url path the run announced, once its hook is live in the World."""

    async def live() -> bool:
        hooks = await run.world.hooks.list(run.run_id)
        return run.run_id in ANNOUNCED and any(h.status is HookStatus.ACTIVE for h in hooks)

    await wait_until(live, f"run {run.run_id} to announce its webhook")
    return ANNOUNCED[run.run_id]


async def ended(run: Run) -> Any:
    async def terminal() -> bool:
        return (await run.status()).terminal

    await wait_until(terminal, f"run {run.run_id} to end")
    events = await run.events()
    check_cold_replay(events)
    return await run.result()


async def received(run: Run) -> list[Event]:
    return [e for e in await run.events() if e.type is EventType.HOOK_RECEIVED]


@step
def announce(url_path: str) -> None:
    ANNOUNCED[get_workflow_metadata().run_id] = url_path


@workflow
async def receive_one() -> dict[str, Any]:
    webhook = create_webhook(metadata={"purpose": "test"}, methods=("POST", "put"))
    await announce(webhook.url_path)
    request = await webhook
    return {
        "method": request.method,
        "path": request.path,
        "query": request.query,
        "content_type": request.header("Content-Type"),
        "body": request.json(),
        "request_id": request.request_id,
        "url_path": webhook.url_path,
    }


async def test_accepted_webhook_answers_202_and_the_workflow_gets_the_request(
    world: World,
) -> None:
    run = await start(receive_one, world=world)
    async with serving(world, max_body_bytes=64) as client:
        url = await announced(run)
        too_big = await client.post(url, content=b"x" * 65)
        assert too_big.status_code == 413
        assert "limit" in too_big.json()["error"]

        answer = await client.put(url + "?page=2", json={"order": 7})
        assert answer.status_code == 202
        request_id = answer.json()["request_id"]
        result = await ended(run)
    assert result == {
        "method": "PUT",
        "path": url,
        "query": "page=2",
        "content_type": "application/json",
        "body": {"order": 7},
        "request_id": request_id,
        "url_path": url,
    }
    assert url.startswith("/webhooks/")
    [event] = await received(run)  # the refused 413 wrote nothing
    assert event.data["resume_id"] == request_id
    hooks = await world.hooks.list(run.run_id)
    assert [h.is_webhook for h in hooks] == [True]
    assert webhook_metadata(hooks[0]) == ("accepted", {"purpose": "test"})


@step
async def answer(request: WebhookRequest, status: int) -> bool:
    return await request.respond(
        status,
        {"Content-Type": "text/plain", "X-Echo": request.header("x-echo") or ""},
        f"hello {request.text()}",
    )


@workflow
async def echo(rounds: int) -> list[bool]:
    sent = []
    webhook = create_webhook(respond="manual")
    await announce(webhook.url_path)
    async for request in webhook:
        sent.append(await answer(request, 201))
        sent.append(await answer(request, 500))  # too late: the first response stands
        if len(sent) == 2 * rounds:
            break
    return sent


async def test_manual_webhook_answers_with_the_response_sent_from_a_step(world: World) -> None:
    run = await start(echo, 2, world=world)
    async with serving(world) as client:
        url = await announced(run)
        first = await client.post(
            url, content=b"ada", headers={"X-Echo": "loud", "Idempotency-Key": "k1"}
        )
        assert (first.status_code, first.text) == (201, "hello ada")
        assert first.headers["x-echo"] == "loud"
        assert first.headers["content-type"] == "text/plain"
        # A retried call lands once and gets the same response.
        again = await client.post(
            url, content=b"ada", headers={"X-Echo": "loud", "Idempotency-Key": "k1"}
        )
        assert (again.status_code, again.text) == (201, "hello ada")
        assert len(await received(run)) == 1
        second = await client.post(url, content=b"bob")
        assert (second.status_code, second.text) == (201, "hello bob")
        assert await ended(run) == [True, False, True, False]
    streams = await world.streams.list(run.run_id)
    assert len([s for s in streams if s.startswith("webhook/response/")]) == 2


@workflow
async def collect(count: int) -> list[str]:
    bodies = []
    webhook = create_webhook(token="orders/7?x")
    await announce(webhook.url_path)
    async for request in webhook:
        bodies.append(request.text())
        if len(bodies) == count:
            break
    return bodies


async def test_an_idempotency_key_makes_a_retried_request_land_once(world: World) -> None:
    run = await start(collect, 2, world=world)
    async with serving(world) as client:
        url = await announced(run)
        assert url == "/webhooks/orders%2F7%3Fx"
        one = await client.post(url, content=b"first", headers={"Idempotency-Key": "abc"})
        retry = await client.post(url, content=b"first", headers={"Idempotency-Key": "abc"})
        assert one.status_code == retry.status_code == 202
        assert one.json() == retry.json()
        other = await client.post(url, content=b"second", headers={"Idempotency-Key": "def"})
        assert other.status_code == 202
        assert other.json() != one.json()
        assert await ended(run) == ["first", "second"]
    events = await received(run)
    assert [e.data["resume_id"] for e in events] == [
        one.json()["request_id"],
        other.json()["request_id"],
    ]


@workflow
async def plain_hook() -> Any:
    hook = create_hook(token="plain-token")
    await announce("/webhooks/" + hook.token)
    return await hook


async def test_unknown_tokens_plain_hooks_and_other_paths_answer_404(world: World) -> None:
    run = await start(plain_hook, world=world)
    async with serving(world) as client:
        url = await announced(run)
        for path in ("/webhooks/no-such-token", url, "/webhooks/", "/elsewhere"):
            response = await client.post(path, content=b"x")
            assert response.status_code == 404, path
            assert response.headers["content-type"] == "application/json"
            assert "error" in response.json()
        assert await received(run) == []  # nothing was written
        await resume_hook("plain-token", "by hand", world=world)
        assert await ended(run) == "by hand"
        # The run ended: its hooks are released, their URLs are gone.
        gone = await client.post(url, content=b"x")
        assert gone.status_code == 404


@workflow
async def never_answers() -> str:
    webhook = create_webhook(respond="manual", methods=("POST", "PATCH"))
    await announce(webhook.url_path)
    request = await webhook
    return request.method


async def test_a_run_that_ends_without_responding_answers_502(world: World) -> None:
    run = await start(never_answers, world=world)
    async with serving(world) as client:
        url = await announced(run)
        response = await client.patch(url, content=b"{}")
        assert response.status_code == 502
        assert response.json()["error"] == "the run ended without responding"
        assert await ended(run) == "PATCH"


async def test_no_response_in_time_answers_504_and_the_request_is_kept(world: World) -> None:
    run = await start(never_answers, world=world)
    stop = asyncio.Event()
    worker = asyncio.create_task(Worker(world).serve(stop=stop, poll=0.01))
    url = await announced(run)
    stop.set()
    await worker  # nobody serves the run now
    app = webhook_app(world, response_timeout=0.2)
    async with http_server(app) as base, httpx.AsyncClient(base_url=base) as client:
        response = await client.post(url, content=b"late")
    assert response.status_code == 504
    [event] = await received(run)
    assert event.data["resume_id"] == response.json()["request_id"]
    await Worker(world).drain()
    assert await ended(run) == "POST"


def test_a_webhook_request_crosses_boundaries_as_itself() -> None:
    request = WebhookRequest(
        request_id="whr_1",
        run_id="wrun_1",
        token="t",
        method="POST",
        path="/webhooks/t",
        query="",
        headers=(("content-type", "application/json"), ("x-a", "1")),
        body=b'{"a": [1, 2]}',
    )
    copy = deserialize(serialize(request))
    assert copy == request
    assert copy.header("X-A") == "1"
    assert copy.header("missing", "none") == "none"
    assert copy.json() == {"a": [1, 2]}


async def test_respond_refuses_bad_responses_and_keeps_the_first(world: World) -> None:
    run = await start(receive_one, world=world)
    request = WebhookRequest(
        request_id="whr_2",
        run_id=run.run_id,
        token="t",
        method="POST",
        path="/webhooks/t",
        query="",
        headers=(),
        body=b"",
    )
    with pytest.raises(ValueError, match="100-599"):
        await request.respond(99, world=world)
    with pytest.raises(ValueError, match="CR, LF"):
        await request.respond(200, {"x-a": "1\r\nSet-Cookie: evil"}, world=world)
    with pytest.raises(TypeError, match="bytes or str"):
        await request.respond(200, body=bytearray(b"x"), world=world)  # type: ignore[arg-type]
    assert await world.streams.list(run.run_id) == ()
    assert await request.respond(204, world=world) is True
    assert await request.respond(200, world=world) is False
    page = await world.streams.read(run.run_id, response_stream("whr_2"))
    assert [deserialize(c.data)["status"] for c in page.chunks] == [204]


def test_create_webhook_is_for_workflow_code() -> None:
    with pytest.raises(ValueError, match="respond mode"):
        create_webhook(respond="later")  # type: ignore[arg-type]
    with pytest.raises(HookNotFoundError, match="outside workflow code"):
        create_webhook()
    assert Webhook.__name__ == "Webhook"


# -- hostile and careless callers -----------------------------------------------------


@workflow
async def receive_posts(count: int) -> list[str]:
    webhook = create_webhook()  # POST only
    await announce(webhook.url_path)
    bodies = []
    async for request in webhook:
        bodies.append(request.text())
        if len(bodies) == count:
            return bodies
    return bodies


async def test_only_the_methods_a_webhook_allows_reach_it(world: World) -> None:
    run = await start(receive_posts, 1, world=world)
    async with serving(world) as client:
        url = await announced(run)
        for method in ("GET", "HEAD", "OPTIONS", "PUT", "PATCH", "DELETE", "BREW"):
            response = await client.request(method, url, content=b"scan")
            assert response.status_code == 405, method
            assert response.headers["allow"] == "POST"
            if method != "HEAD":
                assert "accepts POST; nothing was written" in response.json()["error"]
        assert await received(run) == []
        assert (await client.post(url, content=b"real")).status_code == 202
        assert await ended(run) == ["real"]
    [event] = await received(run)
    assert deserialize(event.data["payload"]).method == "POST"


async def test_allowed_methods_are_checked_where_the_webhook_is_made(world: World) -> None:
    run = await start(receive_one, world=world)  # POST and PUT
    async with serving(world) as client:
        url = await announced(run)
        refused = await client.get(url)
        assert refused.status_code == 405
        assert refused.headers["allow"] == "POST, PUT"
        assert (await client.put(url, json={"order": 1})).status_code == 202
        assert (await ended(run))["method"] == "PUT"


@workflow
async def bad_methods(which: str) -> str:
    try:
        create_webhook(methods={"string": "POST", "empty": (), "space": ("GE T",)}[which])
    except (TypeError, ValueError) as exc:
        return type(exc).__name__ + ": " + str(exc)
    return "accepted"


@pytest.mark.parametrize(
    ("which", "message"),
    [
        ("string", "TypeError: create_webhook(methods='POST'): pass a sequence"),
        ("empty", "ValueError: create_webhook(methods=()) allows no method"),
        ("space", "ValueError: create_webhook(methods=...): 'GE T' is not an HTTP method"),
    ],
)
async def test_create_webhook_refuses_bad_methods_at_the_call(
    world: World, which: str, message: str
) -> None:
    run = await start(bad_methods, which, world=world)
    await Worker(world).drain()
    assert (await run.result()).startswith(message)


async def test_a_reused_idempotency_key_with_another_body_is_refused(world: World) -> None:
    run = await start(receive_posts, 2, world=world)
    async with serving(world) as client:
        url = await announced(run)
        first = await client.post(url, content=b"first", headers={"Idempotency-Key": "k1"})
        assert first.status_code == 202
        for method, body, query in (("POST", b"second", ""), ("POST", b"first", "?x=1")):
            reused = await client.request(
                method, url + query, content=body, headers={"Idempotency-Key": "k1"}
            )
            assert reused.status_code == 409
            assert "nothing was written" in reused.json()["error"]
            assert reused.json()["request_id"] == first.json()["request_id"]
        assert len(await received(run)) == 1
        same = await client.post(url, content=b"first", headers={"Idempotency-Key": "k1"})
        assert (same.status_code, same.json()) == (202, first.json())
        assert len(await received(run)) == 1
        other = await client.post(url, content=b"second", headers={"Idempotency-Key": "k2"})
        assert other.status_code == 202
        assert await ended(run) == ["first", "second"]


async def test_a_retry_after_the_run_ended_gets_the_original_answer(world: World) -> None:
    accepted = await start(receive_posts, 1, world=world)
    manual = await start(echo, 1, world=world)
    async with serving(world) as client:
        url = await announced(accepted)
        first = await client.post(url, content=b"once", headers={"Idempotency-Key": "k"})
        assert first.status_code == 202
        assert await ended(accepted) == ["once"]
        retry = await client.post(url, content=b"once", headers={"Idempotency-Key": "k"})
        assert (retry.status_code, retry.json()) == (202, first.json())
        other = await client.post(url, content=b"twice", headers={"Idempotency-Key": "k"})
        assert other.status_code == 409
        fresh = await client.post(url, content=b"once", headers={"Idempotency-Key": "new"})
        assert fresh.status_code == 404  # a new request to an ended run is refused
        assert (await client.post(url, content=b"once")).status_code == 404

        url = await announced(manual)
        headers = {"Idempotency-Key": "m", "X-Echo": "e"}
        answered = await client.post(url, content=b"ada", headers=headers)
        assert (answered.status_code, answered.text) == (201, "hello ada")
        assert await ended(manual) == [True, False]
        again = await client.post(url, content=b"ada", headers=headers)
        assert (again.status_code, again.text) == (201, "hello ada")
        assert again.headers["x-echo"] == "e"
    assert len(await received(accepted)) == len(await received(manual)) == 1


MALFORMED = [
    "/webhooks/%00",
    "/webhooks/a%00b",
    "/webhooks/%ff",
    "/webhooks/%c3%28",
    "/webhooks/%ed%a0%80",  # a UTF-16 surrogate, encoded
    "/webhooks/%f4%90%80%80",  # past U+10FFFF
    "/webhooks/%e2%82",  # truncated
    "/webhooks/%",
    "/webhooks/%zz",
    "/webhooks/%2e%2e",
    "/webhooks/" + "t" * 6000,
    "/webhooks/%e2%80%8b",  # a zero-width space
    "/webhooks//",
]


async def test_nul_and_malformed_tokens_answer_404(world: World) -> None:
    run = await start(receive_posts, 1, world=world)
    async with serving(world) as client:
        await announced(run)
        for path in MALFORMED:
            keys: list[dict[str, Any]] = [
                {},
                {"Idempotency-Key": "k"},
                {"Idempotency-Key": b"\xff"},
            ]
            for headers in keys:
                response = await client.post(path, content=b"x", headers=headers)
                assert response.status_code == 404, (path, response.text)
                assert "error" in response.json()
    assert await received(run) == []


async def _raw(base: str, request: bytes, *, then: bytes | None = None) -> bytes:
    """Send ``request`` over a plain socket, stall, and read the whole answer."""
    host, port = base.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(request)
        await writer.drain()
        return await asyncio.wait_for(reader.read(), DEADLINE)
    finally:
        writer.close()


async def test_a_body_that_does_not_arrive_in_time_gets_408(world: World) -> None:
    run = await start(receive_posts, 1, world=world)
    stop = asyncio.Event()
    worker = asyncio.create_task(Worker(world).serve(stop=stop, poll=0.01))
    try:
        url = await announced(run)
        app = webhook_app(world, body_timeout=0.3)
        async with http_server(app) as base:
            head = (
                f"POST {url} HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n".encode()
                + b"only part of it"
            )
            answer = await _raw(base, head)
        assert answer.startswith(b"HTTP/1.1 408 ")
        assert b"did not arrive within 0.3 s; nothing was written" in answer
        assert await received(run) == []
    finally:
        stop.set()
        await worker
