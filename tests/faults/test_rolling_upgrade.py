"""A rolling upgrade: two versions of the contracts against one Redis.

The worker of this tree reads schema version 1; a "newer" worker is the same
code with the contracts' version raised to 2 before anything is imported (its
Dramatiq processes are forked from that interpreter), and a newer producer is
this test's client with the same change. A version-2 message reaches the older
worker first: it is left for a newer one (requeued with a delay, logged and
counted), never dead-lettered; once a newer worker runs beside the older one,
the message is learned. The newer worker reads what the older producers send,
messages without a version included.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dramatiq
import pytest

import memjobs_client.contracts.base as contracts_base
from memjobs_client.contracts import ACTOR_REMEMBER, QUEUE_REMEMBER, QUEUES, owner_key, source_id_for
from memjobs_worker.settings import Settings
from tests.faults.test_faults import json_lines
from tests.support.harness import REPO, Harness, kill_group, spawn_workers, worker_env
from tests.support.polling import wait_for

OWNER = "rolling-upgrade-owner"
KEY = owner_key(OWNER)

#: A worker whose contracts are version 2: set before the worker is imported;
#: Dramatiq forks its processes from this interpreter, so they keep it.
NEWER_WORKER = (
    "import sys; import memjobs_client.contracts.base as b; b.SCHEMA_VERSION = 2; "
    "from memjobs_worker.__main__ import main; sys.exit(main(sys.argv[1:]))"
)


def state(h: Harness, source_id: str) -> str | None:
    return {r.source_id: r.state for r in h.store.list_sources(KEY)}.get(source_id)


def dead(h: Harness) -> int:
    return sum(q["dead"] for q in h.queues().values())


def deferrals(log: Path) -> list[dict[str, Any]]:
    return [r for r in json_lines(log) if r.get("reason") == "newer_schema"]


def remember_unversioned(h: Harness, text: str) -> str:
    """Enqueues, as an older producer would, a remember message without any schema version; returns its source id."""
    source_id = source_id_for(KEY, text)
    payload = {"owner_key": KEY, "source_id": source_id, "text": text, "session_id": None, "kind": "utterance"}
    h.broker.enqueue(
        dramatiq.Message(queue_name=QUEUE_REMEMBER, actor_name=ACTOR_REMEMBER, args=(payload,), kwargs={}, options={})
    )
    return source_id


def test_a_newer_message_waits_for_a_newer_worker_while_the_older_one_runs(
    make_settings: Callable[..., Settings],
    harness_factory: Callable[[Settings], Harness],
    procs: list[Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = make_settings(newer_schema_delay_ms=300)
    h = harness_factory(settings)
    older_log, newer_log = tmp_path / "older.log", tmp_path / "newer.log"
    older = spawn_workers(settings, older_log)
    procs.append(older)

    # An older producer's message without any version is version 1: read.
    unversioned_id = remember_unversioned(h, "I keep my bike in the shed")
    wait_for(lambda: state(h, unversioned_id) == "learned", 60, "the unversioned message learned")

    # A newer producer (version 2): the older worker leaves its message, it does not dead-letter it.
    monkeypatch.setattr(contracts_base, "SCHEMA_VERSION", 2)
    newer_text = "I moved my bike to the garage"
    newer_id = h.client.remember(OWNER, newer_text)
    wait_for(lambda: len(deferrals(older_log)) >= 2, 30, "the older worker to defer the newer message twice")
    [first, *_] = deferrals(older_log)
    assert (first["actor"], first["schema_version"], first["readable"]) == (ACTOR_REMEMBER, 2, 1)
    assert OWNER not in older_log.read_text() and newer_text not in older_log.read_text()
    assert state(h, newer_id) is None and dead(h) == 0

    # A newer worker joins, the older one still running: the message reaches it and is learned.
    data_dir = tmp_path / "newer-data"
    (data_dir / "metrics").mkdir(parents=True)
    env = worker_env(settings, MEMJOBS_DATA_DIR=str(data_dir), PROMETHEUS_MULTIPROC_DIR=str(data_dir / "metrics"))
    with newer_log.open("ab") as out:
        newer = subprocess.Popen(
            [sys.executable, "-c", NEWER_WORKER, "--processes", "1", "--threads", "2", "--queues", *QUEUES],
            env=env,
            stdout=out,
            stderr=out,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            cwd=REPO,
        )
    procs.append(newer)
    wait_for(lambda: state(h, newer_id) == "learned", 90, "the newer message learned by the newer worker")
    assert older.poll() is None, "the older worker stopped"
    assert dead(h) == 0
    assert not deferrals(newer_log)  # the newer worker read it at once

    # The older worker is gone (upgraded): the newer one reads the older producers' messages.
    kill_group(older)
    monkeypatch.setattr(contracts_base, "SCHEMA_VERSION", 1)
    older_id = h.client.remember(OWNER, "I lent my bike to Sam")
    unversioned_id = remember_unversioned(h, "I got my bike back")
    wait_for(
        lambda: state(h, older_id) == state(h, unversioned_id) == "learned",
        60,
        "version 1 and unversioned messages learned by the newer worker",
    )
    assert dead(h) == 0 and not deferrals(newer_log)
