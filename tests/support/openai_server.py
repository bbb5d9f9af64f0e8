"""A scriptable, in-process fake of the OpenAI HTTP API for tests.

Tests cannot reach a real model service, so this module runs a tiny standard-library
HTTP server on 127.0.0.1 (a free port) that speaks enough of the OpenAI API for the
official ``openai`` client (and therefore mem0) to work against it:

* ``POST /v1/chat/completions`` -> a ``chat.completion`` object (or an SSE stream when
  the request sets ``"stream": true``) whose assistant content is scripted per test.
* ``POST /v1/embeddings`` -> deterministic hashed character n-gram embeddings, returned
  as floats or as base64 float32 (the ``openai`` client asks for base64 by default).
* anything else -> 404 with an OpenAI-style JSON error.

Faults (HTTP errors, hanging requests, slow answers) can be queued per route so tests
can exercise retries, timeouts and "request in flight" situations deterministically.

Typical use::

    with FakeOpenAI() as server:
        server.queue_chat_replies(facts_reply("likes tea"))
        client = openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0)
        ...
"""

from __future__ import annotations

import array
import base64
import collections
import hashlib
import itertools
import json
import math
import re
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

__all__ = [
    "EMPTY_FACTS_REPLY",
    "ROUTES",
    "FakeOpenAI",
    "RecordedRequest",
    "echo_facts_handler",
    "embed_text",
    "facts_reply",
]

#: Route names accepted by the fault-scripting methods, keyed by request path.
ROUTES: dict[str, str] = {
    "/v1/chat/completions": "chat",
    "/v1/embeddings": "embeddings",
}
#: Route name recorded for requests to any path the fake does not serve.
OTHER_ROUTE = "other"
#: The default chat reply: a mem0-style extraction result with no facts.
EMPTY_FACTS_REPLY = '{"memory": []}'

ChatHandler = Callable[[dict[str, Any]], str]


# --------------------------------------------------------------------------- helpers


def is_consolidation(request: dict[str, Any]) -> bool:
    """Whether a chat request is the consolidation's (its prompt edits the Markdown memory documents)."""
    return "Markdown memory documents" in str(request["messages"][0]["content"])


def patch_reply(text: str, evidence: str, doc: str = "MEMORY.md") -> str:
    """Return a consolidation reply with one patch: append ``text`` to ``doc``, grounded in ``evidence``."""
    patch = {"doc": doc, "op": "append", "text": text, "evidence": evidence}
    return json.dumps({"patches": [patch]}, ensure_ascii=False)


def facts_reply(*facts: str) -> str:
    """Return a mem0-style fact extraction reply listing ``facts``."""
    return json.dumps({"memory": [{"text": f} for f in facts]}, ensure_ascii=False)


def _message_text(content: Any) -> str:
    """Flatten a chat message ``content`` (string or list of content parts) to text."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts: list[str] = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
        return "\n".join(parts)
    return ""


_USER_LINE = re.compile(r"^user:\s*(.*)$", re.IGNORECASE)
#: The day memjobs writes before each source it sends for extraction ("[2026-12-06] …").
_DAY_STAMP = re.compile(r"^\[\d{4}-\d{2}-\d{2}\]\s*")
_NEW_MESSAGES_HEADING = re.compile(r"^#+\s*new messages\s*$", re.IGNORECASE)
_HEADING = re.compile(r"^#+\s")


def echo_facts_handler(request: dict[str, Any]) -> str:
    """Chat handler that turns every ``user: ...`` line of the last user message into a fact.

    Lets tests check the whole mem0 pipeline without a model: what the user said comes
    back as extracted memories. mem0 2.x also lists older messages ("## Last k Messages")
    in the same prompt, so when a "## New Messages" section exists only its lines count;
    otherwise every line of the last user message is considered. The day each source
    was said (``[2026-12-06] …``) is left out, as a model writing "User likes green
    tea" would: the facts read as what was said (``dated_facts_handler`` keeps it).
    """
    return _reply([_DAY_STAMP.sub("", fact) for fact in user_lines(request)])


def dated_facts_handler(request: dict[str, Any]) -> str:
    """Chat handler like :func:`echo_facts_handler` that keeps each line's day as its
    fact's stamp: a model that keeps when a thing was said."""
    return _reply(user_lines(request))


def _reply(facts: list[str]) -> str:
    return facts_reply(*facts) if facts else EMPTY_FACTS_REPLY


def user_lines(request: dict[str, Any]) -> list[str]:
    """What each ``user: ...`` line of the request's newest messages says (see
    :func:`echo_facts_handler`)."""
    messages = request.get("messages") or []
    content = ""
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            content = _message_text(message.get("content"))
            break
    lines = [line.strip() for line in content.splitlines()]
    start = next((i for i, line in enumerate(lines) if _NEW_MESSAGES_HEADING.match(line)), None)
    if start is not None:
        section: list[str] = []
        for line in lines[start + 1 :]:
            if _HEADING.match(line):
                break
            section.append(line)
        lines = section
    facts = []
    for line in lines:
        match = _USER_LINE.match(line)
        if match and match.group(1).strip():
            facts.append(match.group(1).strip())
    return facts


def _ngram_features(text: str) -> list[str]:
    """Character unigrams and bigrams of a normalised text (language-agnostic, works for CJK)."""
    normalised = " ".join(text.lower().split())
    unigrams = [ch for ch in normalised if not ch.isspace()]
    bigrams = [normalised[i : i + 2] for i in range(len(normalised) - 1)]
    return ["1:" + u for u in unigrams] + ["2:" + b for b in bigrams if not b.isspace()]


def embed_text(text: str, dims: int) -> list[float]:
    """Deterministic L2-normalised embedding of ``text`` with ``dims`` dimensions.

    Each character unigram/bigram is hashed (blake2b, stable across processes unlike
    ``hash()``) to a bucket and a sign, so texts sharing many n-grams get a high cosine
    similarity and unrelated texts land near zero. Empty text -> unit vector on dim 0.
    """
    if dims < 1:
        raise ValueError("dims must be >= 1")
    vector = [0.0] * dims
    for feature in _ngram_features(text):
        digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest()
        bucket = int.from_bytes(digest[:7], "big") % dims
        sign = 1.0 if digest[7] & 1 else -1.0
        vector[bucket] += sign
    norm = math.sqrt(sum(v * v for v in vector))
    if norm == 0.0:
        vector = [0.0] * dims
        vector[0] = 1.0
        return vector
    return [v / norm for v in vector]


def _embedding_inputs(raw: Any) -> list[str]:
    """Normalise the embeddings ``input`` field (str, list of str, token arrays) to strings."""
    if isinstance(raw, str):
        return [raw]
    if isinstance(raw, list):
        if raw and all(isinstance(x, int) for x in raw):  # one token array
            return [" ".join(str(x) for x in raw)]
        out: list[str] = []
        for item in raw:
            if isinstance(item, str):
                out.append(item)
            elif isinstance(item, list):
                out.append(" ".join(str(x) for x in item))
            else:
                raise TypeError(f"unsupported embeddings input item: {item!r}")
        return out
    raise TypeError(f"unsupported embeddings input: {raw!r}")


def _approx_tokens(text: str) -> int:
    """Rough token count for the ``usage`` block (exactness does not matter to tests)."""
    return max(1, len(text) // 4) if text else 0


# --------------------------------------------------------------------------- records


@dataclass
class RecordedRequest:
    """One request as received by the fake (recorded on arrival, before any fault)."""

    route: str
    path: str
    method: str
    headers: dict[str, str]
    json: Any
    body_text: str
    received_at: float = field(default_factory=time.monotonic)


@dataclass
class _Fault:
    """One queued fault for a single request of a route."""

    kind: str  # "fail" | "hang" | "slow"
    status: int = 0
    body: dict[str, Any] | None = None
    seconds: float = 0.0


_ERROR_TYPES: dict[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    409: "conflict_error",
    422: "unprocessable_entity_error",
    429: "rate_limit_exceeded",
}


def _error_body(status: int, message: str) -> dict[str, Any]:
    """OpenAI-style error envelope, which the client turns into its typed exceptions."""
    return {
        "error": {
            "message": message,
            "type": _ERROR_TYPES.get(status, "server_error"),
            "param": None,
            "code": None,
        }
    }


# --------------------------------------------------------------------------- server


class _Server(ThreadingHTTPServer):
    """ThreadingHTTPServer that knows its FakeOpenAI and stays quiet about dropped clients."""

    daemon_threads = True
    fake: FakeOpenAI

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Ignore errors from clients that hung up (e.g. after a client-side timeout)."""
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError)):
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    """Per-request handler; all behaviour lives in FakeOpenAI.

    Uses HTTP/1.0 (one request per connection) so no keep-alive connection can keep
    being served after ``stop()``.
    """

    server: _Server
    protocol_version = "HTTP/1.0"

    def log_message(self, format: str, *args: Any) -> None:
        """Silence per-request logging to keep test output clean."""

    def do_POST(self) -> None:
        self.server.fake._handle(self)

    do_GET = do_POST
    do_PUT = do_POST
    do_PATCH = do_POST
    do_DELETE = do_POST

    def send_json(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        """Write a complete JSON response."""
        payload = json.dumps(body, ensure_ascii=False).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(payload)
        self.wfile.flush()

    def send_sse(self, events: list[dict[str, Any]]) -> None:
        """Write a server-sent-events stream (chat ``stream: true``) ending with [DONE]."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        for event in events:
            self.wfile.write(b"data: " + json.dumps(event, ensure_ascii=False).encode() + b"\n\n")
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()


class FakeOpenAI:
    """Local fake OpenAI server with per-test scripting of replies and faults.

    All mutable state is guarded by one ``threading.Condition`` so tests can wait for
    arrivals and release hanging requests without polling.
    """

    def __init__(self, embedding_dims: int = 64) -> None:
        self.embedding_dims = embedding_dims
        self.requests: list[RecordedRequest] = []
        self._cond = threading.Condition()
        self._chat_handler: ChatHandler | None = None
        self._chat_replies: collections.deque[str] = collections.deque()
        self._faults: dict[str, collections.deque[_Fault]] = {r: collections.deque() for r in ROUTES.values()}
        self._release_generation = 0
        self._stopped = False
        self._ids = itertools.count(1)
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self.base_url = ""

    # ----------------------------------------------------------------- lifecycle

    def start(self, port: int = 0) -> Self:
        """Bind 127.0.0.1 on ``port`` (0: a free one; a stopped server's port
        again: the same ``base_url``) and serve in a daemon thread; returns self."""
        if self._server is not None:
            raise RuntimeError("FakeOpenAI already started")
        with self._cond:
            self._stopped = False
        server = _Server(("127.0.0.1", port), _Handler)
        server.fake = self
        self._server = server
        port = server.server_address[1]
        self.base_url = f"http://127.0.0.1:{port}/v1"
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"fake-openai-{port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving; hanging/slow requests are released and answer normally."""
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        server, thread = self._server, self._thread
        self._server, self._thread = None, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if thread is not None:
            thread.join(timeout=10)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # ----------------------------------------------------------------- scripting

    def set_chat_handler(self, fn: ChatHandler | None) -> None:
        """Use ``fn(request_json) -> content`` for chat replies once queued replies run out."""
        with self._cond:
            self._chat_handler = fn

    def queue_chat_replies(self, *contents: str) -> None:
        """Queue assistant contents used FIFO, one per successful chat request, before the handler."""
        with self._cond:
            self._chat_replies.extend(contents)

    def fail_next(self, route: str, status: int, count: int = 1, body: dict[str, Any] | None = None) -> None:
        """Make the next ``count`` requests of ``route`` fail with HTTP ``status``.

        ``body`` replaces the default OpenAI-style error JSON. 429 answers carry
        ``Retry-After: 0`` so a retrying client does not sleep.
        """
        self._add_faults(route, [_Fault("fail", status=status, body=body) for _ in range(count)])

    def hang_next(self, route: str, count: int = 1) -> None:
        """Make the next ``count`` requests of ``route`` block until ``release()``/``stop()``."""
        self._add_faults(route, [_Fault("hang") for _ in range(count)])

    def slow_next(self, route: str, seconds: float, count: int = 1) -> None:
        """Make the next ``count`` requests of ``route`` answer only after ``seconds``."""
        self._add_faults(route, [_Fault("slow", seconds=seconds) for _ in range(count)])

    def release(self) -> None:
        """Unblock every request currently hanging (later ``hang_next`` faults still hang)."""
        with self._cond:
            self._release_generation += 1
            self._cond.notify_all()

    def reset(self) -> None:
        """Clear replies, handler, queued faults and recorded requests; release hangs."""
        with self._cond:
            self._chat_handler = None
            self._chat_replies.clear()
            for queue in self._faults.values():
                queue.clear()
            self.requests.clear()
            self._release_generation += 1
            self._cond.notify_all()

    def clear_faults(self, route: str) -> None:
        """Drop the faults still queued for ``route`` (an outage ends); recorded
        requests are kept."""
        with self._cond:
            self._faults[route].clear()

    def _add_faults(self, route: str, faults: list[_Fault]) -> None:
        """Append faults to a route's FIFO queue after validating the route name."""
        if route not in self._faults:
            raise ValueError(f"unknown route {route!r}; expected one of {sorted(self._faults)}")
        with self._cond:
            self._faults[route].extend(faults)

    # ----------------------------------------------------------------- inspection

    def wait_for_request(self, route: str, n: int, timeout_s: float = 30) -> None:
        """Block until at least ``n`` requests of ``route`` have arrived, else TimeoutError."""
        with self._cond:
            ok = self._cond.wait_for(lambda: self._count(route) >= n, timeout=timeout_s)
            if not ok:
                raise TimeoutError(f"only {self._count(route)} of {n} {route!r} requests arrived in {timeout_s}s")

    def requests_for(self, route: str) -> list[RecordedRequest]:
        """Snapshot of the recorded requests of one route, in arrival order."""
        with self._cond:
            return [r for r in self.requests if r.route == route]

    def all_text_sent(self) -> str:
        """All request bodies as text, raw and with JSON unicode escapes decoded.

        Used to assert that some secret never reached the model service; the decoded
        form matters because clients may send non-ASCII text as ``\\uXXXX`` escapes.
        """
        with self._cond:
            recorded = list(self.requests)
        parts: list[str] = []
        for r in recorded:
            parts.append(r.body_text)
            if r.json is not None:
                parts.append(json.dumps(r.json, ensure_ascii=False))
        return "\n".join(parts)

    def _count(self, route: str) -> int:
        """Arrived requests of ``route``; caller holds the lock."""
        return sum(1 for r in self.requests if r.route == route)

    # ----------------------------------------------------------------- request handling

    def _handle(self, h: _Handler) -> None:
        """Record the request, apply the next fault of its route, then answer."""
        path = h.path.split("?", 1)[0].rstrip("/") or "/"
        route = ROUTES.get(path, OTHER_ROUTE) if h.command == "POST" else OTHER_ROUTE
        length = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(length) if length > 0 else b""
        body_text = raw.decode("utf-8", errors="replace")
        parsed: Any = None
        bad_json = False
        if raw:
            try:
                parsed = json.loads(body_text)
            except ValueError:
                bad_json = True
        record = RecordedRequest(
            route=route,
            path=h.path,
            method=h.command,
            headers={k.lower(): v for k, v in h.headers.items()},
            json=parsed,
            body_text=body_text,
        )
        with self._cond:
            self.requests.append(record)
            fault = self._faults[route].popleft() if self._faults.get(route) else None
            generation = self._release_generation
            self._cond.notify_all()

        if route == OTHER_ROUTE:
            h.send_json(404, _error_body(404, f"fake OpenAI server: no route for {h.command} {path}"))
            return
        if fault is not None:
            if fault.kind == "fail":
                headers = {"Retry-After": "0"} if fault.status == 429 else {}
                body = fault.body if fault.body is not None else _error_body(fault.status, f"injected {fault.status}")
                h.send_json(fault.status, body, headers)
                return
            with self._cond:
                if fault.kind == "hang":
                    self._cond.wait_for(lambda: self._stopped or self._release_generation > generation)
                else:  # slow
                    self._cond.wait_for(lambda: self._stopped, timeout=fault.seconds)
        if bad_json or not isinstance(parsed, dict):
            h.send_json(400, _error_body(400, "request body must be a JSON object"))
            return
        try:
            if route == "chat":
                self._answer_chat(h, parsed)
            else:
                self._answer_embeddings(h, parsed)
        except (ConnectionError, TimeoutError):
            raise
        except Exception as exc:  # noqa: BLE001 - a broken script should show up as a clear 500, not a hang
            h.send_json(500, _error_body(500, f"fake OpenAI server error: {exc!r}"))

    def _next_chat_content(self, request: dict[str, Any]) -> str:
        """Queued reply first, then the handler, then the empty-facts default."""
        with self._cond:
            if self._chat_replies:
                return self._chat_replies.popleft()
            handler = self._chat_handler
        if handler is None:
            return EMPTY_FACTS_REPLY
        content = handler(request)
        if not isinstance(content, str):
            raise TypeError(f"chat handler must return str, got {type(content).__name__}")
        return content

    def _answer_chat(self, h: _Handler, request: dict[str, Any]) -> None:
        """Answer a chat completion (JSON or SSE stream) with the scripted content."""
        content = self._next_chat_content(request)
        model = str(request.get("model") or "fake-chat")
        completion_id = f"chatcmpl-fake-{next(self._ids)}"
        created = int(time.time())
        prompt_text = "".join(
            _message_text(m.get("content")) for m in request.get("messages") or [] if isinstance(m, dict)
        )
        prompt_tokens, completion_tokens = _approx_tokens(prompt_text), _approx_tokens(content)
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }
        if request.get("stream"):
            base = {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
            }
            h.send_sse(
                [
                    {
                        **base,
                        "choices": [
                            {
                                "index": 0,
                                "delta": {"role": "assistant", "content": content},
                                "finish_reason": None,
                            }
                        ],
                    },
                    {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
                ]
            )
            return
        h.send_json(
            200,
            {
                "id": completion_id,
                "object": "chat.completion",
                "created": created,
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": content, "refusal": None},
                        "logprobs": None,
                        "finish_reason": "stop",
                    }
                ],
                "usage": usage,
                "system_fingerprint": "fake",
            },
        )

    def _answer_embeddings(self, h: _Handler, request: dict[str, Any]) -> None:
        """Answer an embeddings request; honours ``dimensions`` and ``encoding_format``."""
        try:
            inputs = _embedding_inputs(request.get("input"))
            dims = int(request["dimensions"]) if request.get("dimensions") is not None else self.embedding_dims
            if dims < 1:
                raise ValueError("dimensions must be >= 1")
        except (ValueError, TypeError) as exc:
            h.send_json(400, _error_body(400, str(exc)))
            return
        as_base64 = request.get("encoding_format") == "base64"
        data = []
        for index, text in enumerate(inputs):
            vector = embed_text(text, dims)
            embedding: Any = (
                base64.b64encode(array.array("f", vector).tobytes()).decode("ascii") if as_base64 else vector
            )
            data.append({"object": "embedding", "index": index, "embedding": embedding})
        tokens = sum(_approx_tokens(t) for t in inputs)
        h.send_json(
            200,
            {
                "object": "list",
                "data": data,
                "model": str(request.get("model") or "fake-embedding"),
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            },
        )
