"""docker-compose.yml and the env examples: valid, every COMPACTOR_* name is a real setting, and
the secure defaults hold: Redis wants a password (every Compactor container's URL carries it),
Flower and the API listen on the host's loopback, each secret reaches only the containers that
use it, and the image is a versioned one that `make image` builds."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from api_client.contract.settings import ClientSettings
from api_client.server.settings import ServerSettings
from helpers.ci import missing
from worker.settings import SETTING_NAMES, WorkerSettings

REPO = Path(__file__).resolve().parents[1]
COMPOSE = REPO / "docker-compose.yml"
DEPLOY = REPO / "deploy"
# compose's .env (interpolation only), the settings every container gets, the workers' secrets
COMPOSE_EXAMPLE = DEPLOY / "compose.env.example"
WORKER_EXAMPLE = DEPLOY / "worker.env.example"
EXAMPLES = [DEPLOY / "compactor.env.example", WORKER_EXAMPLE, COMPOSE_EXAMPLE]
COMPACTOR_SERVICES = ("worker", "flower", "api")


def _setting_names() -> set[str]:
    fields = SETTING_NAMES | set(ServerSettings.model_fields)
    return {f"COMPACTOR_{name.upper()}" for name in fields}


def test_compose_services_and_redis_durability() -> None:
    compose = yaml.safe_load(COMPOSE.read_text())
    services = compose["services"]
    assert {"redis", "worker", "flower"} <= set(services)
    redis_command = " ".join(services["redis"]["command"])
    assert "noeviction" in redis_command and "--appendonly yes" in redis_command
    # Full at maxmemory (writes refused, typed), never killed at the container's limit.
    args = services["redis"]["command"]
    maxmemory_mb = int(args[args.index("--maxmemory") + 1].removesuffix("mb"))
    limit_mb = int(services["redis"]["mem_limit"].removesuffix("g")) * 1024
    assert 0.5 * limit_mb <= maxmemory_mb <= 0.8 * limit_mb
    assert services["redis"]["healthcheck"]["test"]
    assert "FLOWER_BASIC_AUTH" in services["flower"]["environment"]
    assert services["worker"]["build"]["dockerfile"] == "deploy/Dockerfile"
    assert (REPO / "deploy" / "Dockerfile").is_file()


@pytest.mark.parametrize("path", [COMPOSE, *EXAMPLES], ids=lambda p: p.name)
def test_every_compactor_variable_names_a_setting(path: Path) -> None:
    used = set(re.findall(r"\bCOMPACTOR_[A-Z0-9_]+", path.read_text()))
    unknown = {name for name in used
               if name not in _setting_names() and not name.startswith("COMPACTOR_HOOKS_")}
    assert unknown == set()
    assert used  # the file does configure Compactor


def _compose_cli() -> list[str]:
    if shutil.which("docker") and subprocess.run(["docker", "compose", "version"],
                                                 capture_output=True).returncode == 0:
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    missing("no docker compose CLI on this machine (docker compose or docker-compose)")


EXAMPLE = (DEPLOY / "compactor.env.example").read_text()
TOKENS = '{"0123456789abcdef-token":"default"}'
PASSWORD = "Redis-pw_0123456789.abc~"
# .env as an operator fills in deploy/compose.env.example
DOTENV = (f"REDIS_PASSWORD={PASSWORD}\nFLOWER_BASIC_AUTH=ops:flower-secret\n"
          f"COMPACTOR_API_TOKENS={TOKENS}\nIMAGE_TAG=0.1.0-0123456789ab\n")


def _compose_config(tmp_path: Path, dotenv: str = DOTENV, *, shared: str | None = EXAMPLE,
                    worker: str | None = WORKER_EXAMPLE.read_text(),
                    **env: str) -> subprocess.CompletedProcess[str]:
    """``docker compose config`` of a copy of the project whose .env is ``dotenv`` and whose
    deploy/compactor.env and deploy/worker.env are ``shared`` and ``worker`` (None: absent)."""
    shutil.copy(COMPOSE, tmp_path / "docker-compose.yml")
    (tmp_path / "deploy").mkdir()
    shutil.copy(DEPLOY / "Dockerfile", tmp_path / "deploy" / "Dockerfile")
    (tmp_path / ".env").write_text(dotenv)
    for name, text in (("compactor.env", shared), ("worker.env", worker)):
        if text is not None:
            (tmp_path / "deploy" / name).write_text(text)
    return subprocess.run([*_compose_cli(), "config"], capture_output=True, text=True, cwd=tmp_path,
                          env={"PATH": "/usr/bin:/bin:/usr/local/bin", **env}, timeout=60)


def _without(dotenv: str, name: str) -> str:
    return "".join(line for line in dotenv.splitlines(keepends=True)
                   if not line.startswith(f"{name}="))


def test_compose_config_when_a_compose_cli_is_installed(tmp_path: Path) -> None:
    result = _compose_config(tmp_path)
    assert result.returncode == 0, result.stderr


def test_compose_refuses_without_flower_auth(tmp_path: Path) -> None:
    result = _compose_config(tmp_path, _without(DOTENV, "FLOWER_BASIC_AUTH"))
    assert result.returncode != 0
    assert "set FLOWER_BASIC_AUTH=user:password in .env or the shell" in result.stderr


def test_compose_refuses_an_api_without_tokens(tmp_path: Path) -> None:
    result = _compose_config(tmp_path, _without(DOTENV, "COMPACTOR_API_TOKENS"))
    assert result.returncode != 0
    assert "set COMPACTOR_API_TOKENS (JSON, token to \"default\") in .env" in result.stderr


@pytest.mark.parametrize(("name", "message"), [
    ("REDIS_PASSWORD", "set REDIS_PASSWORD (16+ characters of A-Z a-z 0-9 . _ ~ -) in .env"),
    ("IMAGE_TAG", "set IMAGE_TAG (make image prints one) in .env or the shell"),
])
def test_compose_refuses_without_a_redis_password_or_an_image_tag(tmp_path: Path, name: str,
                                                                 message: str) -> None:
    result = _compose_config(tmp_path, _without(DOTENV, name))
    assert result.returncode != 0 and message in result.stderr


def test_the_compose_env_example_lists_what_compose_requires(tmp_path: Path) -> None:
    """Copied as it is, deploy/compose.env.example leaves each required value empty: compose
    refuses, naming one; filled in, it starts."""
    example = COMPOSE_EXAMPLE.read_text()
    required = set(re.findall(r"\$\{([A-Z_]+):\?", COMPOSE.read_text()))
    assert required == {"REDIS_PASSWORD", "FLOWER_BASIC_AUTH", "COMPACTOR_API_TOKENS", "IMAGE_TAG"}
    assert set(re.findall(r"^([A-Z_]+)=$", example, re.M)) == required
    (tmp_path / "as-is").mkdir()
    refused = _compose_config(tmp_path / "as-is", example)
    assert refused.returncode != 0 and "Missing mandatory value" in refused.stderr
    values = dict(re.findall(r"^([A-Z_]+)=(.*)$", DOTENV, re.M))
    filled = re.sub(r"^([A-Z_]+)=$", lambda m: f"{m[1]}={values[m[1]]}", example, flags=re.M)
    (tmp_path / "filled").mkdir()
    assert _compose_config(tmp_path / "filled", filled).returncode == 0


@pytest.mark.parametrize("missing", ["shared", "worker"])
def test_compose_refuses_without_the_per_service_env_files(tmp_path: Path, missing: str) -> None:
    result = _compose_config(tmp_path, **{missing: None})  # type: ignore[arg-type]
    assert result.returncode != 0
    assert f"deploy/{'compactor' if missing == 'shared' else 'worker'}.env" in result.stderr


def _rendered(tmp_path: Path, dotenv: str = DOTENV, **files: str) -> dict[str, Any]:
    result = _compose_config(tmp_path, dotenv, **files)
    assert result.returncode == 0, result.stderr
    services: dict[str, Any] = yaml.safe_load(result.stdout)["services"]
    return services


def test_each_secret_reaches_only_the_containers_that_use_it(tmp_path: Path) -> None:
    """Shared settings reach every Compactor container; provider keys the workers alone;
    FLOWER_BASIC_AUTH Flower alone; the API tokens the API alone; the Redis password only
    inside each Compactor container's Redis URL (and the Redis container's redis-cli)."""
    shared = "COMPACTOR_LLM_ATTEMPT_BUDGET=7\nCOMPACTOR_HOOKS_TIMEOUT_S=3\n"
    worker_env = "ANTHROPIC_API_KEY=sk-test\nCOMPACTOR_HOOKS_WEBHOOK_SECRET=hook-secret\n"
    services = _rendered(tmp_path, shared=shared, worker=worker_env)
    for name in COMPACTOR_SERVICES:
        env = services[name]["environment"]
        assert env["COMPACTOR_LLM_ATTEMPT_BUDGET"] == "7", name
        assert env["COMPACTOR_HOOKS_TIMEOUT_S"] == "3", name
        # the compose network's Redis, with the password
        assert env["COMPACTOR_REDIS_URL"] == f"redis://:{PASSWORD}@redis:6379/0", name
    secrets = {"ANTHROPIC_API_KEY": {"worker"}, "COMPACTOR_HOOKS_WEBHOOK_SECRET": {"worker"},
               "FLOWER_BASIC_AUTH": {"flower"}, "COMPACTOR_API_TOKENS": {"api"},
               "REDIS_PASSWORD": set(), "REDISCLI_AUTH": {"redis"}}
    for variable, holders in secrets.items():
        assert {name for name, service in services.items()
                if variable in service.get("environment", {})} == holders, variable
    assert services["flower"]["environment"]["FLOWER_BASIC_AUTH"] == "ops:flower-secret"
    assert services["api"]["environment"]["COMPACTOR_API_TOKENS"] == TOKENS
    assert services["redis"]["environment"] == {"REDISCLI_AUTH": PASSWORD}
    for name, service in services.items():  # never on a command line (ps, docker inspect)
        assert PASSWORD not in " ".join(service.get("command", [])), name
        others = {k: v for k, v in service.get("environment", {}).items()
                  if k not in ("COMPACTOR_REDIS_URL", "REDISCLI_AUTH")}
        assert PASSWORD not in str(others), name
    worker = services["worker"]["environment"]
    assert worker["COMPACTOR_METRICS_PORT"] == "9808"
    assert worker["COMPACTOR_METRICS_ADDRESS"] == "0.0.0.0"


def test_no_container_reads_dot_env_and_the_shared_file_holds_no_secret() -> None:
    """.env is compose's alone (interpolation); deploy/compactor.env, given to every Compactor
    container, names no secret: not even as a commented line to fill in."""
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    env_files = {name: s.get("env_file") for name, s in services.items()}
    assert env_files == {"redis": None, "worker": ["deploy/compactor.env", "deploy/worker.env"],
                         "flower": "deploy/compactor.env", "api": "deploy/compactor.env"}
    shared = {m for m in re.findall(r"^#?\s*([A-Z][A-Z0-9_]*)=", EXAMPLE, re.M)}
    assert shared and not shared & _secret_names(), sorted(shared & _secret_names())
    assert not any(name.endswith("_API_KEY") for name in shared)
    worker = set(re.findall(r"^#?\s*([A-Z][A-Z0-9_]*)=", WORKER_EXAMPLE.read_text(), re.M))
    assert _secret_names() - {"COMPACTOR_API_TOKENS", "FLOWER_BASIC_AUTH", "REDIS_PASSWORD"} \
        <= worker  # the workers' secrets are listed where the workers alone read them
    assert {"ANTHROPIC_API_KEY", "OPENAI_API_KEY"} <= worker


def _secret_names() -> set[str]:
    """Every setting typed SecretStr (workers, hooks, API), and compose's own secrets."""
    from pydantic import SecretStr

    from worker.hooks.settings import HookSettings

    def secret(annotation: object) -> bool:
        return annotation is SecretStr or SecretStr in getattr(annotation, "__args__", ())

    names = {f"COMPACTOR_{n.upper()}" for cls in (WorkerSettings, ClientSettings, ServerSettings)
             for n, f in cls.model_fields.items() if secret(f.annotation)}
    names |= {f"COMPACTOR_HOOKS_{n.upper()}" for n, f in HookSettings.model_fields.items()
              if secret(f.annotation)}
    assert {"COMPACTOR_API_TOKENS", "COMPACTOR_REMOTE_AUTH_HEADER",
            "COMPACTOR_HOOKS_WEBHOOK_SECRET"} <= names
    return names | {"FLOWER_BASIC_AUTH", "REDIS_PASSWORD"}


def test_flower_and_every_published_port_are_on_the_hosts_loopback() -> None:
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    assert services["flower"]["ports"] == ["127.0.0.1:5555:5555"]
    published = [(name, p) for name, s in services.items() for p in s.get("ports", [])]
    assert published and all(p.startswith("127.0.0.1:") for _, p in published), published


def redis_command() -> tuple[list[str], str]:
    """The compose Redis's command and health check as its container runs them ($$ is $)."""
    redis = yaml.safe_load(COMPOSE.read_text())["services"]["redis"]
    kind, check = redis["healthcheck"]["test"]
    assert kind == "CMD-SHELL"
    return [part.replace("$$", "$") for part in redis["command"]], check


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _redis_tools(tmp_path: Path, port: int) -> Path:
    """A bin folder whose redis-server and redis-cli are the real ones on ``port`` (the
    container's are on 6379); redis-server records the command line it was given."""
    server, cli = shutil.which("redis-server"), shutil.which("redis-cli")
    if server is None or cli is None:
        if os.environ.get("CI"):
            pytest.fail("redis-server and redis-cli are required in CI")
        pytest.skip("redis-server or redis-cli is not installed")
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "redis-server").write_text(
        f'#!/bin/sh\nprintf "%s\\n" "$0" "$@" > {tmp_path}/argv\n'
        f'exec {server} "$@" --port {port} --bind 127.0.0.1 --dir {tmp_path}\n')
    (tools / "redis-cli").write_text(f'#!/bin/sh\nexec {cli} -p {port} "$@"\n')
    for tool in tools.iterdir():
        tool.chmod(0o755)
    return tools


@pytest.mark.integration  # starts a redis-server
def test_the_compose_redis_wants_its_password_and_its_health_check_gives_it(
        tmp_path: Path) -> None:
    """The compose Redis's own command and health check, run as they are (a real redis-server
    on a port of this test's): the password reaches the server on stdin, not its command line;
    the health check passes with it and fails without it; a Compactor URL with it works."""
    import redis

    port = _free_port()
    env = {"PATH": f"{_redis_tools(tmp_path, port)}:/usr/bin:/bin", "REDISCLI_AUTH": PASSWORD}
    command, check = redis_command()
    server = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 15
        while subprocess.run(["sh", "-c", check], env=env).returncode != 0:
            assert server.poll() is None and time.monotonic() < deadline, "Redis never healthy"
            time.sleep(0.1)
        for auth in ({}, {"REDISCLI_AUTH": "wrong-password-0123456789"}):
            unauthenticated = {"PATH": env["PATH"], **auth}
            assert subprocess.run(["sh", "-c", check], env=unauthenticated).returncode != 0
        refused = subprocess.run(["redis-cli", "set", "k", "v"], capture_output=True, text=True,
                                 env={"PATH": env["PATH"]})
        assert refused.stdout.startswith("NOAUTH")
        # what a Compactor container does with its COMPACTOR_REDIS_URL
        url = f"redis://:{PASSWORD}@redis:6379/0".replace("redis:6379", f"127.0.0.1:{port}")
        with redis.Redis.from_url(url) as client:
            assert client.ping()
            assert client.config_get("maxmemory-policy") == {"maxmemory-policy": "noeviction"}
            assert client.config_get("maxmemory") == {"maxmemory": str(1536 * 2**20)}
        argv = (tmp_path / "argv").read_text()
        assert argv.splitlines()[1] == "-" and "--maxmemory" in argv  # config from stdin
        assert PASSWORD not in argv and "requirepass" not in argv
    finally:
        server.kill()
        server.wait(10)


@pytest.mark.parametrize("password", ["short-0123", "sixteen or more but @ and spaces"])
def test_the_compose_redis_refuses_a_password_it_cannot_put_in_a_url(tmp_path: Path,
                                                                    password: str) -> None:
    """Too short, or characters a redis:// URL would need escaped: one line, exit 2, before
    redis-server is even started (redis-server here is a program that would fail the test)."""
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "redis-server").write_text("#!/bin/sh\necho started\nexit 99\n")
    (tools / "redis-server").chmod(0o755)
    command, _ = redis_command()
    env = {"PATH": f"{tools}:/usr/bin:/bin", "REDISCLI_AUTH": password}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "16 or more of A-Z a-z 0-9 . _ ~ -" in done.stderr


def _seconds(duration: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600}
    return sum(float(n) * units[u] for n, u in re.findall(r"([0-9.]+)([smh])", duration))


def test_compose_worker_stops_gracefully_and_serves_metrics() -> None:
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    worker = services["worker"]
    deadline = float(re.search(r"^COMPACTOR_JOB_DEADLINE_S=(\S+)", EXAMPLE, re.M).group(1))
    assert _seconds(worker["stop_grace_period"]) > deadline
    assert worker["environment"]["COMPACTOR_METRICS_PORT"] == "9808"
    assert worker["ports"] == ["127.0.0.1::9808"]  # loopback only on the host, one per replica
    assert "/readyz" in " ".join(worker["healthcheck"]["test"])
    assert services["flower"]["restart"].startswith("on-failure:")
    assert "EXPOSE 5555 8080 9808" in (REPO / "deploy" / "Dockerfile").read_text()


def test_the_image_has_what_every_service_runs_and_compose_serves_the_api() -> None:
    """The worker and Flower need the worker extra, ``compactor serve`` the server extra."""
    dockerfile = (REPO / "deploy" / "Dockerfile").read_text()
    [extras] = re.findall(r"pip install '\.\[([a-z,]+)\]'", dockerfile)
    assert {"worker", "server"} <= set(extras.split(","))
    api = yaml.safe_load(COMPOSE.read_text())["services"]["api"]
    assert api["command"][:2] == ["compactor", "serve"]
    assert "--insecure-no-auth" not in api["command"]
    assert api["environment"]["COMPACTOR_API_TOKENS"].startswith("${COMPACTOR_API_TOKENS:?")
    assert api["ports"] == ["127.0.0.1:8080:8080"]  # the host's loopback: TLS goes in front
    assert "/readyz" in " ".join(api["healthcheck"]["test"])


def test_the_env_examples_list_every_setting() -> None:
    from worker.hooks.settings import HookSettings

    listed = {name for path in EXAMPLES
              for name in re.findall(r"^#? ?(COMPACTOR_[A-Z0-9_]+)=", path.read_text(), re.M)}
    hooks = {f"COMPACTOR_HOOKS_{name.upper()}" for name in HookSettings.model_fields}
    missing = (_setting_names() - {"COMPACTOR_HOOKS"}) | hooks
    missing -= listed
    assert missing == set(), f"add these to deploy/*.env.example: {sorted(missing)}"


# -- the Grafana dashboard ----------------------------------------------------------------------
DASHBOARD = REPO / "deploy" / "grafana-dashboard.json"
_SUFFIXES = ("_bucket", "_count", "_sum")


def _dashboard_exprs() -> list[str]:
    import json

    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [target["expr"] for panel in panels for target in panel["targets"]]


def _metric(name: str) -> str:
    from worker.observability.metrics import METRIC_LABELS

    if name in METRIC_LABELS:
        return name
    for suffix in _SUFFIXES:
        if name.endswith(suffix) and name.removesuffix(suffix) in METRIC_LABELS:
            return name.removesuffix(suffix)
    raise AssertionError(f"the dashboard queries {name}, "
                         "which worker/observability/metrics.py does not export")


@pytest.mark.parametrize("expr", _dashboard_exprs())
def test_every_dashboard_query_uses_exported_metrics_and_labels(expr: str) -> None:
    from worker.observability.metrics import METRIC_LABELS

    names = re.findall(r"\bcompactor_[a-z_]+", expr)
    assert names, "a panel that queries no Compactor metric"
    labels: set[str] = set()
    for name in names:
        metric = _metric(name)
        labels |= set(METRIC_LABELS[metric]) | ({"le"} if name.endswith("_bucket") else set())
    used = set(re.findall(r"by \(([^)]*)\)", expr))
    grouped = {label.strip() for group in used for label in group.split(",")}
    matched = set(re.findall(r"([a-z_]+)=~?\"", expr))
    assert grouped | matched <= labels, (
        f"labels {sorted((grouped | matched) - labels)} not on {names}")


def test_the_dashboard_covers_what_on_call_needs() -> None:
    import json

    dashboard = json.loads(DASHBOARD.read_text())
    queried = {_metric(n) for e in _dashboard_exprs()
               for n in re.findall(r"\bcompactor_[a-z_]+", e)}
    from worker.observability.metrics import METRIC_NAMES

    assert queried == set(METRIC_NAMES)  # every metric has a panel
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    assert {p["datasource"]["uid"] for p in dashboard["panels"]} == {"${datasource}"}


def test_the_readme_documents_every_metric_and_the_port() -> None:
    from worker.observability.metrics import DEFAULT_ADDRESS, DEFAULT_PORT, METRIC_LABELS

    page = (REPO / "docs" / "operations.md").read_text()  # the README links it
    section = page[page.index("## Metrics"):]
    rows = dict(re.findall(r"^\| `(compactor_[a-z_]+)` \| [a-z]+ \| ([^|]*) \|", section, re.M))
    assert set(rows) == set(METRIC_LABELS)
    for name, labels in METRIC_LABELS.items():
        assert set(re.findall(r"`([a-z_]+)`", rows[name])) == set(labels), name
    assert "COMPACTOR_METRICS_PORT" in section and str(DEFAULT_PORT) in section
    assert f"`{DEFAULT_ADDRESS}`" in section


# -- the image ----------------------------------------------------------------------------------
def _version() -> str:
    import tomllib

    version: str = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    return version


def test_compose_runs_a_versioned_image_it_can_build_and_push(tmp_path: Path) -> None:
    compose = yaml.safe_load(COMPOSE.read_text())
    for name in COMPACTOR_SERVICES:
        service = compose["services"][name]
        assert service["image"].startswith("${IMAGE_NAME:-compactor}:${IMAGE_TAG:?"), name
        assert service["build"]["dockerfile"] == "deploy/Dockerfile"  # compose build, then push
    services = _rendered(tmp_path, DOTENV + "IMAGE_NAME=registry.example.com/compactor\n")
    assert {services[name]["image"] for name in COMPACTOR_SERVICES} == {
        "registry.example.com/compactor:0.1.0-0123456789ab"}
    assert "latest" not in COMPOSE.read_text()


def test_make_image_prints_the_build_push_and_deploy_commands_without_docker() -> None:
    done = subprocess.run(["make", "-s", "image", "DOCKER=no-such-docker",
                           "IMAGE_NAME=registry.example.com/compactor"], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    [tag] = re.findall(r"IMAGE_TAG=(\S+)", done.stdout)
    assert re.fullmatch(re.escape(_version()) + r"-[0-9a-f]{12}(-dirty)?", tag), tag
    ref = f"registry.example.com/compactor:{tag}"
    assert f"docker build -f deploy/Dockerfile -t {ref} ." in done.stdout
    assert f"docker push {ref}" in done.stdout
    assert f"kustomize edit set image compactor={ref}" in done.stdout
    release = subprocess.run(["make", "-s", "image", "DOCKER=no-such-docker",
                              f"IMAGE_TAG={_version()}"], cwd=REPO, capture_output=True,
                             text=True, timeout=60)
    assert f"-t compactor:{_version()} ." in release.stdout  # the tag deploy/k8s names


def _fake_docker(tmp_path: Path, daemon: bool) -> Path:
    """A docker CLI whose ``info`` answers only with a daemon; it records its other calls."""
    docker = tmp_path / "docker"
    docker.write_text(f'#!/bin/sh\nif [ "$1" = info ]; then exit {0 if daemon else 1}; fi\n'
                      f'echo "$@" >> {tmp_path}/calls\n')
    docker.chmod(0o755)
    return docker


@pytest.mark.parametrize("daemon", [False, True], ids=["cli-without-daemon", "daemon"])
def test_make_image_builds_only_when_a_docker_daemon_answers(tmp_path: Path,
                                                             daemon: bool) -> None:
    docker = _fake_docker(tmp_path, daemon)
    done = subprocess.run(["make", "-s", "image", f"DOCKER={docker}", "IMAGE_TAG=9.9.9"],
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    calls = (tmp_path / "calls").read_text() if (tmp_path / "calls").exists() else ""
    printed = "docker build -f deploy/Dockerfile -t compactor:9.9.9 ." in done.stdout
    assert (calls, printed) == (("build -f deploy/Dockerfile -t compactor:9.9.9 .\n", False)
                                if daemon else ("", True))
    assert "docker push compactor:9.9.9" in done.stdout


# -- the README ---------------------------------------------------------------------------------
def test_the_readme_deploying_section_says_how_to_run_it_securely() -> None:
    readme = (REPO / "README.md").read_text()
    assert "](docs/deploying.md)" in readme
    page = (REPO / "docs" / "deploying.md").read_text()
    section = page[:page.index("## Redis ACL and TLS")]
    for needle in (
        "cp deploy/compose.env.example .env",
        "cp deploy/compactor.env.example deploy/compactor.env",
        "cp deploy/worker.env.example deploy/worker.env", "REDIS_PASSWORD",
        "(#redis-acl-and-tls)", "make image", "docker push", "kustomize edit set image",
        "127.0.0.1:5555", "compactor-redis", "COMPACTOR_REQUIRE_MODELS", "COMPACTOR_MODELS",
        "KEDA must be installed",
    ):
        assert needle in section, needle
    assert "cp deploy/compactor.env.example .env" not in readme + page  # the old single .env
