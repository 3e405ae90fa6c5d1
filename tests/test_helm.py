"""The Helm chart lints strictly, renders valid Kubernetes objects, and enforces its schema."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

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


# --- Rendering helpers for the tests below --------------------------------------------------------

DB = "database.url=postgresql://db/regroup"


def render(
    helm: str, *sets: str, values: dict[str, Any] | None = None, chart: Path = CHART
) -> list[dict[str, Any]]:
    """The documents `helm template` renders (hooks included) with these --set and values."""
    import yaml

    args = [a for s in sets for a in ("--set", s)]
    if values is not None:
        args += ["-f", "-"]
    result = run(helm, "template", "rg", str(chart), *args, stdin=yaml.safe_dump(values) if values else None)
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d]


def render_error(helm: str, *sets: str) -> str:
    result = run(helm, "template", "rg", str(CHART), *[a for s in sets for a in ("--set", s)])
    assert result.returncode != 0, result.stdout
    return result.stderr


def one(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    (found,) = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    return found


def pods(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The pod templates, by the kind of their owner."""
    return {d["kind"]: d["spec"]["template"] for d in docs if d["kind"] in ("Deployment", "Job")}


def hook(doc: dict[str, Any]) -> dict[str, str]:
    annotations = doc["metadata"].get("annotations") or {}
    return {k: v for k, v in annotations.items() if k.startswith("helm.sh/hook")}


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


# --- Defects of issue 19 -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "sets", [(DB,), ("database.existingSecret=regroup-db", "serviceAccount.create=false")]
)
def test_pods_meet_the_restricted_pod_security_standard(helm: str, sets: tuple[str, ...]) -> None:
    """The Pod Security "restricted" profile's checks, for the server and the migration pods."""
    templates = pods(render(helm, *sets))
    assert set(templates) == {"Deployment", "Job"}
    for owner, template in templates.items():
        spec = template["spec"]
        pod = spec["securityContext"]
        assert pod["seccompProfile"] == {"type": "RuntimeDefault"}, owner
        assert pod["runAsNonRoot"] is True and pod["runAsUser"] != 0, owner
        assert not {"hostNetwork", "hostPID", "hostIPC"} & set(spec), owner
        for volume in spec.get("volumes", []):
            assert set(volume) - {"name"} <= {"emptyDir", "secret", "configMap", "projected"}, volume
        for container in spec["containers"]:
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False, owner
            assert context["capabilities"]["drop"] == ["ALL"] and "add" not in context["capabilities"], owner
            assert context.get("privileged") is not True, owner
            assert context["readOnlyRootFilesystem"] is True, owner
            assert context.get("seccompProfile", pod["seccompProfile"]) == {"type": "RuntimeDefault"}, owner


def test_global_values_make_it_usable_as_a_subchart(helm: str, tmp_path: Path) -> None:
    parent = tmp_path / "platform"
    (parent / "charts").mkdir(parents=True)
    (parent / "Chart.yaml").write_text("apiVersion: v2\nname: platform\nversion: 1.0.0\n")
    shutil.copytree(CHART, parent / "charts" / "regroup")
    values = {
        "global": {
            "imageRegistry": "mirror.example.com",
            "imagePullSecrets": [{"name": "from-global"}, "shared"],
            "unrelated": {"of": "another subchart"},
        },
        "regroup": {"database": {"url": "postgresql://db/regroup"}, "imagePullSecrets": ["shared", "own"]},
    }

    docs = render(helm, values=values, chart=parent)

    for owner, template in pods(docs).items():
        spec = template["spec"]
        assert spec["containers"][0]["image"] == "mirror.example.com/regroup/regroup:0.1.0", owner
        assert spec["imagePullSecrets"] == [{"name": n} for n in ("from-global", "shared", "own")], owner
    standalone = pods(render(helm, DB))["Deployment"]["spec"]
    assert standalone["containers"][0]["image"] == "ghcr.io/regroup/regroup:0.1.0"
    assert "imagePullSecrets" not in standalone


def test_a_changed_dsn_restarts_the_pods(helm: str) -> None:
    def checksum(*sets: str) -> str:
        template = pods(render(helm, *sets))["Deployment"]
        return str(template["metadata"]["annotations"]["checksum/database"])

    first = checksum("database.url=postgresql://db-1/regroup")
    assert checksum("database.url=postgresql://db-1/regroup") == first
    assert checksum("database.url=postgresql://db-2/regroup") != first
    assert checksum("database.existingSecret=a") != checksum("database.existingSecret=b")
    assert checksum("database.existingSecret=a", "database.existingSecretKey=OTHER") != checksum(
        "database.existingSecret=a"
    )
    annotations = pods(render(helm, DB, "podAnnotations.team=x"))["Deployment"]["metadata"]["annotations"]
    assert annotations["team"] == "x" and "checksum/database" in annotations


def test_the_database_secret_is_a_release_resource_and_the_migration_job_still_reads_one(helm: str) -> None:
    docs = render(helm, DB)
    deployment_secret = pods(docs)["Deployment"]["spec"]["containers"][0]["env"][0]["valueFrom"][
        "secretKeyRef"
    ]
    secret = one(docs, "Secret", deployment_secret["name"])
    # An ordinary resource: updated by upgrades, deleted by uninstall (a hook outlives the release).
    assert hook(secret) == {}
    assert secret["stringData"][deployment_secret["key"]] == "postgresql://db/regroup"
    # The Job runs before the release's resources exist (pre-install): it reads a copy made for it,
    # created just before it and deleted when the hooks succeed.
    job = one(docs, "Job")
    job_secret = pods(docs)["Job"]["spec"]["containers"][0]["env"][0]["valueFrom"]["secretKeyRef"]
    copy = one(docs, "Secret", job_secret["name"])
    assert copy is not secret and copy["stringData"] == secret["stringData"]
    assert hook(job)["helm.sh/hook"] == hook(copy)["helm.sh/hook"] == "pre-install,pre-upgrade"
    assert int(hook(copy)["helm.sh/hook-weight"]) < int(hook(job)["helm.sh/hook-weight"])
    assert set(hook(copy)["helm.sh/hook-delete-policy"].split(",")) == {
        "before-hook-creation",
        "hook-succeeded",
    }
    # The same for its ServiceAccount, which the release creates after pre-install hooks.
    service_account = one(docs, "ServiceAccount", pods(docs)["Job"]["spec"]["serviceAccountName"])
    assert hook(service_account)["helm.sh/hook"] == "pre-install,pre-upgrade"
    assert int(hook(service_account)["helm.sh/hook-weight"]) < int(hook(job)["helm.sh/hook-weight"])
    # Nothing else is a hook.
    assert sorted(d["kind"] for d in docs if hook(d)) == ["Job", "Secret", "ServiceAccount"]

    existing = render(helm, "database.existingSecret=regroup-db")
    assert not [d for d in existing if d["kind"] == "Secret"]
    for template in pods(existing).values():
        assert (
            template["spec"]["containers"][0]["env"][0]["valueFrom"]["secretKeyRef"]["name"] == "regroup-db"
        )


def test_the_service_never_routes_to_the_migration_job(helm: str) -> None:
    docs = render(helm, DB)
    service = one(docs, "Service")["spec"]["selector"]
    deployment = one(docs, "Deployment")["spec"]["selector"]["matchLabels"]
    templates = pods(docs)
    server_labels, job_labels = (
        templates["Deployment"]["metadata"]["labels"],
        templates["Job"]["metadata"]["labels"],
    )
    assert selects(service, server_labels) and selects(deployment, server_labels)
    assert not selects(service, job_labels)
    assert not selects(deployment, job_labels)


def test_the_migration_job_is_bounded(helm: str) -> None:
    job = one(render(helm, DB), "Job")
    assert job["spec"]["activeDeadlineSeconds"] == 300
    assert job["spec"]["ttlSecondsAfterFinished"] == 86400
    resources = job["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert resources["requests"]["cpu"] and resources["requests"]["memory"] and resources["limits"]["memory"]

    job = one(
        render(
            helm,
            DB,
            "migrations.activeDeadlineSeconds=900",
            "migrations.ttlSecondsAfterFinished=60",
            "migrations.resources.limits.memory=1Gi",
        ),
        "Job",
    )
    assert (job["spec"]["activeDeadlineSeconds"], job["spec"]["ttlSecondsAfterFinished"]) == (900, 60)
    assert job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"] == "1Gi"


def test_a_starting_replica_is_given_a_startup_probe(helm: str) -> None:
    def container(*sets: str) -> dict[str, Any]:
        return dict(pods(render(helm, DB, *sets))["Deployment"]["spec"]["containers"][0])

    probe = container()["startupProbe"]
    assert probe["grpc"] == {"port": 50051, "service": "process"}
    assert probe["periodSeconds"] * probe["failureThreshold"] >= 300
    # Liveness waits for the startup probe instead of guessing a delay.
    assert "initialDelaySeconds" not in container()["livenessProbe"]
    longer = container("probes.startupTimeoutSeconds=900")["startupProbe"]
    assert longer["periodSeconds"] * longer["failureThreshold"] >= 900


def test_pods_carry_the_recommended_labels(helm: str) -> None:
    templates = pods(
        render(helm, DB, "podLabels.team=streaming", "podLabels.app\\.kubernetes\\.io/instance=x")
    )
    for owner, component in (("Deployment", "server"), ("Job", "migrate")):
        labels = templates[owner]["metadata"]["labels"]
        assert labels == {
            "app.kubernetes.io/name": "regroup",
            "app.kubernetes.io/instance": "rg",  # podLabels cannot replace it: the selectors use it
            "app.kubernetes.io/component": component,
            "app.kubernetes.io/version": "0.1.0",
            "app.kubernetes.io/part-of": "regroup",
            "app.kubernetes.io/managed-by": "Helm",
            "team": "streaming",
        }, owner


def test_pods_run_under_their_own_service_account_without_a_token(helm: str) -> None:
    docs = render(helm, DB, "serviceAccount.annotations.iam\\.example\\.com/role=regroup")
    account = one(docs, "ServiceAccount", "rg-regroup")
    assert hook(account) == {}
    assert account["automountServiceAccountToken"] is False
    assert account["metadata"]["annotations"] == {"iam.example.com/role": "regroup"}
    templates = pods(docs)
    assert templates["Deployment"]["spec"]["serviceAccountName"] == "rg-regroup"
    job_account = one(docs, "ServiceAccount", templates["Job"]["spec"]["serviceAccountName"])
    assert job_account["metadata"]["annotations"]["iam.example.com/role"] == "regroup"
    for template in templates.values():
        assert template["spec"]["automountServiceAccountToken"] is False

    named = render(helm, DB, "serviceAccount.name=coordinator")
    assert one(named, "ServiceAccount", "coordinator")
    assert pods(named)["Deployment"]["spec"]["serviceAccountName"] == "coordinator"

    theirs = render(helm, DB, "serviceAccount.create=false", "serviceAccount.name=platform")
    assert not [d for d in theirs if d["kind"] == "ServiceAccount"]
    assert {t["spec"]["serviceAccountName"] for t in pods(theirs).values()} == {"platform"}
    defaulted = render(helm, DB, "serviceAccount.create=false")
    assert {t["spec"]["serviceAccountName"] for t in pods(defaulted).values()} == {"default"}


def test_extra_env_reaches_the_server_and_the_migration_job(helm: str) -> None:
    values = {
        "database": {"url": "postgresql://db/regroup"},
        "extraEnv": [
            {"name": "PGSSLROOTCERT", "value": "/certs/ca.pem"},
            {"name": "PGAPPNAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        ],
    }
    for owner, template in pods(render(helm, values=values)).items():
        env = template["spec"]["containers"][0]["env"]
        assert env[-2:] == values["extraEnv"], owner


def test_name_overrides(helm: str) -> None:
    docs = render(helm, DB, "nameOverride=coordinator")
    assert one(docs, "Deployment")["metadata"]["name"] == "rg-coordinator"
    assert one(docs, "Service")["spec"]["selector"]["app.kubernetes.io/name"] == "coordinator"
    assert one(docs, "Job")["metadata"]["name"] == "rg-coordinator-migrate"

    docs = render(helm, DB, "fullnameOverride=groups")
    assert {d["metadata"]["name"] for d in docs if d["kind"] in ("Deployment", "Service")} == {"groups"}
    assert one(docs, "Secret", "groups-database") and one(docs, "Job")["metadata"]["name"] == "groups-migrate"

    long = render(helm, DB, "fullnameOverride=" + "x" * 63)
    job = one(long, "Job")["metadata"]["name"]
    assert len(job) <= 63 and job.endswith("-migrate")  # it becomes the job-name label of its pods


def test_a_missing_database_is_a_clear_error(helm: str) -> None:
    error = render_error(helm)
    assert "database: set database.url" in error and "database.existingSecret" in error


def test_two_databases_are_a_clear_error(helm: str) -> None:
    error = render_error(helm, DB, "database.existingSecret=regroup-db")
    assert "database: set database.url or database.existingSecret, not both" in error


@pytest.mark.parametrize(
    "sets",
    [
        (DB,),
        (
            DB,
            "serviceAccount.annotations.iam\\.example\\.com/role=regroup",
            "podLabels.team=streaming",
            "extraEnv[0].name=PGAPPNAME",
            "extraEnv[0].value=regroup",
            "global.imageRegistry=mirror.example.com",
            "global.imagePullSecrets[0]=pull",
            "nameOverride=coordinator",
        ),
        ("database.existingSecret=regroup-db", "serviceAccount.create=false", "migrations.enabled=false"),
    ],
)
def test_every_variant_renders_valid_kubernetes_objects(helm: str, sets: tuple[str, ...]) -> None:
    rendered = run(helm, "template", "rg", str(CHART), *[a for s in sets for a in ("--set", s)])
    assert rendered.returncode == 0, rendered.stderr
    validate = Path(sys.executable).parent / "kubernetes-validate"
    result = run(str(validate), "--strict", "--quiet", "-", stdin=rendered.stdout)
    assert result.returncode == 0, result.stdout + result.stderr
    lint = run(helm, "lint", "--strict", str(CHART), *[a for s in sets for a in ("--set", s)])
    assert lint.returncode == 0, lint.stdout + lint.stderr
