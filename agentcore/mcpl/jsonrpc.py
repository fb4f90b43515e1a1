"""A protocol-neutral JSON-RPC 2.0 peer over an abstract message transport.

Either side may send requests and notifications. The peer knows nothing about
MCPL: a request handler decides what a method means and raises `McplError`
for an error answer. What the peer guarantees:

- **One object per inbound request** (`InboundRequest`), made where it is read, with
  one task of its own, so a slow handler never blocks reading.
- **Exactly one answer per inbound request id**, on every path. Each in-flight
  request is an entry in `_inflight`; whoever removes the entry (the handler's
  task when it finishes, or `close()`) is the one that answers, and removal
  is a synchronous dict operation, so two answers cannot happen. The one
  request that goes unanswered is one the other side cancelled (`cancel`):
  its entry is removed with nobody to answer, as MCP's cancellation asks, and
  the request itself records why (`InboundRequest.cancel`): the one place.
- **One boundary** (`frames.error_object`) where an exception becomes an error object.
- **Bad input never kills the connection**: invalid JSON is answered -32700 with id null,
  a malformed message -32600, a response for an unknown id is logged and dropped, and a
  refused frame (`FrameError`) is answered -32700. The one exception is the transport's to
  make: a WebSocket cannot skip a frame, so it closes and says why (`TransportClosed`), and
  the log says so.
- **Batches are not supported**: a JSON array is answered with one -32600,
  id null (MCP removed batching; MCPL inherits MCP's framing).
- A concurrent duplicate of an in-flight request id is answered -32600 with
  id null, because a second answer with that id could not be told apart.
- Ids are strings or integers (not floats, booleans or null); `"params": null` is omitted.

Ordering: inbound messages are handled in arrival order by one reader task. A response
resolves its waiter synchronously in the reader, and a request's task is created after that;
asyncio runs callbacks in the order they were scheduled, so a coroutine awaiting a response
resumes before the task of any request that arrived after that response. Inbound
notifications run inline in the reader, in order; their handler must not block.
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from loguru import logger

from agentcore import redaction
from agentcore.mcpl.frames import (
    ConnectionClosed,
    EncodedParams,
    FrameError,
    FrameTooLarge,
    Params,
    RemoteError,
    RequestId,
    Transport,
    TransportClosed,
    dumps,
    encode_error,
    encode_params,
    error_object,
    loads,
    parse_problem,
    remote_error,
    valid_id,
)
from agentcore.mcpl.protocol import INTERNAL_ERROR, INVALID_REQUEST, PARSE_ERROR, McplError
from agentcore.redaction import redact

NotificationHandler = Callable[[str, Params], Awaitable[None]]

# How long close() spends sending the in-flight answers, and then waiting for
# handler tasks to finish cancelling, before it closes the transport anyway.
CLOSE_DRAIN_TIMEOUT_S = 2.0
_NO_CONTEXT = contextvars.Context()  # for `_forget`: no context copied per request in flight


@dataclass(slots=True, eq=False)
class InboundRequest:
    """One inbound request, from the moment it is read until it is answered or cancelled.

    It holds what the request is (`id`, `method`, `params`), the session it came on
    (`peer`, also the back-channel: `notify`), the task serving it, and its cancellation:
    `cancel_reason` and `cancel_event`, set by `cancel` and nowhere else. The peer's
    in-flight map holds these objects, and whoever takes one out of it answers it (see the
    module docstring); `cancel` takes it out with nobody to answer.
    """

    peer: JsonRpcPeer
    id: RequestId
    method: str
    params: Params
    task: asyncio.Task[None] | None = None
    cancel_reason: str | None = None
    """Why the other side cancelled it ("" when it gave no reason); None while it has not."""
    _cancel_event: asyncio.Event | None = None

    @property
    def cancel_event(self) -> asyncio.Event:
        """Set once the other side cancelled this request (made on first use: most never are)."""
        if self._cancel_event is None:
            self._cancel_event = asyncio.Event()
            if self.cancel_reason is not None:
                self._cancel_event.set()
        return self._cancel_event

    def cancel(self, reason: str) -> None:
        """Record why, then cancel the task: the handler sees the reason when it wakes."""
        self.cancel_reason = reason
        if self._cancel_event is not None:
            self._cancel_event.set()
        if self.task is not None:
            self.task.cancel()

    async def notify(self, method: str, params: Params = None) -> None:
        """Send a notification on the session this request came on (e.g. its chunks)."""
        await self.peer.notify(method, params)


RequestHandler = Callable[[InboundRequest], Awaitable[Any]]


class JsonRpcPeer:
    """One end of a JSON-RPC 2.0 connection over a `Transport`.

    Call `start()` to begin reading; `close()` ends the connection, answering
    in-flight inbound requests first when told to.
    """

    def __init__(
        self,
        transport: Transport,
        request_handler: RequestHandler,
        notification_handler: NotificationHandler | None = None,
        *,
        name: str = "peer",
    ) -> None:
        self._transport = transport
        self._handle_request = request_handler
        self._handle_notification = notification_handler
        self.name = name
        self._ids = itertools.count(1)
        self._pending: dict[RequestId, asyncio.Future[Any]] = {}
        self._inflight: dict[RequestId, InboundRequest] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._forget = self._tasks.discard  # one bound method for every request's task
        self._send_lock = asyncio.Lock()
        self._queued_sends = 0  # holding or waiting for `_send_lock`: no frame jumps them
        self._send_nowait: Callable[[str], bool] | None = getattr(transport, "send_nowait", None)
        self._reader: asyncio.Task[None] | None = None
        self._closing = False
        self._closed = asyncio.Event()
        self.close_reason: str | None = None

    # -- lifecycle -----------------------------------------------------------

    def start(self) -> None:
        """Start the reader task (needs a running loop)."""
        if self._reader is None:
            self._reader = asyncio.get_running_loop().create_task(
                self._read_loop(), name=f"jsonrpc-reader:{self.name}"
            )

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    @property
    def closing(self) -> bool:
        return self._closing

    async def wait_closed(self) -> None:
        await self._closed.wait()

    @property
    def inflight(self) -> frozenset[RequestId]:
        """Ids of inbound requests not yet answered."""
        return frozenset(self._inflight)

    async def close(
        self, answer_inflight_with: McplError | None = None, *, reason: str | None = None
    ) -> None:
        """Close: stop reading, answer in-flight requests, fail pending ones, close the transport.

        Every in-flight inbound request's task is cancelled and, when
        `answer_inflight_with` is given, answered with it before the
        transport closes. Outbound requests still waiting fail with
        `ConnectionClosed`. A second call waits for the first.
        """
        if self._closing:
            await self._closed.wait()
            return
        self._closing = True
        self.close_reason = reason or (
            answer_inflight_with.message if answer_inflight_with else "closed"
        )
        current = asyncio.current_task()
        try:
            # Stop reading first, so nothing is admitted after this point.
            if self._reader is not None and self._reader is not current:
                self._reader.cancel()
                await asyncio.gather(self._reader, return_exceptions=True)
            # Taking the entries out of `_inflight` before anything awaits is
            # what makes a handler that finishes now find its entry gone and
            # stay silent: we answer it instead, exactly once.
            entries = list(self._inflight.items())
            self._inflight.clear()
            cancelled = {e.task for _, e in entries if e.task is not None and e.task is not current}
            for task in cancelled:
                task.cancel()
            if answer_inflight_with is not None and entries:
                await self._answer_all(entries, answer_inflight_with.to_wire())
            # Let cancelled handlers unwind and answers already being sent go out.
            others = {t for t in self._tasks if t is not current}
            if others:
                _, running = await asyncio.wait(others, timeout=CLOSE_DRAIN_TIMEOUT_S)
                self._cancel_again(running & cancelled)
            self._fail_pending()
        finally:
            try:
                await self._transport.close()
            except Exception as exc:
                logger.warning("{}: closing the transport failed: {}", self.name, exc)
            self._fail_pending()
            self._closed.set()

    def _cancel_again(self, survivors: set[asyncio.Task[None]]) -> None:
        """Cancel again a handler still running after its cancellation: some code on its
        way swallowed the first (a bug). Logged with where it runs, to find that code."""
        for task in survivors:
            where = _awaiting(task.get_coro())
            logger.error(
                "{}: {} kept running after its session closed and it was cancelled; "
                "cancelling it again. It was at: {}",
                self.name,
                task.get_name(),
                where or "?",
            )
            task.cancel()

    def cancel(self, request_id: object, *, method: str, reason: str = "") -> bool:
        """Stop serving an inbound `method` request that the other side cancelled.

        Its task is cancelled and it gets no answer (MCP base protocol, Cancellation:
        the receiver stops processing and sends no response for it). Taking the entry
        out of `_inflight` is what silences it: neither its task nor `close()` finds
        anything left to answer. False, and nothing changes, when no `method` request
        is in flight under this id (unknown, already answered, or another method).
        """
        if not valid_id(request_id):
            return False
        entry = self._inflight.get(request_id)
        if entry is None or entry.method != method:
            return False
        del self._inflight[request_id]
        entry.cancel(reason)
        return True

    async def _answer_all(
        self, entries: list[tuple[RequestId, InboundRequest]], error: dict[str, Any]
    ) -> None:
        # Bounded: a peer that stopped reading (a full pipe) must not hold up
        # shutdown; the transport is closed next either way.
        answered = 0
        try:
            async with asyncio.timeout(CLOSE_DRAIN_TIMEOUT_S):
                for request_id, entry in entries:
                    logger.info(
                        "{}: answering in-flight {} (id {!r}) with {}: {}",
                        self.name,
                        entry.method,
                        request_id,
                        error["code"],
                        error["message"],
                    )
                    await self._send_quietly(encode_error(request_id, error))
                    answered += 1
        except TimeoutError:
            logger.warning(
                "{}: {} in-flight answers could not be sent before closing",
                self.name,
                len(entries) - answered,
            )

    def _fail_pending(self) -> None:
        for future in self._pending.values():
            if not future.done():
                future.set_exception(ConnectionClosed(f"{self.name}: {self.close_reason}"))
        self._pending.clear()

    # -- outbound ------------------------------------------------------------

    async def request(
        self, method: str, params: Params = None, *, timeout: float | None = None
    ) -> Any:
        """Send a request and wait for its result.

        Raises `RemoteError` for an error answer, `TimeoutError` after
        `timeout` seconds, `ConnectionClosed` if the connection closes first.
        """
        future = self.request_soon(method, params)
        # asyncio.timeout awaits the future directly (wait_for would add a hop), which keeps
        # the ordering promise in the module docstring; a timeout or a cancellation cancels
        # the future (and a send in progress).
        async with asyncio.timeout(timeout):
            return await future

    def request_soon(
        self, method: str, params: Params | EncodedParams = None
    ) -> asyncio.Future[Any]:
        """`request` without waiting: the request goes out now (in this loop iteration's
        write when the transport takes it at once, else from a task of its own), and the
        future resolves as `request` would return or raise. Cancel the future to stop
        waiting: a send still in progress stops, and a late answer is dropped. For a
        fan-out to many peers, with no task per request."""
        if self._closing:
            raise ConnectionClosed(f"{self.name}: {self.close_reason}")
        request_id = next(self._ids)
        if isinstance(params, EncodedParams):  # the id and method are ours: nothing to redact
            head = dumps({"jsonrpc": "2.0", "id": request_id, "method": method})
            text = f'{head[:-1]},"params":{params.json}}}'
        else:
            message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
            if params is not None:
                message["params"] = params
            text = redact(dumps(message))
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._pending[request_id] = future
        future.add_done_callback(lambda _: self._pending.pop(request_id, None))
        try:
            if self._send_now(text):
                return future
        except ConnectionClosed as exc:
            future.set_exception(exc)
            return future
        sending = loop.create_task(self._send_for(future, text), name=f"jsonrpc-send:{self.name}")
        future.add_done_callback(lambda _: sending.cancel())
        return future

    async def _send_for(self, future: asyncio.Future[Any], text: str) -> None:
        try:
            await self._send_queued(text)
        except ConnectionClosed as exc:
            if not future.done():
                future.set_exception(exc)

    async def notify(self, method: str, params: Params = None) -> None:
        """Send a notification. Raises `ConnectionClosed` once closing."""
        if self._closing:
            raise ConnectionClosed(f"{self.name}: {self.close_reason}")
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        await self._send(dumps(message))

    def send_now(self, text: str) -> bool:
        """Send an encoded notification (redacted here, unless sealed: `is_sealed`) if the
        transport takes it at once, with no coroutine; False: nothing sent, `send_encoded`
        it. `ConnectionClosed` once closing."""
        if self._closing:
            raise ConnectionClosed(f"{self.name}: {self.close_reason}")
        if self._queued_sends:  # `_send_now`'s test, before the redaction
            return False
        if text is not redaction._sealed:  # `is_sealed`, inline: no call per chunk
            text = redact(text)
        return self._send_now(text)

    async def send_encoded(self, text: str) -> None:
        """Send an encoded notification (redacted here), waiting for the transport."""
        if self._closing:
            raise ConnectionClosed(f"{self.name}: {self.close_reason}")
        await self._send(text)

    async def _send(self, text: str) -> None:
        # Every frame passes the redaction boundary: an error or a chunk may quote a key.
        text = redact(text)
        if not self._send_now(text):
            await self._send_queued(text)

    def _send_now(self, text: str) -> bool:
        """Queue a (redacted) frame the transport takes at once, while no send holds or
        waits for the lock: nothing runs between check and queueing. False: none queued."""
        send_nowait = self._send_nowait
        if send_nowait is None or self._queued_sends:
            return False
        try:
            return send_nowait(text)
        except (ConnectionError, OSError, RuntimeError) as exc:
            raise ConnectionClosed(f"{self.name}: send failed: {exc}") from exc

    async def _send_queued(self, text: str) -> None:
        """Send a (redacted) frame under the one lock: a transport sees whole frames, one
        at a time."""
        self._queued_sends += 1
        try:
            async with self._send_lock:
                await self._transport.send(text)
        except (ConnectionError, OSError, RuntimeError) as exc:
            raise ConnectionClosed(f"{self.name}: send failed: {exc}") from exc
        finally:
            self._queued_sends -= 1

    async def _send_quietly(self, text: str) -> None:
        try:
            await self._send(text)
        except ConnectionClosed as exc:
            logger.warning("{}: could not send an answer: {}", self.name, exc)

    # -- inbound -------------------------------------------------------------

    async def _read_loop(self) -> None:
        reason = "the other side closed the connection"
        try:
            while True:
                try:
                    text = await self._transport.receive()
                except TransportClosed as exc:
                    reason = str(exc)
                    logger.warning("{}: {}", self.name, reason)
                    break
                except FrameError as exc:
                    logger.warning("{}: refused a frame: {}", self.name, exc.message)
                    error = {"code": PARSE_ERROR, "message": exc.message}
                    if exc.data is not None:
                        error["data"] = exc.data
                    await self._send_quietly(encode_error(None, error))
                    continue
                if text is None:
                    logger.info("{}: the other side closed the connection", self.name)
                    break
                await self._dispatch(text)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            reason = f"reading failed: {exc}"
            logger.opt(exception=exc).warning("{}: {}", self.name, reason)
        # Reached only when the connection ended under us (close() cancels us
        # otherwise). Answers to in-flight requests are best-effort here: the
        # other side may still read after it stopped writing.
        if not self._closing:
            await self.close(McplError(INTERNAL_ERROR, "the connection closed"), reason=reason)

    async def _refuse(self, request_id: RequestId | None, code: int, message: str) -> None:
        logger.warning("{}: refused a message (id {!r}): {}", self.name, request_id, message)
        await self._send_quietly(encode_error(request_id, {"code": code, "message": message}))

    async def _dispatch(self, text: str) -> None:
        try:
            message = loads(text)
        except (ValueError, RecursionError) as exc:
            await self._refuse(None, PARSE_ERROR, f"Parse error: {parse_problem(exc)}")
            return
        if isinstance(message, list):
            await self._refuse(None, INVALID_REQUEST, "Invalid Request: batches are not supported")
            return
        if not isinstance(message, dict):
            await self._refuse(None, INVALID_REQUEST, "Invalid Request: not a JSON object")
            return
        has_id = "id" in message
        raw_id = message.get("id")
        # An id already in flight is not echoed in a refusal: that would be a
        # second answer under the in-flight request's id.
        readable_id: RequestId | None = (
            raw_id if valid_id(raw_id) and raw_id not in self._inflight else None
        )
        if "method" not in message and ("result" in message or "error" in message):
            self._on_response(message)
            return
        if message.get("jsonrpc") != "2.0":
            await self._refuse(
                readable_id, INVALID_REQUEST, 'Invalid Request: jsonrpc must be "2.0"'
            )
            return
        method = message.get("method")
        if not isinstance(method, str):
            await self._refuse(
                readable_id, INVALID_REQUEST, "Invalid Request: method must be a string"
            )
            return
        # "params": null is read as omitted: common on the wire, and harmless.
        params = message.get("params")
        if params is not None and not isinstance(params, dict | list):
            await self._refuse(
                readable_id,
                INVALID_REQUEST,
                "Invalid Request: params must be an object or an array",
            )
            return
        if not has_id:
            await self._on_notification(method, params)
            return
        if not valid_id(raw_id):
            await self._refuse(
                None, INVALID_REQUEST, "Invalid Request: id must be a string or an integer"
            )
            return
        if readable_id is None:
            await self._refuse(
                None, INVALID_REQUEST, f"Invalid Request: id {raw_id!r} is already in flight"
            )
            return
        self._spawn(readable_id, method, params)

    def _spawn(self, request_id: RequestId, method: str, params: Params) -> None:
        request = InboundRequest(self, request_id, method, params)
        task = request.task = asyncio.get_running_loop().create_task(
            self._serve(request), name=f"jsonrpc:{self.name}:{method}"
        )
        self._inflight[request_id] = request
        self._tasks.add(task)
        task.add_done_callback(self._forget, context=_NO_CONTEXT)

    async def _serve(self, request: InboundRequest) -> None:
        request_id = request.id
        try:
            result = await self._handle_request(request)
            frame = dumps({"jsonrpc": "2.0", "id": request_id, "result": result})
        except asyncio.CancelledError:
            # close() took our entry and answers for us, or cancel() took it: no answer.
            raise
        except Exception as exc:
            frame = encode_error(request_id, error_object(exc))
        # The guard: answer only if our entry is still there, i.e. close()
        # has not answered already. The check and removal do not await.
        if self._inflight.get(request_id) is not request:
            return
        del self._inflight[request_id]
        await self._send_quietly(frame)

    async def _on_notification(self, method: str, params: Params) -> None:
        if self._handle_notification is None:
            logger.debug("{}: ignored notification {}", self.name, method)
            return
        try:
            await self._handle_notification(method, params)
        except Exception as exc:
            logger.opt(exception=exc).warning(
                "{}: notification handler for {} failed: {}", self.name, method, exc
            )

    def _on_response(self, message: dict[str, Any]) -> None:
        raw_id = message.get("id")
        future = self._pending.get(raw_id) if valid_id(raw_id) else None
        if future is None:
            if raw_id is None and isinstance(message.get("error"), dict):
                logger.warning(
                    "{}: the other side reported an error for a message it could not read: {}",
                    self.name,
                    message["error"].get("message"),
                )
            else:
                logger.warning("{}: dropped a response for unknown id {!r}", self.name, raw_id)
            return
        if future.done():
            return
        if message.get("jsonrpc") != "2.0" or ("result" in message) == ("error" in message):
            future.set_exception(RemoteError(INTERNAL_ERROR, "malformed response"))
        elif "result" in message:
            future.set_result(message["result"])
        else:
            future.set_exception(remote_error(message["error"]))


def _awaiting(awaitable: object) -> str:
    """Where a suspended coroutine is, down its chain of awaits (a task's `get_stack`
    shows only its outermost frame); an async generator's `anext` ends the chain."""
    places: list[str] = []
    while awaitable is not None and len(places) < 40:
        frame = _first_attribute(awaitable, ("cr_frame", "ag_frame", "gi_frame"))
        if frame is not None:
            places.append(f"{frame.f_code.co_name} ({frame.f_code.co_filename}:{frame.f_lineno})")
        awaitable = _first_attribute(awaitable, ("cr_await", "ag_await", "gi_yieldfrom"))
    return " -> ".join(places)


def _first_attribute(thing: object, names: tuple[str, ...]) -> Any:
    """The first of `names` that `thing` has with a value other than None (coroutines,
    async generators and generators name the same parts differently)."""
    return next((v for n in names if (v := getattr(thing, n, None)) is not None), None)


__all__ = [
    "CLOSE_DRAIN_TIMEOUT_S",
    "ConnectionClosed",
    "EncodedParams",
    "FrameError",
    "FrameTooLarge",
    "InboundRequest",
    "JsonRpcPeer",
    "NotificationHandler",
    "Params",
    "RemoteError",
    "RequestHandler",
    "RequestId",
    "Transport",
    "TransportClosed",
    "encode_error",
    "encode_params",
    "error_object",
]
