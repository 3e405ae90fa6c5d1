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


def test_rendered_environment_is_read_by_the_server(helm: str) -> None:
    """Every REGROUP_* value the chart renders parses as the server's configuration
    (Helm turns large integers into floats such as 4.194304e+06 unless told not to)."""
    import yaml

    from regroup.server.config import load_settings

    rendered = run(
        helm,
        "template",
        "rg",
        str(CHART),
        "--set",
        "database.url=postgresql://db/regroup",
        "--set",
        "config.maxGroupSize=5000",
    )
    assert rendered.returncode == 0, rendered.stderr
    deployment = next(d for d in yaml.safe_load_all(rendered.stdout) if d and d.get("kind") == "Deployment")
    env = {
        e["name"]: e["value"]
        for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]
        if "value" in e and e["name"].startswith("REGROUP_")
    }
    assert "e+" not in "".join(env.values()), env
    settings = load_settings(env)
    assert settings.max_message_bytes == 4_194_304
    assert settings.max_group_size == 5000
    assert settings.offsets_retention_ms == 604_800_000
    assert settings.assignment_interval_ms == 1000
    assert settings.accept_depth == 8
    assert (settings.store_check_ms, settings.store_timeout_ms) == (1000, 10_000)


def test_probes_read_the_process_name_unless_readiness_follows_the_store(helm: str) -> None:
    import yaml

    def probes(*sets: str) -> tuple[str, str]:
        args = [a for s in ("database.url=postgresql://db/regroup", *sets) for a in ("--set", s)]
        rendered = run(helm, "template", "rg", str(CHART), *args)
        assert rendered.returncode == 0, rendered.stderr
        deployment = next(
            d for d in yaml.safe_load_all(rendered.stdout) if d and d.get("kind") == "Deployment"
        )
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        return container["readinessProbe"]["grpc"]["service"], container["livenessProbe"]["grpc"]["service"]

    assert probes() == ("process", "process")
    assert probes("probes.readinessFollowsStore=true") == ("", "process")
