"""The monitoring files (monitoring/): their PromQL, the metric names it reads, and promtool.

Tests check the alert rules with promtool, and that every metric name the dashboard and the
rules read is one a running server exports: a query of a name nothing exports shows an empty
panel, and an alert on it never fires.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent.parent
MONITORING = ROOT / "monitoring"
ALERTS = MONITORING / "alerts.yaml"
ALERTS_TEST = MONITORING / "alerts_test.yaml"
DASHBOARD = MONITORING / "grafana-dashboard.json"

#: What Grafana puts in place of the dashboard's variables, for the queries to parse as PromQL.
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$job": ".*", "$instance": ".*"}

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_MATCHERS = re.compile(r"\{[^}]*\}")
_RANGES = re.compile(r"\[[^\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
#: A name not inside a number (1e3) nor following a dot; a function is a name before "(".
_NAME = re.compile(r"(?<![\w.:])([a-zA-Z_:][\w:]*)(?![\w:]|\s*\()")
_KEYWORDS = frozenset(
    {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left", "group_right"}
)
_NOT_NAMES = frozenset({"inf", "nan"})


def promtool() -> str:
    """Debian's promtool (package `prometheus`). Missing, the test skips here and fails under
    CI, where .ci/run installs it: a rules test that quietly skips in CI tests nothing."""
    found = shutil.which("promtool")
    if found is None:
        reason = "no promtool on PATH (apt-get install -y prometheus)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    return found


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads (as plain names, not {__name__=...})."""
    text = _STRING.sub('""', expr)
    text = _MATCHERS.sub("", text)
    text = _RANGES.sub("", text)
    text = _GROUPING.sub("", text)
    names = {m[1] for m in _NAME.finditer(text)}
    return {n for n in names if n not in _KEYWORDS and n.lower() not in _NOT_NAMES}


def alert_rules(path: Path = ALERTS) -> list[dict[str, Any]]:
    rules = yaml.safe_load(path.read_text())
    return [rule for group in rules["groups"] for rule in group["rules"]]


def dashboard_queries(path: Path = DASHBOARD) -> dict[str, str]:
    """Every query of the dashboard (panels' targets, and the variables' label_values
    selectors) by where it is, with the Grafana variables replaced."""
    dashboard = json.loads(path.read_text())
    queries: dict[str, str] = {}
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            queries[f"{panel['title']} ({target['refId']})"] = target["expr"]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            found = re.fullmatch(r"label_values\((.*),\s*\w+\)", variable["query"]["query"])
            assert found, variable["query"]
            queries[f"${variable['name']}"] = found[1]
    for where, expr in queries.items():
        for variable, value in GRAFANA_VARIABLES.items():
            expr = expr.replace(variable, value)
        assert "$" not in expr, f"{where}: a variable the tests do not know: {expr}"
        queries[where] = expr
    return queries
