"""Observability: the Prometheus endpoint of real worker processes, heartbeats
and `memjobs check`, and the deploy/ configuration (promtool, dashboard)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import dramatiq
import pytest
import redis
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from memjobs_client.contracts import ACTOR_REMEMBER, QUEUE_REMEMBER, owner_key
from memjobs_worker.cli.output import status_table
from memjobs_worker.embedded.process import free_port, wait_until
from memjobs_worker.model_breaker import Ticket
from memjobs_worker.observability.heartbeat import live_heartbeats
from memjobs_worker.ops import status as ops
from memjobs_worker.ops.collectors import LedgerCollector, QueueCollector
from memjobs_worker.settings import Settings
from tests.support.harness import REPO, Harness, kill_group, spawn_workers, worker_env

DEPLOY = REPO / "deploy"
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(port: int) -> Samples:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name.startswith("memjobs_") and not s.name.endswith("_created"):
                samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


@pytest.fixture
def metered(
    make_settings: Callable[..., Settings], harness_factory: Callable[[Settings], Harness], tmp_path: Path
) -> Iterator[tuple[Harness, int]]:
    """Two real worker processes with their metrics endpoint on a known port."""
    port = free_port()
    settings = make_settings(metrics_port=port)
    h = harness_factory(settings)
    proc = spawn_workers(settings, tmp_path / "worker.log", processes=2, threads=2)
    try:
        wait_until(lambda: _answers(port), timeout_s=60, what="the metrics endpoint")
        yield h, port
    finally:
        kill_group(proc, sig=15)


def _answers(port: int) -> bool:
    try:
        scrape(port)
        return True
    except OSError:
        return False


def remember_workload(h: Harness, owners: list[str]) -> None:
    """Per owner: two new sources and one duplicate; plus one crafted invalid message."""
    for owner in owners:
        h.client.remember(owner, f"{owner} likes green tea")
        h.client.remember(owner, f"{owner} walks at seven")
        h.client.remember(owner, f"{owner} likes green tea")
    h.broker.enqueue(
        dramatiq.Message(
            queue_name=QUEUE_REMEMBER, actor_name=ACTOR_REMEMBER, args=({"schema_version": 0},), kwargs={}, options={}
        )
    )
    h.drain()


@pytest.mark.slow
def test_scrape_counts_a_known_workload(metered: tuple[Harness, int]) -> None:
    h, port = metered
    remember_workload(h, ["carol", "dave"])
    wait_until(
        lambda: value(scrape(port), "memjobs_jobs_total", actor="remember_source", outcome="invalid_payload") == 1,
        timeout_s=30,
        what="the counts",
    )
    samples = scrape(port)
    assert value(samples, "memjobs_jobs_total", actor="remember_source", outcome="created") == 4
    assert value(samples, "memjobs_jobs_total", actor="remember_source", outcome="duplicate") == 2
    assert value(samples, "memjobs_jobs_total", actor="extract_facts", outcome="succeeded") >= 2
    assert value(samples, "memjobs_job_duration_seconds_count", actor="remember_source") == 7
    assert value(samples, "memjobs_job_queue_wait_seconds_count", actor="remember_source") == 7
    assert value(samples, "memjobs_dead_lettered_total", queue="memjobs_remember") == 1
    assert value(samples, "memjobs_queue_messages", queue="memjobs_remember", state="dead") == 1
    assert value(samples, "memjobs_queue_messages", queue="memjobs_remember", state="ready") == 0
    assert value(samples, "memjobs_ledger_sources", state="learned") == 4
    assert value(samples, "memjobs_ledger_sources", state="pending") == 0
    assert value(samples, "memjobs_lock_events_total", lock="learn", event="acquired") >= 2
    # The two processes of the model jobs' pool, and the cheap jobs' own pool.
    assert value(samples, "memjobs_workers_alive") == 2 + h.settings.workers.fast_worker_processes
    assert value(samples, "memjobs_redis_up") == 1 and value(samples, "memjobs_state_store_up") == 1


@pytest.mark.slow
def test_label_values_do_not_grow_with_the_number_of_owners(metered: tuple[Harness, int]) -> None:
    h, port = metered
    remember_workload(h, ["owner-0"])
    before = {key for key in scrape(port)}
    many = [f"owner-{i}" for i in range(1, 21)]
    remember_workload(h, many)
    after = scrape(port)
    assert set(after) == before, f"new series: {sorted(set(after) - before)}"
    every_label_value = {v for _, labels in after for _, v in labels}
    for owner in ["owner-0", *many]:
        assert owner not in every_label_value and owner_key(owner) not in every_label_value


def _check(settings: Settings) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memjobs_worker.cli.main", "check"],
        env=worker_env(settings),
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )


@pytest.mark.slow
def test_check_fails_once_a_killed_workers_heartbeat_expires(
    make_settings: Callable[..., Settings], tmp_path: Path, redis_url: str
) -> None:
    settings = make_settings()
    client = redis.Redis.from_url(redis_url)
    proc = spawn_workers(settings, tmp_path / "worker.log", processes=1, threads=1)
    try:
        wait_until(lambda: len(live_heartbeats(client)) == 1, timeout_s=60, what="a heartbeat")
        ok = _check(settings)
        assert (ok.returncode, ok.stdout.strip()) == (0, "ok"), ok.stderr
    finally:
        kill_group(proc)  # SIGKILL: no clean shutdown, the key must expire by itself
    wait_until(
        lambda: live_heartbeats(client) == [],
        timeout_s=settings.workers.heartbeat_ttl_ms / 1000 + 5,
        what="the heartbeat to expire",
    )
    failed = _check(settings)
    assert failed.returncode == 1
    assert "no live worker" in failed.stderr and len(failed.stderr.strip().splitlines()) == 1


def test_check_fails_when_redis_does_not_answer(make_settings: Callable[..., Settings]) -> None:
    settings = make_settings(redis_url=f"redis://127.0.0.1:{free_port()}/0")
    result = _check(settings)
    assert result.returncode != 0
    assert "Redis" in result.stderr


def test_status_shows_recent_throughput_per_kind(
    make_settings: Callable[..., Settings], harness_factory: Callable[[Settings], Harness]
) -> None:
    h = harness_factory(make_settings())
    h.start_worker()
    h.client.remember("erin", "erin reads before bed")
    h.drain()
    h.stop_worker()  # flushes the per-minute counts
    result = subprocess.run(
        [sys.executable, "-m", "memjobs_worker.cli.main", "status", "--json"],
        env=worker_env(h.settings),
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    recent = json.loads(result.stdout)["recent"]["last_5_min"]
    assert recent["remember_source"] == {"created": 1}
    assert recent["extract_facts"]["succeeded"] >= 1


def open_circuits(h: Harness) -> dict[str, float]:
    """The scrape's ``memjobs_model_circuit_open``, by model service."""
    return {
        s.labels["service"]: s.value
        for family in QueueCollector(h.runtime.redis).collect()
        if family.name == "memjobs_model_circuit_open"
        for s in family.samples
    }


def test_an_open_model_breaker_shows_in_status_and_the_scrape(
    make_settings: Callable[..., Settings], harness_factory: Callable[[Settings], Harness]
) -> None:
    h = harness_factory(make_settings())
    assert open_circuits(h) == {"chat": 0, "embed": 0}
    chat = h.runtime.model_breakers["chat"]
    for _ in range(h.settings.model.breaker_failures):
        chat.failed(Ticket.CLOSED)
    assert open_circuits(h) == {"chat": 1, "embed": 0}
    document = ops.status(h.runtime.redis, h.store)
    assert document["model_breakers"]["chat"]["state"] == "open"
    assert document["model_breakers"]["embed"] == {"state": "closed", "failures": 0, "open_for_s": None}
    table = status_table(document)
    assert "model chat: circuit OPEN" in table and "model embed: circuit closed" in table


# -- deploy/ ------------------------------------------------------------------------


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("promtool is missing: .ci/run installs Debian's prometheus package")
        pytest.skip("promtool not installed (apt-get install prometheus)")
    return found


def test_prometheus_config_and_alert_rules_pass_promtool() -> None:
    tool = promtool()
    config = subprocess.run(
        [tool, "check", "config", str(DEPLOY / "prometheus" / "prometheus.yml")], capture_output=True, text=True
    )
    assert config.returncode == 0, config.stdout + config.stderr
    rules = subprocess.run(
        [tool, "check", "rules", str(DEPLOY / "prometheus" / "alerts.yml")], capture_output=True, text=True
    )
    assert rules.returncode == 0, rules.stdout + rules.stderr


def exported_metric_names(h: Harness) -> set[str]:
    """Every sample name memjobs can export: the process metrics and the scrape-time ones."""
    import memjobs_worker.observability.metrics  # noqa: F401  (registers the process metrics)

    names: set[str] = set()
    families = list(REGISTRY.collect())
    families += list(QueueCollector(h.runtime.redis).collect())
    families += list(LedgerCollector(h.store).collect())
    for family in families:
        if not family.name.startswith("memjobs_"):
            continue
        if family.type == "counter":
            names.add(family.name + "_total")
        elif family.type == "histogram":
            names.update(family.name + suffix for suffix in ("_bucket", "_sum", "_count"))
        else:
            names.add(family.name)
    return names


def named_metrics(expr: str) -> set[str]:
    return set(re.findall(r"\bmemjobs_[a-z_]+", expr))


def test_dashboard_and_alerts_name_only_exported_metrics(
    make_settings: Callable[..., Settings], harness_factory: Callable[[Settings], Harness]
) -> None:
    exported = exported_metric_names(harness_factory(make_settings()))
    dashboard = json.loads((DEPLOY / "grafana" / "dashboards" / "memjobs.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    assert len(exprs) >= 10
    rules_text = (DEPLOY / "prometheus" / "alerts.yml").read_text()
    exprs += [line.split("expr:", 1)[1] for line in rules_text.splitlines() if "expr:" in line]
    exprs += re.findall(r"^\s+(sum\(.*|/ sum\(.*)$", rules_text, flags=re.M)
    used = set().union(*(named_metrics(e) for e in exprs))
    assert used, "no metric named"
    assert used <= exported, f"not exported: {sorted(used - exported)}"


def test_dashboard_is_provisioned_for_the_compose_stack() -> None:
    dashboard = json.loads((DEPLOY / "grafana" / "dashboards" / "memjobs.json").read_text())
    datasource = (DEPLOY / "grafana" / "provisioning" / "datasources" / "prometheus.yml").read_text()
    provider = (DEPLOY / "grafana" / "provisioning" / "dashboards" / "memjobs.yml").read_text()
    assert dashboard["uid"] == "memjobs" and dashboard["panels"]
    uids = {t["datasource"]["uid"] for p in dashboard["panels"] for t in p["targets"]}
    assert uids == {"memjobs-prometheus"} and "uid: memjobs-prometheus" in datasource
    assert "path: /var/lib/grafana/dashboards" in provider
    compose = (DEPLOY.parent / "docker-compose.yml").read_text()  # at the repository root
    assert "./deploy/grafana/dashboards:/var/lib/grafana/dashboards" in compose
    assert "./deploy/grafana/provisioning:/etc/grafana/provisioning" in compose


# --- the metrics address: probed before the workers start --------------------------


def test_a_free_metrics_address_is_named_and_a_held_one_is_one_warning_or_an_error(
    make_settings: Callable[..., Settings],
) -> None:
    import socket

    from memjobs_client.errors import ConfigurationError
    from memjobs_worker.ops.server import probe_metrics_address

    port = free_port()
    assert probe_metrics_address(make_settings(metrics_port=port).metrics) == (f"http://127.0.0.1:{port}/metrics", None)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        url, warning = probe_metrics_address(make_settings(metrics_port=taken).metrics)
        assert url is None and warning is not None
        assert f"127.0.0.1:{taken}" in warning and "MEMJOBS_METRICS_PORT" in warning
        assert "\n" not in warning
        with pytest.raises(ConfigurationError, match="cannot be bound"):
            probe_metrics_address(make_settings(metrics_port=taken, metrics_bind_failure="fail").metrics)
    assert probe_metrics_address(make_settings(metrics="off").metrics) == (None, None)


def test_memjobs_worker_on_a_held_metrics_port_logs_one_json_warning_and_works(
    make_settings: Callable[..., Settings],
    tmp_path: Path,
) -> None:
    """Two ``memjobs worker`` on one machine: the second finds the port taken.
    Its log (stderr) stays JSON Lines, with one warning and no traceback."""
    import signal
    import socket

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        env = worker_env(make_settings(metrics_port=port))
        log_path = tmp_path / "worker.log"
        with open(log_path, "wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "memjobs_worker.cli.main", "worker", "--processes", "1", "--threads", "1"],
                cwd=REPO,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                start_new_session=True,
            )
        try:
            wait_until(
                lambda: b"Worker process is ready" in log_path.read_bytes(), timeout_s=90, what="the worker process"
            )
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
    records = [json.loads(line) for line in log_path.read_text().splitlines()]
    warnings = [r for r in records if "cannot be bound" in r["msg"]]
    assert len(warnings) == 1 and warnings[0]["level"] == "WARNING", records
    assert f"127.0.0.1:{port}" in warnings[0]["msg"]
    assert not any("exc" in r for r in records), "a traceback was logged"
    # Dramatiq's own records are JSON too (its main process's, or, the pools in one
    # process on a small host, its workers' shutdown).
    assert any(r["logger"].startswith("dramatiq.") for r in records), records
