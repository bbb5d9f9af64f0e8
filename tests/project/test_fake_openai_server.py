"""Self-test of the fake OpenAI server, driven through the real ``openai`` client.

Other tests trust this fake to behave like the real API (typed client errors, hanging
requests, recorded bodies), so its behaviour is pinned down here. Synchronisation uses
events and ``wait_for_request``, never sleeps.
"""

from __future__ import annotations

import json
import math
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import openai
import pytest

from tests.support.openai_server import FakeOpenAI, echo_facts_handler, facts_reply

WAIT_S = 10.0


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    """A started fake server, stopped after the test."""
    with FakeOpenAI(embedding_dims=64) as fake:
        yield fake


@pytest.fixture
def client(server: FakeOpenAI) -> openai.OpenAI:
    """Real OpenAI client pointed at the fake, without retries so faults surface directly."""
    return openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0, timeout=WAIT_S)


def _chat(client: openai.OpenAI, text: str = "hi") -> str | None:
    """Send one chat request and return the assistant content."""
    resp = client.chat.completions.create(model="fake-model", messages=[{"role": "user", "content": text}])
    return resp.choices[0].message.content


def _embed(client: openai.OpenAI, texts: str | list[str], **kwargs: Any) -> list[list[float]]:
    """Embed and return the vectors in input order."""
    resp = client.embeddings.create(model="fake-embed", input=texts, **kwargs)
    return [d.embedding for d in sorted(resp.data, key=lambda d: d.index)]


def _cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


class _Background:
    """Runs a call in a thread and records its result or exception, signalling an Event."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.done = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(fn,), daemon=True)
        self._thread.start()

    def _run(self, fn: Callable[[], Any]) -> None:
        try:
            self.result = fn()
        except BaseException as exc:  # noqa: BLE001 - recorded for the test to inspect
            self.error = exc
        finally:
            self.done.set()


def test_base_url_and_chat_completion_shape(server: FakeOpenAI, client: openai.OpenAI) -> None:
    assert server.base_url.startswith("http://127.0.0.1:") and server.base_url.endswith("/v1")
    resp = client.chat.completions.create(model="m-1", messages=[{"role": "user", "content": "hi"}])
    assert resp.object == "chat.completion"
    assert resp.id and resp.created > 0 and resp.model == "m-1"
    assert resp.choices[0].message.role == "assistant"
    assert resp.choices[0].finish_reason == "stop"
    assert resp.choices[0].message.content == '{"memory": []}'  # default reply
    assert resp.usage is not None and resp.usage.total_tokens >= resp.usage.prompt_tokens


def test_chat_replies_queue_then_handler_then_default(server: FakeOpenAI, client: openai.OpenAI) -> None:
    server.queue_chat_replies("first", facts_reply("likes tea", "住在上海"))
    server.set_chat_handler(lambda req: "handled:" + req["messages"][-1]["content"])
    assert _chat(client) == "first"
    assert json.loads(_chat(client) or "") == {"memory": [{"text": "likes tea"}, {"text": "住在上海"}]}
    assert _chat(client, "ping") == "handled:ping"
    server.reset()
    assert _chat(client) == '{"memory": []}'


def test_chat_stream(server: FakeOpenAI, client: openai.OpenAI) -> None:
    server.queue_chat_replies("streamed reply")
    stream = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], stream=True)
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert text == "streamed reply"


def test_embeddings_dims_determinism_and_similarity(server: FakeOpenAI, client: openai.OpenAI) -> None:
    a1, b, zh, empty = _embed(client, ["I like green tea", "I like green tea a lot", "我喜欢喝绿茶", ""])
    (a2,) = _embed(client, "I like green tea")
    assert len(a1) == 64
    assert a1 == a2  # deterministic across requests
    for vec in (a1, b, zh, empty):
        assert math.isclose(math.sqrt(sum(x * x for x in vec)), 1.0, rel_tol=1e-5)
    assert any(abs(x) > 0 for x in zh)  # Chinese text is embedded, not zero
    assert empty[0] == pytest.approx(1.0) and all(x == 0 for x in empty[1:])
    (unrelated,) = _embed(client, "quantum chromodynamics lecture")
    assert _cosine(a1, b) > _cosine(a1, unrelated)
    (zh2,) = _embed(client, "我喜欢喝红茶")
    assert _cosine(zh, zh2) > _cosine(zh, a1)


def test_embeddings_dimensions_and_float_format(server: FakeOpenAI, client: openai.OpenAI) -> None:
    (short,) = _embed(client, "hello", dimensions=16)
    assert len(short) == 16
    (as_floats,) = _embed(client, "hello", encoding_format="float")
    (as_base64,) = _embed(client, "hello")  # client default is base64 float32
    assert as_floats == pytest.approx(as_base64, abs=1e-6)
    assert server.requests_for("embeddings")[0].json["dimensions"] == 16


def test_fail_next_500_and_429(server: FakeOpenAI, client: openai.OpenAI) -> None:
    server.fail_next("chat", 500)
    with pytest.raises(openai.InternalServerError):
        _chat(client)
    assert _chat(client) == '{"memory": []}'  # consumed once

    server.fail_next("embeddings", 429, count=2, body={"error": {"message": "slow down", "type": "x"}})
    for _ in range(2):
        with pytest.raises(openai.RateLimitError) as info:
            _embed(client, "x")
        assert info.value.response.headers["retry-after"] == "0"
        assert "slow down" in str(info.value)
    assert len(_embed(client, "x")[0]) == 64


def test_faults_apply_in_fifo_order_per_route(server: FakeOpenAI, client: openai.OpenAI) -> None:
    server.queue_chat_replies("after faults")
    server.fail_next("chat", 503)
    server.fail_next("chat", 400)
    with pytest.raises(openai.InternalServerError):
        _chat(client)
    _embed(client, "embeddings are unaffected by chat faults")
    with pytest.raises(openai.BadRequestError):
        _chat(client)
    assert _chat(client) == "after faults"  # failed requests do not consume queued replies


def test_hang_next_wait_for_request_and_release(server: FakeOpenAI, client: openai.OpenAI) -> None:
    server.queue_chat_replies("released")
    server.hang_next("chat")
    call = _Background(lambda: _chat(client, "in flight"))
    server.wait_for_request("chat", 1, timeout_s=WAIT_S)
    assert not call.done.is_set()  # request has arrived and is being held
    assert server.requests_for("chat")[0].json["messages"][0]["content"] == "in flight"
    server.release()
    assert call.done.wait(WAIT_S)
    assert call.error is None and call.result == "released"


def test_wait_for_request_times_out(server: FakeOpenAI) -> None:
    with pytest.raises(TimeoutError):
        server.wait_for_request("embeddings", 1, timeout_s=0.05)


def test_slow_next_triggers_client_timeout(server: FakeOpenAI) -> None:
    server.slow_next("chat", 30.0)
    impatient = openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0, timeout=0.3)
    with pytest.raises(openai.APITimeoutError):
        _chat(impatient)
    # stop() (fixture teardown) must not wait out the 30 s delay


def test_requests_are_recorded_with_bodies(server: FakeOpenAI, client: openai.OpenAI) -> None:
    _chat(client, "my secret is 芝麻开门")
    _embed(client, ["alpha", "beta"])
    assert [r.route for r in server.requests] == ["chat", "embeddings"]
    chat = server.requests_for("chat")[0]
    assert chat.path == "/v1/chat/completions" and chat.method == "POST"
    assert chat.headers["authorization"] == "Bearer test"
    assert chat.json["model"] == "fake-model"
    assert server.requests_for("embeddings")[0].json["input"] == ["alpha", "beta"]
    sent = server.all_text_sent()
    assert "芝麻开门" in sent and "alpha" in sent
    assert "never sent" not in sent
    server.reset()
    assert server.requests == [] and server.all_text_sent() == ""


def test_unknown_route_is_404_json(server: FakeOpenAI, client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError):
        client.models.list()
    req = urllib.request.Request(server.base_url + "/nope", data=b"{}", method="POST")
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(req, timeout=WAIT_S)
    assert info.value.code == 404
    assert "error" in json.loads(info.value.read())
    assert [r.route for r in server.requests] == ["other", "other"]


def test_stop_releases_hanging_requests() -> None:
    fake = FakeOpenAI().start()
    client = openai.OpenAI(base_url=fake.base_url, api_key="test", max_retries=0, timeout=WAIT_S)
    fake.hang_next("embeddings", count=2)
    calls = [_Background(lambda: _embed(client, "held")) for _ in range(2)]
    fake.wait_for_request("embeddings", 2, timeout_s=WAIT_S)
    assert not any(c.done.is_set() for c in calls)
    fake.stop()
    for call in calls:
        assert call.done.wait(WAIT_S)
        assert call.error is None and len(call.result[0]) == 64
    with pytest.raises(openai.APIConnectionError):
        _embed(client, "after stop")


def test_echo_facts_handler_with_mem0_style_prompt(server: FakeOpenAI, client: openai.OpenAI) -> None:
    server.set_chat_handler(echo_facts_handler)
    prompt = (
        "## Last k Messages\nuser: old message\n\n"
        "## New Messages\nuser: I live in Berlin\nassistant: Nice!\nUSER: 我喜欢喝茶\n\n"
        "## Observation Date\n2024-01-01\n\n# Output:"
    )
    resp = client.chat.completions.create(
        model="m",
        messages=[
            {"role": "system", "content": "extract facts as json"},
            {"role": "user", "content": prompt},
        ],
    )
    assert json.loads(resp.choices[0].message.content or "") == {
        "memory": [{"text": "I live in Berlin"}, {"text": "我喜欢喝茶"}]
    }
    plain = {"messages": [{"role": "user", "content": "Input:\n  user: likes jazz\nassistant: ok"}]}
    assert json.loads(echo_facts_handler(plain)) == {"memory": [{"text": "likes jazz"}]}
    assert echo_facts_handler({"messages": [{"role": "user", "content": "no facts"}]}) == '{"memory": []}'
