"""``memjobs demo``: a scripted conversation on the embedded stack, step by step."""

from __future__ import annotations

import os
import time
import uuid
from datetime import UTC, datetime

from memjobs_client.client import MemjobsClient
from memjobs_client.contracts import owner_key
from memjobs_client.errors import PermanentError
from memjobs_worker.broker import owner_has_messages
from memjobs_worker.cli import exits
from memjobs_worker.embedded.stack import read_stack
from memjobs_worker.endpoints import Endpoints, resolve_endpoints
from memjobs_worker.knowledge.search import search_with
from memjobs_worker.runtime import Runtime, producer_client
from memjobs_worker.settings import Settings
from memjobs_worker.supervisor import Stack

CONVERSATION = [
    "我叫小林，住在杭州。",
    "I prefer short answers in the morning.",
    "我对花生过敏。",
    "My daughter's birthday is on March 3rd.",
]
SECRET = "my wifi password is Tr0ub4dor&3"  # noqa: S105 - the demo's made-up secret, shown being refused
NOTE = {
    "doc_id": "tea-notes",
    "title": "Tea notes",
    "text": "Longjing green tea comes from Hangzhou. Brew it with water at 80 degrees for two minutes.",
}


def run_demo(settings: Settings) -> int:
    stack: Stack | None = None
    if (settings.redis.url and settings.database.url) or read_stack(settings.data_dir):
        endpoints = resolve_endpoints(settings.data_dir, settings.redis, settings.database)
        step(0, "using the running memjobs stack")
    else:
        step(
            0,
            f"starting the embedded stack in {settings.data_dir} "
            "(its own Redis and PostgreSQL with pgvector, one worker; knowledge turned on)",
        )
        # Knowledge is opt-in: the demo's own stack turns it on for its scenario
        # (its workers read the environment, as `MEMJOBS_KNOWLEDGE=on memjobs up` would).
        os.environ["MEMJOBS_KNOWLEDGE"] = "on"
        settings = settings.updated(knowledge={"mode": "on"})
        stack = Stack(settings, processes=1, threads=2)
    code = exits.FAILED
    try:
        if stack is not None:
            endpoints = stack.start()
        code = _scenario(settings, endpoints)
    finally:
        if stack is not None:
            problems = stack.stop()
            for problem in problems:
                print(f"    {problem}")
            if problems:
                code = exits.FAILED
            else:
                step(11, "embedded stack stopped; its data stays in " + str(settings.data_dir))
    return code


def _scenario(settings: Settings, endpoints: Endpoints) -> int:
    client = producer_client(
        settings.redis, settings.memory, settings.sessions, settings.knowledge, redis_url=endpoints.redis_url
    )
    runtime = Runtime(settings, endpoints, client)
    owner = f"demo-{uuid.uuid4().hex[:8]}"
    key = owner_key(owner)
    mode = (
        ("model " + settings.model.name)
        if settings.model_configured
        else ("no model configured: sources are stored verbatim")
    )
    try:
        step(1, f"remembering a short conversation for owner {owner} ({mode})")
        ids = {}
        for text in CONVERSATION:
            ids[text] = client.remember(owner, text, session_id="demo")
            print(f"    queued {ids[text]}  {text}")
        step(2, "the same words again are the same source (stored once)")
        again = client.remember(owner, CONVERSATION[2], session_id="demo")
        print(f"    queued {again}  (same id: {again == ids[CONVERSATION[2]]})")
        step(3, "a secret is refused at the producer, before Redis or any model sees it")
        try:
            client.remember(owner, SECRET)
            print("    UNEXPECTED: the secret was accepted")
            return exits.FAILED
        except PermanentError as exc:
            print(f"    refused: {exc.reason}")
        step(4, "waiting for the workers to learn everything")
        if not wait_for_owner(runtime, key, timeout_s=120):
            print("    the demo's work was not done in 120 s")
            return exits.FAILED
        for row in runtime.store.list_sources(key):
            print(f"    {row.source_id}  {row.state}")
        step(5, "recall 'what am I allergic to?': other words, and the other language")
        _show(runtime, key, "what am I allergic to?")
        print("    and in Chinese, '女儿的生日是哪天' (when is my daughter's birthday?):")
        _show(runtime, key, "女儿的生日是哪天")
        step(6, "forget the peanut source")
        runtime.personal_memory.forget(owner, ids[CONVERSATION[2]])
        if not wait_for_owner(runtime, key, timeout_s=60):
            print("    the forget was not done in 60 s")
            return exits.FAILED
        states = {r.source_id: r.state for r in runtime.store.list_sources(key)}
        print(f"    {ids[CONVERSATION[2]]}  {states[ids[CONVERSATION[2]]]}")
        step(7, "recall 'what am I allergic to?' again: the forgotten source's memory is gone")
        _show(runtime, key, "what am I allergic to?")
        step(8, "recall 'short answers'")
        _show(runtime, key, "short answers")
        consolidating = settings.model.name if settings.consolidation_enabled else None
        code = _end_of_session(consolidating, runtime, client, owner, key)
        return code if code != exits.OK else _knowledge(settings.knowledge.enabled, runtime, client, owner, key)
    finally:
        runtime.close()
        client.close()


def _end_of_session(model: str | None, runtime: Runtime, client: MemjobsClient, owner: str, key: str) -> int:
    """Step 9: ``model`` (its name; None: automatic consolidation is off) proposes patches."""
    if model is None:
        step(
            9,
            "end of session: skipped, automatic consolidation is off (no model endpoint "
            "configured: set DASHSCOPE_API_KEY, or QWEN_AUDIO_MEMORY_BASE_URL for a local "
            "OpenAI-compatible server; or QWEN_AUDIO_MEMORY_AUTO=off)",
        )
        return exits.OK
    step(9, f"end of session: {model} proposes patches to USER.md and MEMORY.md")
    transcript = [{"role": "user", "text": text, "ts": datetime.now(UTC).isoformat()} for text in CONVERSATION]
    sent = client.end_session(owner, "demo", transcript)
    print(f"    enqueued: {', '.join(sent)}")
    if not wait_for_owner(runtime, key, timeout_s=180):
        print("    the session's work was not done in 180 s")
        return exits.FAILED
    for document in runtime.memory_docs.snapshot(owner):
        print(f"    {document.doc} (version {document.version}):")
        for line in document.content.splitlines() or ["(empty)"]:
            print(f"      {line}")
    for recalled in runtime.sessions.recall_sessions(key, 1):
        print(f"    digest: {recalled.topic}: {recalled.gist}")
    return exits.OK


def _knowledge(knowledge_on: bool, runtime: Runtime, client: MemjobsClient, owner: str, key: str) -> int:
    if not knowledge_on:
        step(10, "knowledge: skipped, it is off on this stack (opt-in: MEMJOBS_KNOWLEDGE=on)")
        return exits.OK
    step(10, "knowledge (opt-in, on for the demo): the user's note indexed with consent, then searched")
    client.reindex_knowledge(owner, [NOTE], consent=True)
    if not wait_for_owner(runtime, key, timeout_s=120):
        print("    the reindex was not done in 120 s")
        return exits.FAILED
    store = runtime.knowledge
    found = search_with(store, runtime.knowledge_embedder, key, "Longjing water temperature", 3)
    for result in found.results or []:
        print(f"    {result.score:.3f}  {result.title}: {result.text[:70]}")
    if not found.results:
        print("    (nothing)")
    return exits.OK


def wait_for_owner(runtime: Runtime, key: str, timeout_s: float) -> bool:
    """Until no message names the demo's owner and none of its sources is
    pending, twice in a row: the demo's own work, not the rest of a shared stack's."""
    deadline = time.monotonic() + timeout_s
    streak = 0
    while time.monotonic() < deadline:
        busy = owner_has_messages(runtime.redis, key) or any(
            row.state == "pending" for row in runtime.store.list_sources(key)
        )
        streak = 0 if busy else streak + 1
        if streak >= 2:
            return True
        time.sleep(0.1)
    return False


def _show(runtime: Runtime, key: str, query: str) -> None:
    hits = runtime.pipeline.recall(key, query, 3)
    if not hits:
        print("    (nothing)")
    for hit in hits:
        print(f"    {hit.score or 0:.3f}  {hit.text}")


def step(n: int, text: str) -> None:
    print(f"[{n}] {text}", flush=True)
