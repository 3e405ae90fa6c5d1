"""The monitoring files: the alert rules pass promtool's check and their unit tests, every
alert has a test, the dashboard's queries parse as PromQL, and the chart's copy of the rules
is the repository's. (tests/integration/test_metrics.py checks the metric names they read
against a running server's.)"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.support.monitoring import (
    ALERTS,
    ALERTS_TEST,
    DASHBOARD,
    ROOT,
    alert_rules,
    dashboard_queries,
    metric_names,
    promtool,
)

CHART_ALERTS = ROOT / "helm" / "regroup" / "files" / "alerts.yaml"


@pytest.fixture(scope="module")
def tool() -> str:
    return promtool()


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=120)


def test_the_alert_rules_pass_promtools_check_and_their_unit_tests(tool: str) -> None:
    checked = run(tool, "check", "rules", str(ALERTS))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = run(tool, "test", "rules", str(ALERTS_TEST))
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_every_alert_has_a_unit_test() -> None:
    alerts = {rule["alert"] for rule in alert_rules()}
    assert alerts == {
        "RegroupStoreDown",
        "RegroupNoLeaseHeld",
        "RegroupRebalanceNotStable",
        "RegroupHeartbeatLatencyHigh",
        "RegroupCallsRefused",
    }
    tests = yaml.safe_load(ALERTS_TEST.read_text())["tests"]
    fired = {
        case["alertname"] for test in tests for case in test["alert_rule_test"] if case.get("exp_alerts")
    }
    assert fired == alerts


def test_the_dashboards_queries_parse_as_promql(tool: str, tmp_path: Path) -> None:
    """promtool has no query parser of its own: each query becomes a recording rule, which
    `check rules` parses."""
    queries = dashboard_queries()
    assert len(queries) >= 20
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {"record": f"dashboard:query_{i}", "expr": q} for i, q in enumerate(queries.values())
                ],
            }
        ]
    }
    path = tmp_path / "dashboard-queries.yaml"
    path.write_text(yaml.safe_dump(rules))
    checked = run(tool, "check", "rules", str(path))
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_dashboard_reads_from_its_data_source_variable() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    sources = {
        json.dumps(target["datasource"], sort_keys=True)
        for panel in dashboard["panels"]
        for target in panel.get("targets", [])
    }
    assert sources == {json.dumps({"type": "prometheus", "uid": "${datasource}"}, sort_keys=True)}
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])


def test_metric_names_are_read_from_promql() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (le, instance) (rate(a_bucket{le!="1", b="c"}[5m]))) > 1e3 '
        "unless on (instance) b_total offset 5m > bool ns:c"
    )
    assert metric_names(expr) == {"a_bucket", "b_total", "ns:c"}


def test_the_charts_rules_are_the_repositorys() -> None:
    assert CHART_ALERTS.read_text() == ALERTS.read_text()
