"""A forget leaves the forgotten text nowhere: not in any host's data directory,
not in any table, not in any Redis key (issue 13, weakness 4: mem0's history
file was per host, so a forget run on another host left the text on disk)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from memjobs_client.contracts import owner_key
from memjobs_worker.settings import Settings
from tests.support.harness import Harness
from tests.support.leaks import files_holding, redis_keys_holding, tables_holding
from tests.support.openai_server import FakeOpenAI, echo_facts_handler

OWNER = "erin@example.com"
KEY = owner_key(OWNER)


def test_forget_on_one_host_leaves_the_text_on_no_host(
    model_settings: Callable[..., Settings], harness_factory: Callable[[Settings], Harness],
    fake_model: FakeOpenAI, tmp_path: Path,
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
    assert tables_holding(str(learner.settings.database_url), [secret_ish]) == []
    assert redis_keys_holding(learner.runtime.redis, [secret_ish]) == []
    # The checks can see a text: the kept source is still in the ledger and in mem0.
    assert tables_holding(str(learner.settings.database_url), [kept])
    assert [m.text for m in learner.pipeline.memories(KEY)] == [kept]
