"""The API's backend threads (:meth:`ApiContext.call` and :meth:`ApiContext.compute`):
a call answers ``backend_unavailable`` once the backend timeout passes, and its
thread, which cannot be stopped, keeps its place in its lane until it ends, so
that a lane never runs more threads than it has, the work of abandoned requests
included; work abandoned before it had a thread never runs. No server: the
context is built on endpoints where nothing listens, and the calls are plain
functions.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from memjobs_worker.endpoints import Endpoints
from memjobs_worker.http.context import ApiContext
from memjobs_worker.http.problems import ProblemError
from memjobs_worker.settings import ApiSettings, Settings

NOWHERE = Endpoints("redis://127.0.0.1:1/0", "postgresql://nobody@127.0.0.1:1/none")


@pytest.fixture
def context(tmp_path: Path) -> Iterator[ApiContext]:
    # Two backend threads (api_max_in_flight bounds them), one computing thread.
    ctx = ApiContext(Settings(data_dir=tmp_path, api=ApiSettings(backend_timeout_ms=200, max_in_flight=2)), NOWHERE)
    yield ctx
    ctx.close()


@pytest.mark.parametrize(("lane", "threads"), [("call", 2), ("compute", 1)])
def test_a_lane_runs_no_more_threads_than_it_has_abandoned_work_included(
    context: ApiContext, lane: str, threads: int
) -> None:
    run: Callable[..., Awaitable[object]] = getattr(context, lane)
    release = threading.Event()
    started: list[str] = []

    def hold(name: str) -> str:
        started.append(name)
        release.wait(30)
        return name

    async def scenario() -> None:
        # Each call times out while its thread runs on, holding its place in the lane.
        for i in range(threads):
            with pytest.raises(ProblemError) as timed_out:
                await run(hold, f"held {i}")
            assert timed_out.value.reason == "backend_unavailable"
        assert sorted(started) == [f"held {i}" for i in range(threads)]
        # The lane is full of abandoned work: the next call times out without a thread.
        with pytest.raises(ProblemError):
            await run(hold, "never")
        assert "never" not in started
        release.set()
        # Once the threads end the lane serves again, and the abandoned call never ran.
        assert await run(lambda: "served") == "served"
        assert "never" not in started

    asyncio.run(scenario())


def test_an_error_of_the_work_is_internal_and_its_class_name_only_is_logged(
    context: ApiContext, caplog: pytest.LogCaptureFixture
) -> None:
    def fail() -> None:
        raise ValueError("the secret detail")

    async def scenario() -> None:
        with pytest.raises(ProblemError) as failed:
            await context.call(fail)
        assert failed.value.reason == "internal"

    asyncio.run(scenario())
    assert "the secret detail" not in caplog.text
