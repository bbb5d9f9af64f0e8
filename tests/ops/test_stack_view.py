"""A second terminal against a running stack (issue 33): the commands follow
the stack's switches (knowledge, the API's port, which tokens are set) rather
than their shell's, say so when the shell sets one otherwise, start within 3x
the time of importing the producer client, end quietly on a closed pipe, and
report drain's progress in a pipe; the banner names the console, which ``/``
leads to.

One ``memjobs up`` for the module (its start costs seconds), with knowledge on,
a host token and its API on a free port; each test sets up what it checks.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from memjobs_client import MemjobsClient
from memjobs_client.contracts import ACTOR_RECORD_TASK, RecordTask, owner_key
from memjobs_client.payloads import build_payload
from memjobs_worker.cli import exits
from tests.support.cli import (
    EmbeddedStack,
    cli_env,
    new_owner,
    ok,
    run_cli,
    run_cli_into_closed_pipe,
    running_stack,
    scratch_dir,
)
from tests.support.harness import REPO

pytestmark = pytest.mark.slow

HOST_TOKEN = "stack-view-host-token-0123456789"


@pytest.fixture(scope="module")
def stack() -> Iterator[EmbeddedStack]:
    with scratch_dir("view") as base:
        data_dir = base / "data"
        env = cli_env(
            data_dir,
            MEMJOBS_KNOWLEDGE="on",
            MEMJOBS_API_PORT="0",
            MEMJOBS_API_HOST_TOKEN=HOST_TOKEN,
            MEM0_DIR=str(base / "mem0"),
            MEMJOBS_KNOWLEDGE_ROOTS=str(base),
        )
        with running_stack(data_dir, env, "up.out") as handle:
            yield handle


def shell(stack: EmbeddedStack, **extra: str) -> dict[str, str]:
    """Another terminal's environment: the same data directory, none of the stack's switches."""
    env = cli_env(stack.data_dir, **extra)
    for name in ("MEMJOBS_KNOWLEDGE", "MEMJOBS_API_PORT", "MEMJOBS_API_HOST_TOKEN"):
        if name not in extra:
            env.pop(name, None)
    return env


def state(stack: EmbeddedStack) -> dict[str, Any]:
    return dict(json.loads((stack.data_dir / "run" / "stack.json").read_text()))


def test_config_shows_the_stacks_switches_and_where_each_came_from(stack: EmbeddedStack) -> None:
    result = ok(run_cli(shell(stack, MEMJOBS_KNOWLEDGE="off"), "config", "--json"))
    doc = result.json()
    api_port = int(state(stack)["api_url"].rsplit(":", 1)[1])
    assert doc["knowledge.mode"] == "on" and doc["from"]["knowledge.mode"] == "stack"
    assert doc["api.port"] == api_port != 8780 and doc["from"]["api.port"] == "stack"
    assert doc["api.host_token"] == "[REDACTED]" and doc["from"]["api.host_token"] == "stack"
    assert doc["api.gateway_token"] is None
    assert doc["from"]["memory.extract_batch_size"] == "default" and doc["from"]["data_dir"] == "environment"
    assert doc["stack"]["api_url"] == state(stack)["api_url"]
    assert HOST_TOKEN not in result.stdout + result.stderr + json.dumps(state(stack))
    # The shell's own switch is not silently overridden: one line says which wins.
    said = result.stderr.strip().splitlines()
    assert len(said) == 1 and "MEMJOBS_KNOWLEDGE is off in this shell but on in the stack" in said[0], said

    table = ok(run_cli(shell(stack), "config"))
    knowledge = next(line for line in table.stdout.splitlines() if line.startswith("knowledge.mode "))
    assert knowledge.split()[:3] == ["knowledge.mode", "on", "stack"], table.stdout
    assert table.stderr == "", "a shell that set nothing has nothing to be told"


def test_reindex_and_mcp_follow_the_stacks_knowledge_switch(stack: EmbeddedStack) -> None:
    """The README's ``MEMJOBS_KNOWLEDGE=on memjobs up``, then another terminal without it."""
    note = stack.data_dir.parent / "tea.md"
    note.write_text("Oolong tea is half oxidised.")
    env = shell(stack)
    reindexed = run_cli(env, "reindex", "--owner", new_owner("view"), "--path", str(note), "--consent")
    assert reindexed.code == exits.OK and reindexed.stdout.startswith("queued 1 documents"), str(reindexed)
    served = run_cli(env, "mcp", "--owner", new_owner("view"))  # stdin closed: serves, then ends
    assert served.code == exits.OK and "knowledge is off" not in served.stderr, str(served)


PROBE = """
import json, sys
from memjobs_worker.cli.main import main
code = main(sys.argv[1:])
print(json.dumps({"code": code, "modules": sorted(sys.modules)}), file=sys.stderr)
"""


def test_reads_against_a_running_stack_go_through_its_api(stack: EmbeddedStack) -> None:
    """sources and recall: their answer, without the database drivers or mem0."""
    owner = new_owner("view")
    source_id = stack.remember(owner, "I drink green tea every morning")
    env = shell(stack, MEMJOBS_API_HOST_TOKEN=HOST_TOKEN)
    stack.drain()
    for args, check in (
        (("sources", "--owner", owner), lambda doc: [s["source_id"] for s in doc] == [source_id]),
        (("recall", "--owner", owner, "--query", "green tea"), lambda doc: doc and doc[0]["source_ids"] == [source_id]),
    ):
        done = subprocess.run(
            [sys.executable, "-c", PROBE, *args, "--json"],
            cwd=REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
        )
        report = json.loads(done.stderr.strip().splitlines()[-1])
        assert report["code"] == exits.OK, done.stderr
        assert check(json.loads(done.stdout)), done.stdout
        assert not {"sqlalchemy", "psycopg", "mem0"} & set(report["modules"]), f"{args[0]} opened the database"


def took(command: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, cwd=REPO, env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=120, check=True)
    return time.perf_counter() - started


def test_every_command_starts_within_3x_the_client_import(stack: EmbeddedStack) -> None:
    """Measured side by side in this run, interleaved (a round runs the client's
    import and every command once), best of 5 rounds each: a load that comes and
    goes on the machine weighs on both sides alike."""
    owner = new_owner("view")
    stack.remember(owner, "I drink green tea every morning")
    env = shell(stack, MEMJOBS_API_HOST_TOKEN=HOST_TOKEN)
    commands = {"client import": [sys.executable, "-c", "import memjobs_client"]}
    for args in (["--help"], ["--version"], ["url"], ["config"], ["sources", "--owner", owner]):
        commands[args[0]] = [sys.executable, "-m", "memjobs_worker.cli.main", *args]
    best = dict.fromkeys(commands, float("inf"))
    for _ in range(5):
        for name, command in commands.items():
            best[name] = min(best[name], took(command, env))
    client = best.pop("client import")
    ratios = {name: round(seconds / client, 2) for name, seconds in best.items()}
    assert max(ratios.values()) <= 3.0, f"start-up over the client import ({client:.3f} s): {ratios}"


def test_the_banner_names_the_console_and_slash_leads_to_it(stack: EmbeddedStack) -> None:
    api_url = state(stack)["api_url"]
    banner = next(line for line in stack.up.text().splitlines() if line.startswith("memjobs is up"))
    assert f"console {api_url}/console" in banner, banner

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any, **kwargs: Any) -> None:
            return None

    with pytest.raises(urllib.error.HTTPError) as answer:
        urllib.request.build_opener(NoRedirect()).open(api_url + "/", timeout=10)
    assert answer.value.code == 307 and answer.value.headers["Location"] == "/console"


@pytest.mark.parametrize(
    "args", [("status",), ("dead", "list"), ("sources", "--owner", "nobody")], ids=lambda args: " ".join(args)
)
def test_a_closed_pipe_against_the_stack_is_no_traceback(stack: EmbeddedStack, args: tuple[str, ...]) -> None:
    done = run_cli_into_closed_pipe(shell(stack), *args)
    assert done.code == exits.CLOSED_PIPE, done.stderr
    assert done.stderr == "", done.stderr


def test_drain_in_a_pipe_says_what_is_left_as_lines_or_json(stack: EmbeddedStack) -> None:
    """A job delayed for ten minutes keeps the queues from draining: a drain of 2 s
    reports its progress, then says what is left and exits 1."""
    client = MemjobsClient(state(stack)["redis_url"])
    try:
        client.send(
            ACTOR_RECORD_TASK,
            build_payload(
                RecordTask,
                owner_key=owner_key(new_owner("view")),
                task_id="t-1",
                goal="water the plants",
                status="running",
            ),
            delay_ms=600_000,
        )
    finally:
        client.close()
    plain = run_cli(shell(stack), "drain", "--timeout", "2", "--every", "0.3")
    assert plain.code == exits.FAILED, str(plain)
    lines = [line for line in plain.stderr.splitlines() if " left" in line and "queues:" in line]
    assert lines and "memjobs_tasks" in lines[0] and "\r" not in plain.stderr, plain.stderr
    assert "not drained after 2 s" in plain.stderr

    as_json = run_cli(shell(stack), "drain", "--timeout", "2", "--every", "0.3", "--json")
    assert as_json.code == exits.FAILED, str(as_json)
    reports = [json.loads(line) for line in as_json.stderr.splitlines() if line.startswith("{")]
    assert reports and reports[0]["remaining"] >= 1 and "rate_per_s" in reports[0], as_json.stderr
    assert as_json.json()["drained"] is False
