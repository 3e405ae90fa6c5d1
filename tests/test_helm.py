"""The Helm chart lints strictly, renders valid Kubernetes objects, and enforces its schema."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "helm" / "regroup"
sys.path.insert(0, str(ROOT / "tools"))

from helm import ensure_helm  # noqa: E402


@pytest.fixture(scope="module")
def helm() -> str:
    return str(ensure_helm())


def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, input=stdin, capture_output=True, text=True, timeout=120)


def test_chart_lints_strictly(helm: str) -> None:
    result = run(helm, "lint", "--strict", str(CHART), "--set", "database.url=postgresql://db/regroup")
    assert result.returncode == 0, result.stdout + result.stderr


def test_rendered_manifests_are_valid_kubernetes_objects(helm: str) -> None:
    rendered = run(helm, "template", "rg", str(CHART), "--set", "database.existingSecret=regroup-db")
    assert rendered.returncode == 0, rendered.stderr
    validate = Path(sys.executable).parent / "kubernetes-validate"
    result = run(str(validate), "--strict", "--quiet", "-", stdin=rendered.stdout)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "kind: Deployment" in rendered.stdout and "type: Recreate" in rendered.stdout
    assert "helm.sh/hook: pre-install,pre-upgrade" in rendered.stdout  # migrations run before rollout


def test_schema_requires_a_database_and_a_single_replica(helm: str) -> None:
    missing = run(helm, "template", "rg", str(CHART))
    assert missing.returncode != 0
    two = run(helm, "template", "rg", str(CHART), "--set", "database.url=x", "--set", "replicaCount=2")
    assert two.returncode != 0
    assert "replicaCount" in two.stderr
