"""One settings path: `outlive serve`, `outlive worker` and the embedded runner build their
`RuntimeSettings` with `outlive.cli.settings.runtime_settings`, and `serve` takes every option
`worker` takes, with the same names, defaults, help and environment variables."""

from __future__ import annotations

import gc
import logging
import os
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from outlive.cli import app, event_loop
from outlive.cli import options as options_module
from outlive.cli import serve as serve_module
from outlive.cli.embedded import embedded
from outlive.cli.options import agent_modules
from outlive.cli.serve import ServePlan
from outlive.cli.settings import WorkerOptions, runtime_settings
from outlive.runtime import RuntimeSettings


def _command(name: str) -> Any:
    """The click command typer made of `name` (typer carries its own click)."""
    return typer.main.get_command(app).commands[name]  # type: ignore[attr-defined]


def _options(name: str) -> dict[str, Any]:
    return {p.name: p for p in _command(name).params if p.name is not None}


def test_serve_takes_every_worker_option_with_the_same_name_default_help_and_variable() -> None:
    worker, serve = _options("worker"), _options("serve")
    assert {"heartbeat", "backstop", "grace", "loop", "concurrency", "lease_ttl",
            "worker_id"} <= set(worker)
    for name, param in worker.items():
        assert name in serve, f"serve lacks worker's {param.opts}"
        other = serve[name]
        assert set(param.opts) <= set(other.opts), (name, param.opts, other.opts)
        assert (other.default, other.help, other.envvar) == (
            param.default, param.help, param.envvar), name


def test_serve_help_lists_every_option_worker_help_lists() -> None:
    runner = CliRunner()
    shown = {name: runner.invoke(app, [name, "--help"], prog_name="outlive",
                                 env={"COLUMNS": "200"}) for name in ("worker", "serve")}
    assert all(r.exit_code == 0 for r in shown.values()), shown
    for param in _command("worker").params:
        for opt in param.opts:
            assert opt in shown["worker"].output
            assert opt in shown["serve"].output, f"serve --help does not list {opt}"
    assert "--workers" in shown["serve"].output  # serve's older name for --concurrency


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """Run `serve` and `worker` in this process up to their event loop: records the
    settings each built through `runtime_settings`, and serve's plan."""
    seen: dict[str, Any] = {"settings": [], "plans": []}

    def spy(options: WorkerOptions) -> RuntimeSettings:
        settings = runtime_settings(options)
        seen["settings"].append(settings)
        return settings

    async def no_server() -> None:
        return None

    def plan_only(plan: ServePlan) -> Coroutine[Any, Any, None]:
        seen["plans"].append(plan)
        return no_server()

    def stop(main: Coroutine[Any, Any, Any], factory: object) -> None:
        main.close()

    for name in [n for n in os.environ if n.startswith("OUTLIVE_")]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(options_module, "runtime_settings", spy)
    monkeypatch.setattr(serve_module, "run_server", plan_only)
    monkeypatch.setattr(event_loop, "run", stop)
    thresholds, root = gc.get_threshold(), logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        yield seen
    finally:
        gc.set_threshold(*thresholds)
        root.handlers[:], root.level = handlers, level


def _invoke(*args: str, env: dict[str, str] | None = None) -> None:
    result = CliRunner().invoke(app, list(args), env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output


WORKER_ARGS = ["--concurrency", "7", "--lease-ttl", "6", "--heartbeat", "1.5", "--backstop",
               "0", "--grace", "3", "--retain", "30d", "--compact-after", "off",
               "--allow-private-webhooks", "--webhook-backoff", "2", "--webhook-backoff-max",
               "60", "--webhook-timeout", "4", "--loop", "asyncio"]


def test_the_same_options_give_serve_and_worker_equal_settings(captured: dict[str, Any]) -> None:
    _invoke("worker", *WORKER_ARGS)
    _invoke("serve", "--port", "0", *WORKER_ARGS)
    worker, serve = captured["settings"]
    assert worker == serve == RuntimeSettings(
        concurrency=7, lease_ttl=6.0, heartbeat_interval=1.5, backstop_interval=None, grace=3.0,
        retain=30 * 86400.0, compact_after=None, allow_private_webhooks=True,
        webhook_backoff=2.0, webhook_backoff_max=60.0, webhook_timeout=4.0)
    assert captured["plans"][0].settings == serve


def test_serve_keeps_workers_as_the_old_name_of_concurrency(captured: dict[str, Any]) -> None:
    _invoke("serve", "--port", "0", "--workers", "9")
    assert captured["settings"][0].concurrency == 9


async def test_the_embedded_runner_builds_its_settings_the_same_way(tmp_path: Path) -> None:
    options = WorkerOptions(lease_ttl=4.0, concurrency=3, compact_after="1h")
    async with embedded(tmp_path / "a.db", options=options) as env:
        assert env.worker.settings == runtime_settings(options)
    async with embedded(tmp_path / "b.db") as env:
        assert env.worker.settings == runtime_settings(WorkerOptions())


def test_defaults_are_the_same_on_every_path(captured: dict[str, Any]) -> None:
    _invoke("worker")
    _invoke("serve", "--port", "0")
    assert captured["settings"] == [runtime_settings(WorkerOptions())] * 2


def test_a_wrong_duration_or_heartbeat_is_a_usage_error(captured: dict[str, Any]) -> None:
    for args, says in ((["--retain", "soon"], "--retain: not a duration"),
                       (["--lease-ttl", "2", "--heartbeat", "3"], "heartbeat_interval")):
        for command in (["worker"], ["serve", "--port", "0"]):
            result = CliRunner().invoke(app, [*command, *args])
            assert result.exit_code == 2, result.output
            assert says in " ".join(result.output.split()), result.output


def test_serve_reads_its_environment_through_its_options(captured: dict[str, Any]) -> None:
    _invoke("serve", "--port", "0", env={
        "OUTLIVE_DB": "sqlite:///env.db", "OUTLIVE_LISTEN_DB": "postgresql://direct/x",
        "OUTLIVE_COOKIE_SECURE": "1", "OUTLIVE_METRICS_TOKEN": "t0k",
        "OUTLIVE_METRICS_PORT": "9123", "OUTLIVE_FORWARDED_ALLOW_IPS": "10.0.0.1",
        "OUTLIVE_RETAIN": "12h", "OUTLIVE_WEBHOOK_TIMEOUT": "7"})
    plan: ServePlan = captured["plans"][0]
    assert (plan.url, plan.listen_url) == ("sqlite:///env.db", "postgresql://direct/x")
    assert plan.api_settings.cookie_secure and plan.api_settings.metrics_token == "t0k"
    assert (plan.metrics_port, plan.forwarded_allow_ips) == (9123, "10.0.0.1")
    assert (plan.settings.retain, plan.settings.webhook_timeout) == (12 * 3600.0, 7.0)
    _invoke("serve", "--port", "0")
    plan = captured["plans"][1]
    assert (plan.url, plan.listen_url, plan.forwarded_allow_ips) == (
        "sqlite:///./outlive.db", None, "127.0.0.1")
    assert not plan.api_settings.cookie_secure and plan.api_settings.metrics_token is None


def test_agents_come_from_the_option_or_a_comma_separated_variable() -> None:
    assert agent_modules(None) == []
    assert agent_modules(["a.py", "b, c.toml", ""]) == ["a.py", "b", "c.toml"]


def test_serve_takes_cors_origins_from_the_option_and_the_environment(
        captured: dict[str, Any]) -> None:
    _invoke("serve", "--port", "0", "--cors-origin", "https://app.example",
            "--cors-origin", "http://127.0.0.1:5173")
    _invoke("serve", "--port", "0",
            env={"OUTLIVE_CORS_ORIGINS": "https://a.example https://b.example:8443"})
    first, second = captured["plans"]
    assert first.api_settings.cors_origins == ("https://app.example", "http://127.0.0.1:5173")
    assert second.api_settings.cors_origins == ("https://a.example", "https://b.example:8443")
    result = CliRunner().invoke(app, ["serve", "--port", "0", "--cors-origin",
                                      "https://app.example/path"])
    assert result.exit_code == 2 and "--cors-origin" in result.output, result.output
