"""A forget leaves the forgotten text nowhere: not in any host's data directory,
not in any table, not in any Redis key (issue 13, weakness 4: mem0's history
file was per host, so a forget run on another host left the text on disk).

And a forget gets the same answer at every door (issue 20): the HTTP API and the
CLI both call the worker-side service, ``PersonalMemory.forget``, which decides
at once on the ledger and the owner's queued remembers; the producer client
(no ledger) queues the forget and the worker decides."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from memjobs_client import ForgetOutcome
from memjobs_client.contracts import RememberSource, owner_key, source_id_for
from memjobs_worker.cli import exits
from memjobs_worker.runtime import open_door
from memjobs_worker.settings import Settings
from tests.support.cli import cli_env, run_cli
from tests.support.harness import Harness
from tests.support.http import Api, forget_at_every_door
from tests.support.leaks import files_holding, redis_keys_holding, tables_holding
from tests.support.openai_server import FakeOpenAI, echo_facts_handler

OWNER = "erin@example.com"
KEY = owner_key(OWNER)


def test_forget_on_one_host_leaves_the_text_on_no_host(
    model_settings: Callable[..., Settings],
    harness_factory: Callable[[Settings], Harness],
    fake_model: FakeOpenAI,
    tmp_path: Path,
) -> None:
    fake_model.set_chat_handler(echo_facts_handler)
    dirs = [tmp_path / "host-a", tmp_path / "host-b"]
    learner = harness_factory(model_settings(data_dir=dirs[0]))
    forgetter = harness_factory(model_settings(data_dir=dirs[1]))
    secret_ish = "My locker combination reminder is the purple elephant"
    kept = "I water the ficus every Sunday"
    gone_id = learner.client.remember(OWNER, secret_ish)
    learner.client.remember(OWNER, kept)
    learner.start_worker()  # host A learns both (mem0 on host A writes whatever it writes)
    learner.drain()
    learner.stop_worker()
    assert {r.state for r in learner.store.list_sources(KEY)} == {"learned"}
    forgetter.runtime.engine  # noqa: B018  (host B has mem0 up too, as a worker would)

    forgetter.client.forget(OWNER, gone_id)
    forgetter.start_worker()  # host B runs the forget
    forgetter.drain()

    assert {r.source_id: r.state for r in forgetter.store.list_sources(KEY)}[gone_id] == "forgotten"
    assert files_holding(dirs, [secret_ish]) == []
    assert tables_holding(str(learner.settings.database.url), [secret_ish]) == []
    assert redis_keys_holding(learner.runtime.redis, [secret_ish]) == []
    # The checks can see a text: the kept source is still in the ledger and in mem0.
    assert tables_holding(str(learner.settings.database.url), [kept])
    assert [m.text for m in learner.pipeline.memories(KEY)] == [kept]


# -- the same answer at every door (issue 20: one path per operation) ---------------------


def _forget_at_every_door(api: Api, cli_env_: dict[str, str], owner: str, source_id: str) -> dict[str, tuple[Any, ...]]:
    """One forget of ``source_id`` by ``owner`` through each door, as each answers it."""
    answers = forget_at_every_door(api, cli_env_, owner, source_id)
    outcome = answers["client"]
    return {**answers, "client": (outcome.status, outcome.purge)}


def test_a_source_the_owner_does_not_have_is_not_found_at_every_door(
    api_factory: Callable[..., Api],
    tmp_path: Path,
) -> None:
    api = api_factory(worker=False)
    settings = api.harness.settings
    env = cli_env(
        tmp_path / "cli", MEMJOBS_REDIS_URL=str(settings.redis.url), MEMJOBS_DATABASE_URL=str(settings.database.url)
    )
    text = "I keep the spare key under the blue flowerpot"
    alices = source_id_for(KEY, text)
    api.harness.store.add_source(RememberSource(owner_key=KEY, source_id=alices, text=text), sent_at=datetime.now(UTC))
    not_found = {"http": (404, "not_found"), "cli": (exits.NOT_FOUND, "not_found"), "client": ("not_found", None)}

    # Another owner's source, and an id nobody has: the same answer everywhere.
    assert _forget_at_every_door(api, env, "mallory@example.com", alices) == not_found
    assert _forget_at_every_door(api, env, OWNER, "src_" + "0" * 32) == not_found

    assert {r.source_id: r.state for r in api.harness.store.list_sources(KEY)} == {alices: "pending"}
    assert api.harness.queues()["memjobs_forget"]["ready"] == 0, "a not_found forget queued a purge"


def test_a_forget_that_overtakes_its_remember_is_forgotten_at_every_door(
    api_factory: Callable[..., Api],
    tmp_path: Path,
) -> None:
    """The remember is still queued (no worker yet) when the forget comes: every door
    says ``forgotten``, and the late remember finds the source forgotten."""
    api = api_factory(worker=False)
    settings = api.harness.settings
    env = cli_env(
        tmp_path / "cli", MEMJOBS_REDIS_URL=str(settings.redis.url), MEMJOBS_DATABASE_URL=str(settings.database.url)
    )
    texts = [
        "my gate code hint is the cat's birthday",
        "the safe is behind the painting",
        "my bank PIN reminder is grandma's street",
    ]
    ids = [api.harness.client.remember(OWNER, t) for t in texts]
    door = open_door(settings, api.harness.endpoints)
    try:
        http = api.post("/v1/forget", {"owner_id": OWNER, "source_id": ids[0]})
        cli = run_cli(env, "forget", "--owner", OWNER, "--source", ids[1], "--json")
        outcome = door.personal_memory.forget(OWNER, ids[2])
    finally:
        door.close()
        door.client.close()
    assert (http.status_code, http.json()) == (202, {"source_id": ids[0], "status": "forgotten", "purge": "queued"})
    assert (cli.code, cli.json()) == (exits.OK, {"source_id": ids[1], "status": "forgotten", "purge": "queued"})
    assert outcome == ForgetOutcome(ids[2], "forgotten", "queued")

    api.harness.start_worker()
    api.harness.drain()
    assert {r.source_id: r.state for r in api.harness.store.list_sources(KEY)} == {sid: "forgotten" for sid in ids}
    assert api.harness.pipeline.engine.list(KEY) == []
    # Asked again, every door says it was forgotten before.
    again = _forget_at_every_door(api, env, OWNER, ids[0])
    assert again == {
        "http": (202, "already_forgotten"),
        "cli": (exits.OK, "already_forgotten"),
        "client": ("already_forgotten", "queued"),
    }


def test_a_producer_with_no_ledger_queues_the_forget_and_the_worker_decides(
    make_settings: Callable[..., Settings],
    harness_factory: Callable[[Settings], Harness],
) -> None:
    """A gateway's client has Redis only: it cannot see the ledger, so it says
    ``queued``; the worker's forget_source decides: a source never sent leaves no
    row at all (not even a forgotten marker), a source whose remember is still
    queued is forgotten and never learned."""
    h = harness_factory(make_settings())
    unknown = source_id_for(KEY, "never said")
    assert h.client.forget(OWNER, unknown) == ForgetOutcome(unknown, "queued", "queued")
    overtaken = h.client.remember(OWNER, "my sister lives in Lyon")
    assert h.client.forget(OWNER, overtaken) == ForgetOutcome(overtaken, "queued", "queued")
    h.start_worker()
    h.drain()
    assert {r.source_id: r.state for r in h.store.list_sources(KEY)} == {overtaken: "forgotten"}
