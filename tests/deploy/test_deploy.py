"""The deployment files, parsed and checked structurally (no container engine or
cluster runs here): docker-compose.yml at the root, deploy/kubernetes/, deploy/systemd/."""

from __future__ import annotations

import configparser
import re
import subprocess
from pathlib import Path
from typing import Any

import yaml

from memjobs_client import keys
from memjobs_client.contracts import QUEUES
from memjobs_worker.http.auth import check_bind, is_loopback
from memjobs_worker.settings import ApiSettings, Settings, default_of, setting_keys
from tests.support.harness import REPO

COMPOSE = REPO / "docker-compose.yml"
KUBE = REPO / "deploy" / "kubernetes"
SYSTEMD = REPO / "deploy" / "systemd"
MEMJOBS_SERVICES = {"worker", "sweeper", "api"}


def known_env_names() -> set[str]:
    """Every environment name the settings read."""
    return set(setting_keys().values())


def memjobs_env(names: Any) -> set[str]:
    return {n for n in names if n.startswith(("MEMJOBS_", "QWEN_AUDIO_", "DASHSCOPE_", "NOVA_AUDIO_"))}


def compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(data, dict)
    return data


def test_compose_services_build_one_image_and_are_all_health_checked() -> None:
    services = compose()["services"]
    assert {"redis", "postgres", "worker", "sweeper", "api", "prometheus", "grafana"} <= set(services)
    for name, service in services.items():
        assert "image" in service or "build" in service, name
        check = service.get("healthcheck", {})
        assert check.get("test") and not check.get("disable"), f"{name} has no health check"
    images = {services[n]["image"] for n in MEMJOBS_SERVICES}
    assert images == {"memjobs:local"}
    assert {services[n]["build"] for n in MEMJOBS_SERVICES} == {"."}
    assert (REPO / "Dockerfile").exists()
    worker = services["worker"]
    assert "ports" not in worker and "container_name" not in worker  # --scale worker=N works
    assert worker["stop_grace_period"] and worker["stop_signal"] == "SIGTERM"
    assert services["sweeper"]["command"][:3] == ["memjobs", "sweep", "--every"]
    assert services["api"]["command"] == ["memjobs", "api"]


def test_compose_stateful_services_keep_their_data_in_volumes() -> None:
    data = compose()
    services, volumes = data["services"], set(data["volumes"])
    for name, path in (
        ("redis", "/data"),
        ("postgres", "/var/lib/postgresql/data"),
        ("prometheus", "/prometheus"),
        ("grafana", "/var/lib/grafana"),
    ):
        mounted = {v.split(":")[0] for v in services[name]["volumes"] if v.split(":")[1] == path}
        assert mounted and mounted <= volumes, f"{name}: {services[name]['volumes']}"
    redis_cmd = services["redis"]["command"]
    assert redis_cmd[redis_cmd.index("--appendonly") + 1] == "yes"
    assert redis_cmd[redis_cmd.index("--appendfsync") + 1] == "always"
    assert services["postgres"]["image"].startswith("pgvector/pgvector:")


def test_compose_mounts_the_rules_and_the_provisioned_dashboard() -> None:
    services = compose()["services"]
    for service in ("prometheus", "grafana"):
        for volume in services[service]["volumes"]:
            source = volume.split(":")[0]
            if source.startswith("./"):
                assert (REPO / source).exists(), f"{service} mounts a missing {source}"
    assert any("alerts.yml" in v for v in services["prometheus"]["volumes"])
    assert any("dashboards" in v for v in services["grafana"]["volumes"])


def test_compose_secrets_come_from_an_env_file_that_is_not_committed() -> None:
    text = COMPOSE.read_text()
    services = compose()["services"]
    for name in MEMJOBS_SERVICES:
        assert services[name]["env_file"] == [".env"]
    for name, service in services.items():
        for key, value in (service.get("environment") or {}).items():
            if re.search(r"PASSWORD|TOKEN|API_KEY|AUTH", key):
                assert str(value).startswith("${"), f"{name}: {key} is written in the file"
            if str(value).startswith(("redis://", "postgresql://")):
                assert re.search(r":\$\{[A-Z_]+:\?[^}]*\}@", str(value)), f"{name}: {key}"
    for secret in ("REDIS_PASSWORD", "POSTGRES_PASSWORD", "GRAFANA_ADMIN_PASSWORD"):
        assert f"${{{secret}:?" in text  # required, from the environment / .env
    example = (REPO / ".env.example").read_text()
    example_names = {line.split("=", 1)[0].lstrip("# ").strip() for line in example.splitlines() if "=" in line}
    assert {"REDIS_PASSWORD", "POSTGRES_PASSWORD", "GRAFANA_ADMIN_PASSWORD"} <= example_names
    assert memjobs_env(example_names) <= known_env_names(), memjobs_env(example_names)
    ignored = subprocess.run(["git", "check-ignore", "-q", ".env"], cwd=REPO)
    assert ignored.returncode == 0, ".env is not git-ignored"


def api_settings(env: dict[str, Any]) -> Settings:
    """The API settings a deployment's environment gives (the tokens and keys come from
    secrets, so stand-ins are used for them)."""
    values: dict[str, Any] = {"gateway_token": "g" * 20, "host_token": "h" * 20}
    for name in ("host", "port", "tls_cert", "tls_key", "tls_terminated_by_proxy", "http_parser"):
        if f"MEMJOBS_API_{name.upper()}" in env:
            values[name] = env[f"MEMJOBS_API_{name.upper()}"]
    return Settings(api=ApiSettings(**values))


def test_compose_serves_the_api_through_tls_only() -> None:
    services = compose()["services"]
    api = services["api"]
    assert "ports" not in api, "the API's plain-HTTP port is published"
    settings = api_settings(api["environment"])
    check_bind(settings.api)  # the API would start: off loopback, TLS is said to be in front
    assert settings.api.tls_terminated_by_proxy and not is_loopback(settings.api.host)
    proxy = services["caddy"]
    assert proxy["ports"] == ["8443:8443"]
    caddyfile = REPO / proxy["volumes"][0].split(":")[0]
    text = caddyfile.read_text()
    assert "reverse_proxy api:8080" in text and "tls " in text
    published = {n for n, svc in services.items() if "ports" in svc}
    assert published == {"caddy", "prometheus", "grafana"}


def test_compose_environment_names_are_settings() -> None:
    services = compose()["services"]
    known = known_env_names()
    for name in MEMJOBS_SERVICES:
        env = services[name]["environment"]
        assert {"MEMJOBS_REDIS_URL", "MEMJOBS_DATABASE_URL"} <= set(env)
        unknown = memjobs_env(env) - known
        assert not unknown, f"{name}: unknown settings {sorted(unknown)}"


# -- Kubernetes ------------------------------------------------------------------


def kube_docs() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in sorted(KUBE.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc is None:
                continue
            assert {"apiVersion", "kind", "metadata"} <= set(doc), path
            assert doc["metadata"].get("name"), path
            docs.append(doc)
    return docs


def by_kind(kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in kube_docs() if d["kind"] == kind}


def test_kubernetes_deployments_are_well_formed_and_use_known_settings() -> None:
    deployments = by_kind("Deployment")
    assert {"memjobs-worker", "memjobs-sweeper", "memjobs-api"} <= set(deployments)
    configs = by_kind("ConfigMap")
    known = known_env_names()
    for cm in configs.values():
        assert memjobs_env(cm["data"]) <= known, sorted(memjobs_env(cm["data"]) - known)
    for name, dep in deployments.items():
        assert dep["apiVersion"] == "apps/v1"
        spec = dep["spec"]
        labels = spec["template"]["metadata"]["labels"]
        assert spec["selector"]["matchLabels"].items() <= labels.items(), name
        for container in spec["template"]["spec"]["containers"]:
            assert container["image"] and container["command"][0] == "memjobs", name
            assert "livenessProbe" in container, name
            assert container["resources"]["requests"], name
            refs = {next(iter(r.values()))["name"] for r in container["envFrom"]}
            assert refs <= set(configs) | {"memjobs-secrets"}, name


def test_worker_deployment_lets_in_flight_jobs_finish() -> None:
    worker = by_kind("Deployment")["memjobs-worker"]["spec"]["template"]["spec"]
    grace = worker["terminationGracePeriodSeconds"]
    lease_s = default_of("memory.lease_ms") / 1000
    model_s = default_of("model.timeout_ms") / 1000
    assert grace >= max(lease_s, model_s) * 3, grace
    assert "readinessProbe" in worker["containers"][0]


def test_keda_scales_the_worker_on_every_queue_length() -> None:
    [scaled] = by_kind("ScaledObject").values()
    assert scaled["apiVersion"].startswith("keda.sh/")
    assert scaled["spec"]["scaleTargetRef"]["name"] == "memjobs-worker"
    assert scaled["spec"]["minReplicaCount"] >= 1
    lists = {t["metadata"]["listName"] for t in scaled["spec"]["triggers"] if t["type"] == "redis"}
    assert lists == {keys.queue(q) for q in QUEUES}
    auths = set(by_kind("TriggerAuthentication"))
    assert {t["authenticationRef"]["name"] for t in scaled["spec"]["triggers"]} <= auths


def test_the_disruption_budget_covers_the_workers() -> None:
    [pdb] = by_kind("PodDisruptionBudget").values()
    worker = by_kind("Deployment")["memjobs-worker"]
    assert pdb["spec"]["selector"]["matchLabels"] == worker["spec"]["selector"]["matchLabels"]
    assert "maxUnavailable" in pdb["spec"] or "minAvailable" in pdb["spec"]


def test_the_api_service_selects_the_api_pods() -> None:
    service = by_kind("Service")["memjobs-api"]
    api = by_kind("Deployment")["memjobs-api"]
    assert service["spec"]["selector"].items() <= api["spec"]["template"]["metadata"]["labels"].items()


def test_kubernetes_serves_the_api_through_a_tls_ingress_only() -> None:
    api = by_kind("Deployment")["memjobs-api"]
    [container] = api["spec"]["template"]["spec"]["containers"]
    settings = api_settings({e["name"]: e["value"] for e in container["env"]})
    check_bind(settings.api)
    assert settings.api.tls_terminated_by_proxy and not is_loopback(settings.api.host)
    ingress = by_kind("Ingress")["memjobs-api"]
    assert ingress["spec"]["tls"] and all(t["secretName"] for t in ingress["spec"]["tls"])
    backends = {p["backend"]["service"]["name"] for rule in ingress["spec"]["rules"] for p in rule["http"]["paths"]}
    assert backends == {"memjobs-api"}
    policy = by_kind("NetworkPolicy")["memjobs-api"]
    labels = api["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
    assert policy["spec"]["policyTypes"] == ["Ingress"] and policy["spec"]["ingress"]


# -- the limits at the proxies (issue 31) ----------------------------------------------

CADDYFILE = REPO / "deploy" / "caddy" / "Caddyfile"


def default(name: str) -> Any:
    return default_of(name)


def test_caddy_sets_the_apis_limits_and_the_header_deadline() -> None:
    from memjobs_worker.http.guard import MAX_HEADER_BYTES
    from memjobs_worker.http.serve import KEEP_ALIVE_S

    text = CADDYFILE.read_text()
    timeouts = {k: int(v) for k, v in re.findall(r"^\s*(read_header|read_body|write|idle)\s+(\d+)s\s*$", text, re.M)}
    assert set(timeouts) == {"read_header", "read_body", "write", "idle"}, timeouts
    assert 0 < timeouts["read_header"] * 1000 <= default("api.header_timeout_ms")
    assert timeouts["read_body"] * 1000 <= default("api.body_timeout_ms")
    assert timeouts["idle"] <= KEEP_ALIVE_S
    [header] = re.findall(r"^\s*max_header_size\s+(\d+)KiB\s*$", text, re.M)
    assert int(header) * 1024 <= MAX_HEADER_BYTES
    [body] = re.findall(r"request_body\s*\{\s*max_size\s+(\d+)MiB\s*\}", text)
    assert int(body) * 1024 * 1024 <= default("api.max_body_bytes")
    # httptools (no bound of its own on headers) only because Caddy bounds them.
    assert api_settings(compose()["services"]["api"]["environment"]).api.http_parser == "httptools"


def test_the_ingress_sets_the_apis_limits_and_the_controller_the_header_deadline() -> None:
    from memjobs_worker.http.guard import MAX_HEADER_BYTES

    notes = by_kind("Ingress")["memjobs-api"]["metadata"]["annotations"]
    prefix = "nginx.ingress.kubernetes.io/"
    assert notes[prefix + "proxy-body-size"] == f"{default('api.max_body_bytes') // 2**20}m"
    assert int(notes[prefix + "limit-connections"]) <= default("api.max_per_client")
    assert int(notes[prefix + "proxy-send-timeout"]) * 1000 <= default("api.body_timeout_ms")
    assert int(notes[prefix + "proxy-read-timeout"]) * 1000 > default("api.backend_timeout_ms")
    controller = yaml.safe_load((KUBE / "ingress-nginx" / "controller-limits.yaml").read_text())["data"]
    assert 0 < int(controller["client-header-timeout"]) * 1000 <= default("api.header_timeout_ms")
    assert int(controller["client-body-timeout"]) * 1000 <= default("api.body_timeout_ms")
    count, size = controller["large-client-header-buffers"].split()
    assert int(count) * int(size.rstrip("k")) * 1024 <= MAX_HEADER_BYTES
    [container] = by_kind("Deployment")["memjobs-api"]["spec"]["template"]["spec"]["containers"]
    assert api_settings({e["name"]: e["value"] for e in container["env"]}).api.http_parser == "httptools"


# -- systemd ---------------------------------------------------------------------


def unit(path: Path) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment, method-assign]
    parser.read_string(path.read_text())
    return parser


def test_systemd_units_run_memjobs_and_stop_gracefully() -> None:
    units = {p.stem: unit(p) for p in SYSTEMD.glob("*.service")}
    assert set(units) == {"memjobs-worker", "memjobs-sweeper", "memjobs-api"}
    for name, parsed in units.items():
        assert {"Unit", "Service", "Install"} <= set(parsed.sections()), name
        service = parsed["Service"]
        assert "/memjobs " in service["ExecStart"] + " ", name
        assert service["KillSignal"] == "SIGTERM" and int(service["TimeoutStopSec"]) > 0, name
        assert service["EnvironmentFile"] == "/etc/memjobs/memjobs.env", name
        assert service["User"] != "root", name
    assert int(units["memjobs-worker"]["Service"]["TimeoutStopSec"]) >= 60
    example = (SYSTEMD / "memjobs.env.example").read_text()
    names = {line.split("=", 1)[0].lstrip("# ").strip() for line in example.splitlines() if "=" in line}
    assert memjobs_env(names) <= known_env_names(), sorted(memjobs_env(names) - known_env_names())
