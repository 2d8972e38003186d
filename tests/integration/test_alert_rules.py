"""The shipped Prometheus alert rules and Grafana dashboard (deploy/): promtool checks and
unit-tests the rules, parses every dashboard query, and every metric they name is one that a
real API server's /metrics describes."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import httpx
import yaml
from prometheus_client.parser import text_string_to_metric_families

from agentflow.api.app import create_app
from agentflow.engine import Engine
from tests.support.http_server import serve

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
RULES = DEPLOY / "prometheus" / "agentflow-alerts.yml"
RULE_TESTS = DEPLOY / "prometheus" / "agentflow-alerts.test.yml"
DASHBOARD = DEPLOY / "grafana" / "agentflow-dashboard.json"
SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_count", "_sum", "_created")}


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    found = shutil.which("promtool")
    assert found, "promtool is missing: install Debian's prometheus package (the README's test command does)"
    return subprocess.run([found, *args], capture_output=True, text=True, timeout=120, check=False)


def dashboard_queries() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]


def rule_queries() -> list[str]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule["expr"] for group in groups for rule in group["rules"]]


def test_promtool_checks_the_rules_and_their_unit_tests_pass() -> None:
    checked = promtool("check", "rules", str(RULES))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 8 rules found" in checked.stdout
    tested = promtool("test", "rules", str(RULE_TESTS))
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_promtool_catches_a_broken_rule(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yml"
    broken.write_text(RULES.read_text().replace("agentflow_database_up == 0", "agentflow_database_up ==", 1))
    assert promtool("check", "rules", str(broken)).returncode != 0
    wrong = tmp_path / "wrong.yml"
    wrong.write_text(RULES.read_text().replace("> 300", "> 3000", 1))
    (tmp_path / "agentflow-alerts.yml").write_text(wrong.read_text())
    (tmp_path / "tests.yml").write_text(RULE_TESTS.read_text())
    assert promtool("test", "rules", str(tmp_path / "tests.yml")).returncode != 0, "a changed threshold fails"


def test_every_dashboard_query_parses(tmp_path: Path) -> None:
    queries = dashboard_queries()
    assert len(queries) >= 20
    as_rules = {
        "groups": [
            {"name": "dashboard", "rules": [{"record": f"q{i}", "expr": q} for i, q in enumerate(queries)]}
        ]
    }
    path = tmp_path / "dashboard-queries.yml"
    path.write_text(yaml.safe_dump(as_rules))
    checked = promtool("check", "rules", str(path))
    assert checked.returncode == 0, checked.stdout + checked.stderr


async def test_every_metric_named_is_one_agentflow_serves(engine: Engine) -> None:
    async with serve(create_app(engine)) as base, httpx.AsyncClient(base_url=base) as client:
        response = await client.get("/metrics")
    assert response.status_code == 200
    served: set[str] = set()
    for family in text_string_to_metric_families(response.text):
        served |= {family.name + suffix for suffix in SUFFIXES.get(family.type, ())} | {family.name}
    named = {
        name
        for query in dashboard_queries() + rule_queries()
        for name in re.findall(r"\bagentflow_[a-z_]+", query)
    }
    assert len(named) >= 15
    assert named <= served, sorted(named - served)


def _panels() -> list[dict[str, Any]]:
    panels: list[dict[str, Any]] = json.loads(DASHBOARD.read_text())["panels"]
    return panels


def test_the_dashboard_is_well_formed() -> None:
    panels = _panels()
    assert len({p["id"] for p in panels}) == len(panels)
    for panel in panels:
        assert panel["datasource"]["uid"] == "${datasource}" and panel["targets"], panel["title"]
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
