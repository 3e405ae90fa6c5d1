"""The Helm chart lints strictly, renders valid Kubernetes objects, and enforces its schema."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
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
    assert "kind: Deployment" in rendered.stdout and "type: RollingUpdate" in rendered.stdout
    assert "helm.sh/hook: pre-install,pre-upgrade" in rendered.stdout  # migrations run before rollout


def test_schema_requires_a_database_and_at_least_one_replica(helm: str) -> None:
    missing = run(helm, "template", "rg", str(CHART))
    assert missing.returncode != 0
    none = run(helm, "template", "rg", str(CHART), "--set", "database.url=x", "--set", "replicaCount=0")
    assert none.returncode != 0
    assert "replicaCount" in none.stderr
    five = run(helm, "template", "rg", str(CHART), "--set", "database.url=x", "--set", "replicaCount=5")
    assert five.returncode == 0, five.stderr


#: Rendered variables that are not settings: POD_IP only feeds REGROUP_ADVERTISED_ADDRESS.
HELPER_VARIABLES = frozenset({"POD_IP"})

#: The many-replicas settings the chart renders (issue 20).
LEASE_SETTINGS = frozenset(
    {"REGROUP_SHARDS", "REGROUP_LEASE_MS", "REGROUP_LEASE_RENEW_MS", "REGROUP_FORWARD"}
)

#: What Kubernetes puts in a fieldRef variable, for the test to expand $(NAME) as it would.
FIELD_SAMPLES = {"metadata.name": "rg-regroup-7d9f8c6b5-x2x4q", "status.podIP": "10.1.2.3"}


def container_env(container: dict[str, Any]) -> dict[str, str]:
    """A container's environment as the server sees it: fieldRefs filled with samples and
    $(NAME) references expanded as Kubernetes does; secrets and others left out."""
    env: dict[str, str] = {}
    for entry in container["env"]:
        if "value" in entry:
            value = re.sub(r"\$\((\w+)\)", lambda m: env.get(m[1], m[0]), str(entry["value"]))
        elif "fieldRef" in entry.get("valueFrom", {}):
            value = FIELD_SAMPLES[entry["valueFrom"]["fieldRef"]["fieldPath"]]
        else:
            continue
        env[entry["name"]] = value
    return env


def test_rendered_environment_is_read_by_the_server(helm: str) -> None:
    """Every variable the chart renders is one the server reads, and its value parses as
    the server's configuration (Helm turns large integers into floats such as 4.194304e+06
    unless told not to)."""
    from regroup.server import config
    from regroup.server.config import load_settings

    docs = render(helm, DB, "config.maxGroupSize=5000")
    read = set(config._ENV.values())
    for owner, template in pods(docs).items():
        names = {e["name"] for e in template["spec"]["containers"][0]["env"]}
        unread = names - read - HELPER_VARIABLES
        assert not unread, f"{owner} sets {sorted(unread)}, which server/config.py does not read"

    env = container_env(pods(docs)["Deployment"]["spec"]["containers"][0])
    assert "e+" not in "".join(env.values()), env
    assert env["REGROUP_ADVERTISED_ADDRESS"] == "10.1.2.3:50051"
    settings = load_settings(env)
    assert settings.max_message_bytes == 4_194_304
    assert settings.max_group_size == 5000
    assert settings.offsets_retention_ms == 604_800_000
    assert settings.assignment_interval_ms == 1000
    assert settings.accept_depth == 8
    assert (settings.store_check_ms, settings.store_timeout_ms) == (1000, 10_000)
    assert settings.replica_id == FIELD_SAMPLES["metadata.name"]


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
#: An image digest (what `image.digest` takes).
DIGEST = "sha256:" + "0123456789abcdef" * 4


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
    service = one(docs, "Service", "rg-regroup")["spec"]["selector"]
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
    assert (
        one(docs, "Service", "rg-coordinator")["spec"]["selector"]["app.kubernetes.io/name"] == "coordinator"
    )
    assert one(docs, "Service", "rg-coordinator-headless")
    assert one(docs, "Job")["metadata"]["name"] == "rg-coordinator-migrate"

    docs = render(helm, DB, "fullnameOverride=groups")
    assert {d["metadata"]["name"] for d in docs if d["kind"] in ("Deployment", "Service")} == {
        "groups",
        "groups-headless",
    }
    assert one(docs, "Secret", "groups-database") and one(docs, "Job")["metadata"]["name"] == "groups-migrate"

    long = render(helm, DB, "fullnameOverride=" + "x" * 63)
    job = one(long, "Job")["metadata"]["name"]
    assert len(job) <= 63 and job.endswith("-migrate")  # it becomes the job-name label of its pods
    (headless,) = [
        d["metadata"]["name"] for d in long if d["kind"] == "Service" and d["metadata"]["name"] != "x" * 63
    ]
    assert len(headless) <= 63 and headless.endswith("-headless")  # a Service name is a DNS label


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
        (
            DB,
            f"image.digest={DIGEST}",
            "commonLabels.team=streaming",
            "service.annotations.a=b",
            "service.headless.annotations.c=d",
            "priorityClassName=platform",
            "extraEnvFrom[0].configMapRef.name=regroup-env",
            "extraVolumes[0].name=pg-ca",
            "extraVolumes[0].secret.secretName=pg-ca",
            "extraVolumeMounts[0].name=pg-ca",
            "extraVolumeMounts[0].mountPath=/etc/regroup/postgres",
            "sidecars[0].name=proxy",
            "sidecars[0].image=envoyproxy/envoy:v1.31.0",
            "networkPolicy.enabled=true",
            "tls.enabled=true",
            "tls.secretName=rg-tls",
            "tls.clientAuth=true",
            "webView.enabled=true",
        ),
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


# --- Many replicas (issue 20) -------------------------------------------------------------------


def server_pod(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return dict(pods(docs)["Deployment"]["spec"])


def test_three_replicas_by_default(helm: str) -> None:
    assert one(render(helm, DB), "Deployment")["spec"]["replicas"] == 3
    assert one(render(helm, DB, "replicaCount=1"), "Deployment")["spec"]["replicas"] == 1


def test_a_headless_service_reaches_every_replica(helm: str) -> None:
    docs = render(helm, DB)
    client = one(docs, "Service", "rg-regroup")
    headless = one(docs, "Service", "rg-regroup-headless")
    assert headless["spec"]["clusterIP"] == "None"
    # A starting or stopping replica must still be reachable by the replicas forwarding to it.
    assert headless["spec"]["publishNotReadyAddresses"] is True
    assert headless["spec"]["selector"] == client["spec"]["selector"]
    assert selects(headless["spec"]["selector"], pods(docs)["Deployment"]["metadata"]["labels"])
    assert not selects(headless["spec"]["selector"], pods(docs)["Job"]["metadata"]["labels"])
    (port,) = [p for p in headless["spec"]["ports"] if p["name"] == "grpc"]
    assert (port["port"], port["targetPort"]) == (50051, "grpc")
    assert client["spec"].get("clusterIP") != "None"
    assert not client["spec"].get("publishNotReadyAddresses")

    moved = render(helm, DB, "service.port=6000")
    assert one(moved, "Service", "rg-regroup-headless")["spec"]["ports"][0]["port"] == 6000


def test_a_disruption_budget_bounds_evictions(helm: str) -> None:
    docs = render(helm, DB)
    budget = one(docs, "PodDisruptionBudget")
    assert budget["apiVersion"] == "policy/v1"
    assert budget["spec"]["maxUnavailable"] == 1
    assert "minAvailable" not in budget["spec"]
    selector = budget["spec"]["selector"]["matchLabels"]
    assert selects(selector, pods(docs)["Deployment"]["metadata"]["labels"])
    assert not selects(selector, pods(docs)["Job"]["metadata"]["labels"])

    assert one(render(helm, DB, "podDisruptionBudget.maxUnavailable=2"), "PodDisruptionBudget")["spec"] == {
        **budget["spec"],
        "maxUnavailable": 2,
    }
    percent = one(render(helm, DB, "podDisruptionBudget.maxUnavailable=50%"), "PodDisruptionBudget")
    assert percent["spec"]["maxUnavailable"] == "50%"
    assert not [
        d for d in render(helm, DB, "podDisruptionBudget.enabled=false") if d["kind"] == "PodDisruptionBudget"
    ]
    assert "podDisruptionBudget.maxUnavailable" in render_error(
        helm, DB, "podDisruptionBudget.maxUnavailable=a"
    )


def test_updates_roll_one_new_replica_at_a_time(helm: str) -> None:
    strategy = one(render(helm, DB), "Deployment")["spec"]["strategy"]
    assert strategy == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}
    recreate = one(render(helm, DB, "updateStrategy.type=Recreate"), "Deployment")["spec"]["strategy"]
    assert recreate == {"type": "Recreate"}  # a Recreate strategy refuses rollingUpdate


def test_each_replica_is_named_after_its_pod_and_advertises_its_pod_ip(helm: str) -> None:
    def env(*sets: str) -> dict[str, dict[str, Any]]:
        return {e["name"]: e for e in server_pod(render(helm, DB, *sets))["containers"][0]["env"]}

    rendered = env()
    assert rendered["REGROUP_REPLICA_ID"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert rendered["POD_IP"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert rendered["REGROUP_ADVERTISED_ADDRESS"]["value"] == "$(POD_IP):50051"
    names = list(rendered)  # Kubernetes expands $(POD_IP) only from variables defined before it
    assert names.index("POD_IP") < names.index("REGROUP_ADVERTISED_ADDRESS")
    assert env("service.port=6000")["REGROUP_ADVERTISED_ADDRESS"]["value"] == "$(POD_IP):6000"
    # The migration Job is no replica.
    job = {e["name"] for e in pods(render(helm, DB))["Job"]["spec"]["containers"][0]["env"]}
    assert not {"REGROUP_REPLICA_ID", "REGROUP_ADVERTISED_ADDRESS", "REGROUP_LEASE_MS"} & job


def test_lease_settings_reach_the_server(helm: str) -> None:
    def env(*sets: str) -> dict[str, str]:
        return container_env(server_pod(render(helm, DB, *sets))["containers"][0])

    defaults = env()
    assert {k: defaults[k] for k in LEASE_SETTINGS} == {
        "REGROUP_SHARDS": "64",
        "REGROUP_LEASE_MS": "10000",
        "REGROUP_LEASE_RENEW_MS": "3000",
        "REGROUP_FORWARD": "true",
    }
    changed = env(
        "config.shards=4096", "config.leaseMs=30000000", "config.leaseRenewMs=1000", "config.forward=false"
    )
    assert changed["REGROUP_SHARDS"] == "4096"
    assert changed["REGROUP_LEASE_MS"] == "30000000"  # not 3e+07
    assert (changed["REGROUP_LEASE_RENEW_MS"], changed["REGROUP_FORWARD"]) == ("1000", "false")
    # The migration Job proposes the same shard count, should it be the first to use the database.
    job = container_env(pods(render(helm, DB, "config.shards=128"))["Job"]["spec"]["containers"][0])
    assert job["REGROUP_SHARDS"] == "128"


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("config.leaseMs=10", "config.leaseMs"),
        ("config.leaseRenewMs=10", "config.leaseRenewMs"),
        ("config.shards=0", "config.shards"),
        ("config.shards=4097", "config.shards"),
        ("config.leaseMs=1.5", "config.leaseMs"),
        ("config.forward=yes", "config.forward"),
        ("config.leaseRenewMs=10000", "leaseRenewMs (10000) must be smaller than leaseMs (10000)"),
    ],
)
def test_bad_lease_settings_are_refused(helm: str, setting: str, message: str) -> None:
    assert message in render_error(helm, DB, setting)


def test_termination_grace_covers_the_drain_and_the_handover(helm: str) -> None:
    """Killed before its shards are handed over, a replica's groups wait for their leases."""

    def grace(**config: float) -> int:
        values = {"database": {"url": "postgresql://db/regroup"}, "config": config}
        return int(server_pod(render(helm, values=values))["terminationGracePeriodSeconds"])

    # Drain (5 s), then handing the shards over and closing the store, each up to 10 s.
    assert grace() >= 5 + 2 * 10
    assert grace(shutdownGraceSeconds=60) >= 60 + 2 * 10
    assert grace(shutdownGraceSeconds=2.5, storeTimeoutMs=1500) >= 2.5 + 2 * 1.5


def test_replicas_spread_over_nodes_and_zones_softly_by_default(helm: str) -> None:
    docs = render(helm, DB)
    labels = pods(docs)["Deployment"]["metadata"]["labels"]
    spec = server_pod(docs)
    (preferred,) = spec["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert "requiredDuringSchedulingIgnoredDuringExecution" not in spec["affinity"]["podAntiAffinity"]
    assert preferred["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert selects(preferred["podAffinityTerm"]["labelSelector"]["matchLabels"], labels)
    (zone,) = spec["topologySpreadConstraints"]
    assert zone["topologyKey"] == "topology.kubernetes.io/zone"
    assert zone["whenUnsatisfiable"] == "ScheduleAnyway"
    assert selects(zone["labelSelector"]["matchLabels"], labels)
    assert not selects(zone["labelSelector"]["matchLabels"], pods(docs)["Job"]["metadata"]["labels"])
    # The migration Job's pod is no replica: it is not spread.
    job = pods(docs)["Job"]["spec"]
    assert "affinity" not in job and "topologySpreadConstraints" not in job


def test_the_spread_can_be_hardened_replaced_or_turned_off(helm: str) -> None:
    hard = server_pod(render(helm, DB, "podAntiAffinity=hard", "zoneSpread=DoNotSchedule"))
    (required,) = hard["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert required["topologyKey"] == "kubernetes.io/hostname"
    assert hard["topologySpreadConstraints"][0]["whenUnsatisfiable"] == "DoNotSchedule"

    off = server_pod(render(helm, DB, "podAntiAffinity=none", "zoneSpread=none"))
    assert "affinity" not in off and "topologySpreadConstraints" not in off

    node_affinity = {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "pool", "operator": "In", "values": ["a"]}]}]
        }
    }
    own_anti_affinity = {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": "rack", "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "regroup"}}}
        ]
    }
    custom_spread = [
        {"maxSkew": 2, "topologyKey": "rack", "whenUnsatisfiable": "DoNotSchedule"},
        {
            "maxSkew": 1,
            "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": {"tier": "coordinators"}},
        },
    ]
    # affinity adds to the chart's anti-affinity, and replaces it when it has its own.
    added = render(
        helm,
        values={"database": {"url": "postgresql://db/regroup"}, "affinity": {"nodeAffinity": node_affinity}},
    )
    assert server_pod(added)["affinity"]["nodeAffinity"] == node_affinity
    assert (
        "preferredDuringSchedulingIgnoredDuringExecution" in server_pod(added)["affinity"]["podAntiAffinity"]
    )
    assert pods(added)["Job"]["spec"]["affinity"] == {"nodeAffinity": node_affinity}
    replaced = server_pod(
        render(
            helm,
            values={
                "database": {"url": "postgresql://db/regroup"},
                "affinity": {"podAntiAffinity": own_anti_affinity},
                "topologySpreadConstraints": custom_spread,
            },
        )
    )
    assert replaced["affinity"] == {"podAntiAffinity": own_anti_affinity}
    rack, host = replaced["topologySpreadConstraints"]
    # A constraint without a labelSelector gets the server pods'; one with its own keeps it.
    assert rack["labelSelector"]["matchLabels"]["app.kubernetes.io/component"] == "server"
    assert {k: rack[k] for k in custom_spread[0]} == custom_spread[0]
    assert host == custom_spread[1]

    assert "podAntiAffinity" in render_error(helm, DB, "podAntiAffinity=maybe")
    assert "zoneSpread" in render_error(helm, DB, "zoneSpread=Sometimes")


@pytest.mark.parametrize(
    "sets",
    [
        ("podAntiAffinity=hard", "zoneSpread=DoNotSchedule", "podDisruptionBudget.maxUnavailable=34%"),
        ("podAntiAffinity=none", "zoneSpread=none", "podDisruptionBudget.enabled=false"),
        ("updateStrategy.type=Recreate", "replicaCount=1", "config.forward=false"),
    ],
)
def test_replica_variants_render_valid_kubernetes_objects(helm: str, sets: tuple[str, ...]) -> None:
    rendered = run(helm, "template", "rg", str(CHART), "--set", DB, *[a for s in sets for a in ("--set", s)])
    assert rendered.returncode == 0, rendered.stderr
    validate = Path(sys.executable).parent / "kubernetes-validate"
    result = run(str(validate), "--strict", "--quiet", "-", stdin=rendered.stdout)
    assert result.returncode == 0, result.stdout + result.stderr


def readme_helm_commands() -> list[list[str]]:
    """The chart README's `helm install` and `helm upgrade` commands, as argument lists."""
    import shlex

    from tests.support.doc_blocks import parse

    readme = CHART / "README.md"
    commands = []
    for block in parse(readme.read_text(), str(readme.relative_to(ROOT))):
        for line in block.code.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words[:1] == ["helm"] and words[1] in ("install", "upgrade"):
                commands.append(words)
    return commands


def test_the_readme_commands_render(helm: str) -> None:
    """Its blocks need a cluster (doc-test: skip): `helm template` checks their values instead,
    a values file (-f) standing for the DSN it would hold."""
    commands = readme_helm_commands()
    assert len(commands) >= 4
    for words in commands:
        release, chart, *args = words[2:]
        assert chart == "helm/regroup", words
        if "-f" in args:
            i = args.index("-f")
            args[i : i + 2] = ["--set", DB]
        rendered = run(helm, "template", release, str(CHART), *args)
        assert rendered.returncode == 0, f"{' '.join(words)}\n{rendered.stderr}"


# --- Metrics (issue 21) -------------------------------------------------------------------------


def test_every_replica_serves_metrics_on_a_named_port_of_the_headless_service(helm: str) -> None:
    from regroup.server.config import load_settings

    docs = render(helm, DB)
    container = pods(docs)["Deployment"]["spec"]["containers"][0]
    assert load_settings(container_env(container)).metrics_listen == "0.0.0.0:9464"
    assert {"name": "metrics", "containerPort": 9464, "protocol": "TCP"} in container["ports"]
    headless = one(docs, "Service", "rg-regroup-headless")
    (port,) = [p for p in headless["spec"]["ports"] if p["name"] == "metrics"]
    assert (port["port"], port["targetPort"]) == (9464, "metrics")
    # Clients' Service: gRPC only (a scrape through it would reach one replica at random).
    assert [p["name"] for p in one(docs, "Service", "rg-regroup")["spec"]["ports"]] == ["grpc"]
    assert not [d for d in docs if d["kind"] == "ServiceMonitor"]

    off = render(helm, DB, "metrics.enabled=false")
    container = pods(off)["Deployment"]["spec"]["containers"][0]
    assert load_settings(container_env(container)).metrics_listen == "off"
    assert [p["name"] for p in container["ports"]] == ["grpc"]
    assert [p["name"] for p in one(off, "Service", "rg-regroup-headless")["spec"]["ports"]] == ["grpc"]


def test_the_web_view_is_off_unless_asked_and_then_bound_to_the_pod_ip(helm: str) -> None:
    """The view has no authentication: by default the port serves /metrics alone, on every
    interface for Prometheus; webView.enabled serves the view too, on the pod's IP (the
    downward API's status.podIP), where Prometheus still scrapes (issue 37)."""
    from regroup.server.config import load_settings

    container = pods(render(helm, DB))["Deployment"]["spec"]["containers"][0]
    settings = load_settings(container_env(container))
    assert settings.metrics_listen == "0.0.0.0:9464"
    assert not settings.web_view_served()
    # An ACL mounted does not change that.
    acl = render(helm, DB, "accessControl.acl.configMap=rg-acl")
    assert container_env(pods(acl)["Deployment"]["spec"]["containers"][0])["REGROUP_WEB_VIEW"] == "off"

    docs = render(helm, DB, "webView.enabled=true", "metrics.port=9100")
    container = pods(docs)["Deployment"]["spec"]["containers"][0]
    env = container_env(container)
    settings = load_settings(env)
    assert settings.metrics_listen == f"{FIELD_SAMPLES['status.podIP']}:9100"
    assert settings.web_view_served()
    names = [e["name"] for e in container["env"]]
    assert names.index("POD_IP") < names.index("REGROUP_METRICS_LISTEN")  # $(POD_IP) expands
    # Scraped as before: the named port of the headless Service.
    assert {"name": "metrics", "containerPort": 9100, "protocol": "TCP"} in container["ports"]
    # An extraEnv REGROUP_WEB_VIEW still wins (it comes after the chart's own).
    forced = render(helm, DB, "extraEnv[0].name=REGROUP_WEB_VIEW", "extraEnv[0].value=on")
    assert load_settings(container_env(pods(forced)["Deployment"]["spec"]["containers"][0])).web_view_served()
    assert "webView.enabled needs metrics.enabled" in render_error(
        helm, DB, "webView.enabled=true", "metrics.enabled=false"
    )
    assert "webView" in render_error(helm, DB, "webView.bind=everywhere")


def test_a_service_monitor_scrapes_every_replica(helm: str) -> None:
    import yaml

    sets = (DB, "metrics.serviceMonitor.enabled=true", "metrics.serviceMonitor.labels.release=prom")
    docs = render(helm, *sets, "metrics.port=9100")
    monitor = one(docs, "ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "prom"
    assert monitor["spec"]["endpoints"] == [{"port": "metrics", "path": "/metrics", "interval": "30s"}]
    headless = one(docs, "Service", "rg-regroup-headless")
    assert selects(monitor["spec"]["selector"]["matchLabels"], headless["metadata"]["labels"])
    assert any(p["name"] == "metrics" and p["port"] == 9100 for p in headless["spec"]["ports"])
    # The rest validates as before (the ServiceMonitor is a CRD: its schema is not available offline).
    others = yaml.safe_dump_all([d for d in docs if d["kind"] != "ServiceMonitor"])
    validate = Path(sys.executable).parent / "kubernetes-validate"
    result = run(str(validate), "--strict", "--quiet", "-", stdin=others)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "metrics.serviceMonitor.interval" in render_error(
        helm, DB, "metrics.serviceMonitor.interval=often"
    )


def test_a_prometheus_rule_carries_the_projects_alerts(helm: str, tmp_path: Path) -> None:
    """Off by default; on, a PrometheusRule whose spec is monitoring/alerts.yaml. Its CRD's
    schema is not available offline: the spec is a Prometheus rules file, which promtool
    checks, and the rest of the release validates as before."""
    import yaml

    from tests.support.monitoring import ALERTS, promtool

    assert not [d for d in render(helm, DB) if d["kind"] == "PrometheusRule"]
    sets = (DB, "metrics.prometheusRule.enabled=true", "metrics.prometheusRule.labels.release=prom")
    docs = render(helm, *sets)
    rule = one(docs, "PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["name"] == "rg-regroup"
    assert rule["metadata"]["labels"]["release"] == "prom"
    assert rule["spec"] == yaml.safe_load(ALERTS.read_text())
    rendered = tmp_path / "rules.yaml"
    rendered.write_text(yaml.safe_dump(rule["spec"]))
    checked = run(promtool(), "check", "rules", str(rendered))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    others = yaml.safe_dump_all([d for d in docs if d["kind"] != "PrometheusRule"])
    validate = Path(sys.executable).parent / "kubernetes-validate"
    result = run(str(validate), "--strict", "--quiet", "-", stdin=others)
    assert result.returncode == 0, result.stdout + result.stderr
    # Without the metrics endpoint there is nothing for the rules to read.
    assert not [d for d in render(helm, *sets, "metrics.enabled=false") if d["kind"] == "PrometheusRule"]
    assert "metrics.prometheusRule" in render_error(helm, DB, "metrics.prometheusRule.enabled=yes")


# --- NetworkPolicy (issue 21) -------------------------------------------------------------------


def test_a_network_policy_admits_clients_replicas_and_prometheus_only(helm: str) -> None:
    assert not [d for d in render(helm, DB) if d["kind"] == "NetworkPolicy"]
    sets = (
        DB,
        "networkPolicy.enabled=true",
        "networkPolicy.clients[0].namespaceSelector.matchLabels.team=spark",
        "networkPolicy.metrics[0].namespaceSelector.matchLabels.name=monitoring",
    )
    docs = render(helm, *sets)
    policy = one(docs, "NetworkPolicy")
    server = pods(docs)["Deployment"]["metadata"]["labels"]
    assert selects(policy["spec"]["podSelector"]["matchLabels"], server)
    assert not selects(policy["spec"]["podSelector"]["matchLabels"], pods(docs)["Job"]["metadata"]["labels"])
    assert policy["spec"]["policyTypes"] == ["Ingress"]  # Postgres and OTLP stay reachable
    grpc_rule, metrics_rule = policy["spec"]["ingress"]
    assert grpc_rule["ports"] == [{"port": "grpc", "protocol": "TCP"}]
    replicas, clients = grpc_rule["from"]
    assert selects(replicas["podSelector"]["matchLabels"], server)  # forwarding between replicas
    assert clients == {"namespaceSelector": {"matchLabels": {"team": "spark"}}}
    assert metrics_rule == {
        "ports": [{"port": "metrics", "protocol": "TCP"}],
        "from": [{"namespaceSelector": {"matchLabels": {"name": "monitoring"}}}],
    }
    validate = Path(sys.executable).parent / "kubernetes-validate"
    rendered = run(helm, "template", "rg", str(CHART), *[a for s in sets for a in ("--set", s)])
    result = run(str(validate), "--strict", "--quiet", "-", stdin=rendered.stdout)
    assert result.returncode == 0, result.stdout + result.stderr

    # No clients listed: gRPC from anywhere, the metrics port from nobody.
    (open_grpc,) = one(render(helm, DB, "networkPolicy.enabled=true"), "NetworkPolicy")["spec"]["ingress"]
    assert "from" not in open_grpc and open_grpc["ports"][0]["port"] == "grpc"


# --- TLS (issue 21) -----------------------------------------------------------------------------


def test_tls_from_a_secret_with_plain_text_probes_and_names_the_certificate_can_cover(
    helm: str, tmp_path: Path
) -> None:
    from regroup.server.config import load_settings
    from tests.support.certs import CertificateAuthority

    sets = (DB, "tls.enabled=true", "tls.secretName=rg-tls", "tls.clientAuth=true")
    docs = render(helm, *sets)
    spec = server_pod(docs)
    (container,) = spec["containers"]
    env = container_env(container)
    files = {
        k: env[k] for k in ("REGROUP_TLS_CERT", "REGROUP_TLS_KEY", "REGROUP_TLS_CA", "REGROUP_TLS_CLIENT_CA")
    }
    assert files == {
        "REGROUP_TLS_CERT": "/etc/regroup/tls/tls.crt",
        "REGROUP_TLS_KEY": "/etc/regroup/tls/tls.key",
        "REGROUP_TLS_CA": "/etc/regroup/tls/ca.crt",
        "REGROUP_TLS_CLIENT_CA": "/etc/regroup/tls/ca.crt",
    }
    # The Secret, mounted where those point, in cert-manager's layout.
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == "tls"]
    assert (mount["mountPath"], mount["readOnly"]) == ("/etc/regroup/tls", True)
    (volume,) = [v for v in spec["volumes"] if v["name"] == "tls"]
    assert volume["secret"] == {"secretName": "rg-tls"}
    # Probes read the plain-text health port; the API port stays TLS only.
    assert env["REGROUP_HEALTH_LISTEN"] == "0.0.0.0:50052"
    assert {"name": "health", "containerPort": 50052, "protocol": "TCP"} in container["ports"]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["grpc"]["port"] == 50052, probe
    # Replicas advertise a DNS name of the headless Service (its subdomain), which a wildcard
    # dnsName of the certificate covers; pod IPs cannot be known when the certificate is made.
    assert spec["subdomain"] == "rg-regroup-headless"
    advertised = env["REGROUP_ADVERTISED_ADDRESS"]
    assert advertised == "rg-regroup-7d9f8c6b5-x2x4q.rg-regroup-headless.default.svc.cluster.local:50051"
    # The server takes that environment once the files exist (a certificate for the wildcard).
    ca = CertificateAuthority("cluster")
    cert, key = ca.server("*.rg-regroup-headless.default.svc.cluster.local", client=True).write(
        tmp_path, "tls"
    )
    ca_file = ca.write(tmp_path)
    real = {**env, "REGROUP_TLS_CERT": str(cert), "REGROUP_TLS_KEY": str(key)}
    real.update(REGROUP_TLS_CA=str(ca_file), REGROUP_TLS_CLIENT_CA=str(ca_file))
    settings = load_settings(real)
    assert settings.tls_cert == cert and settings.health_listen == "0.0.0.0:50052"
    validate = Path(sys.executable).parent / "kubernetes-validate"
    rendered = run(helm, "template", "rg", str(CHART), *[a for s in sets for a in ("--set", s)])
    result = run(str(validate), "--strict", "--quiet", "-", stdin=rendered.stdout)
    assert result.returncode == 0, result.stdout + result.stderr

    assert "tls.secretName" in render_error(helm, DB, "tls.enabled=true")
    # Without TLS: the API port for probes, the pod IP advertised, no Secret.
    plain = server_pod(render(helm, DB))
    assert plain["containers"][0]["readinessProbe"]["grpc"]["port"] == 50051
    assert "subdomain" not in plain
    assert container_env(plain["containers"][0])["REGROUP_ADVERTISED_ADDRESS"] == "10.1.2.3:50051"


# --- Access control (issue 21) ------------------------------------------------------------------


def test_acl_and_tokens_files_come_from_a_config_map_or_secrets(helm: str, tmp_path: Path) -> None:
    import json

    from regroup.server.config import load_settings

    sets = (DB, "accessControl.acl.configMap=rg-acl", "accessControl.tokens.secret=rg-tokens")
    docs = render(helm, *sets, "accessControl.acl.key=acl.json")
    spec = server_pod(docs)
    (container,) = spec["containers"]
    env = container_env(container)
    assert env["REGROUP_ACL_FILE"] == "/etc/regroup/acl/acl.json"
    assert env["REGROUP_TOKENS_FILE"] == "/etc/regroup/tokens/tokens.yaml"
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert (mounts["acl"]["mountPath"], mounts["acl"]["readOnly"]) == ("/etc/regroup/acl", True)
    assert (mounts["tokens"]["mountPath"], mounts["tokens"]["readOnly"]) == ("/etc/regroup/tokens", True)
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["acl"]["configMap"] == {"name": "rg-acl"}
    assert volumes["tokens"]["secret"] == {"secretName": "rg-tokens"}
    from_secret = server_pod(render(helm, DB, "accessControl.acl.secret=rg-acl"))
    assert {v["name"]: v for v in from_secret["volumes"]}["acl"]["secret"] == {"secretName": "rg-acl"}
    assert "not both" in render_error(helm, DB, "accessControl.acl.configMap=a", "accessControl.acl.secret=b")
    # Nothing set: no files, no mounts (everything allowed, as before).
    plain = server_pod(render(helm, DB))
    assert "REGROUP_ACL_FILE" not in container_env(plain["containers"][0])
    assert not {"acl", "tokens"} & {v["name"] for v in plain["volumes"]}
    # The server takes the variables with files of that format where they point.
    acl = tmp_path / "acl.json"
    entry = {"principal": "User:alice", "operation": "member", "resource_type": "group"}
    acl.write_text(json.dumps([{**entry, "pattern_type": "prefixed", "name": "orders-"}]))
    settings = load_settings({**env, "REGROUP_ACL_FILE": str(acl), "REGROUP_TOKENS_FILE": ""})
    assert settings.acl_file == acl
    validate = Path(sys.executable).parent / "kubernetes-validate"
    rendered = run(helm, "template", "rg", str(CHART), *[a for s in sets for a in ("--set", s)])
    result = run(str(validate), "--strict", "--quiet", "-", stdin=rendered.stdout)
    assert result.returncode == 0, result.stdout + result.stderr


# --- The chart a platform team expects (issue 38) -----------------------------------------------


def assert_valid(docs: list[dict[str, Any]]) -> None:
    """kubernetes-validate --strict on rendered documents, the Prometheus Operator's (CRDs,
    without a schema offline) left out."""
    import yaml

    kept = [d for d in docs if d["kind"] not in ("ServiceMonitor", "PrometheusRule")]
    validate = Path(sys.executable).parent / "kubernetes-validate"
    result = run(str(validate), "--strict", "--quiet", "-", stdin=yaml.safe_dump_all(kept))
    assert result.returncode == 0, result.stdout + result.stderr


def test_an_image_digest_takes_precedence_over_the_tag(helm: str) -> None:
    docs = render(helm, DB, f"image.digest={DIGEST}", "image.tag=1.2.3")
    for owner, template in pods(docs).items():
        image = template["spec"]["containers"][0]["image"]
        assert image == f"ghcr.io/regroup/regroup@{DIGEST}", owner
    assert_valid(docs)
    mirrored = render(helm, DB, f"image.digest={DIGEST}", "global.imageRegistry=mirror.example.com")
    assert server_pod(mirrored)["containers"][0]["image"] == f"mirror.example.com/regroup/regroup@{DIGEST}"
    # Without a digest, the tag as before.
    assert server_pod(render(helm, DB, "image.tag=1.2.3"))["containers"][0]["image"] == (
        "ghcr.io/regroup/regroup:1.2.3"
    )
    assert "image.digest" in render_error(helm, DB, "image.digest=latest")


#: Values that render every template of the chart at once.
EVERY_OBJECT = (
    DB,
    "networkPolicy.enabled=true",
    "metrics.serviceMonitor.enabled=true",
    "metrics.prometheusRule.enabled=true",
)


def test_common_labels_are_on_every_object_and_pod_but_no_selector(helm: str) -> None:
    import yaml

    strings = (
        "commonLabels.team=streaming",
        "commonLabels.cost-center=42",  # --set-string: a label's value is a string
        "commonLabels.app\\.kubernetes\\.io/name=other",  # cannot replace the chart's
        "metrics.serviceMonitor.labels.release=prom",
    )
    args = [a for s in EVERY_OBJECT for a in ("--set", s)]
    args += [a for s in strings for a in ("--set-string", s)]
    rendered = run(helm, "template", "rg", str(CHART), *args)
    assert rendered.returncode == 0, rendered.stderr
    # Every template rendered something (a new template is covered without changing this test).
    templates = {p.name for p in (CHART / "templates").glob("*.yaml")}
    assert templates == set(re.findall(r"^# Source: regroup/templates/(\S+)$", rendered.stdout, re.M))
    docs = [d for d in yaml.safe_load_all(rendered.stdout) if d]
    for doc in docs:
        labels = doc["metadata"]["labels"]
        where = f"{doc['kind']} {doc['metadata']['name']}"
        assert (labels["team"], labels["cost-center"]) == ("streaming", "42"), where
        assert labels["app.kubernetes.io/name"] == "regroup", where
    for owner, template in pods(docs).items():
        labels = template["metadata"]["labels"]
        assert (labels["team"], labels["app.kubernetes.io/name"]) == ("streaming", "regroup"), owner
    assert one(docs, "ServiceMonitor")["metadata"]["labels"]["release"] == "prom"
    # No selector changes: a Deployment's cannot, and the others must still select the pods.
    selectors = [
        one(docs, "Deployment")["spec"]["selector"]["matchLabels"],
        one(docs, "Service", "rg-regroup")["spec"]["selector"],
        one(docs, "Service", "rg-regroup-headless")["spec"]["selector"],
        one(docs, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"],
        one(docs, "NetworkPolicy")["spec"]["podSelector"]["matchLabels"],
        one(docs, "ServiceMonitor")["spec"]["selector"]["matchLabels"],
    ]
    for selector in selectors:
        assert "team" not in selector and selector["app.kubernetes.io/name"] == "regroup", selector
    assert_valid(docs)
    assert "commonLabels" in render_error(helm, DB, "commonLabels.replicas=3")


def test_each_service_takes_annotations_of_its_own(helm: str) -> None:
    sets = (
        DB,
        "service.type=LoadBalancer",
        "service.annotations.service\\.beta\\.kubernetes\\.io/aws-load-balancer-internal=true",
        "service.headless.annotations.mesh\\.example\\.com/inject=false",
    )
    args = [a for s in sets for a in ("--set-string" if "annotations" in s else "--set", s)]
    rendered = run(helm, "template", "rg", str(CHART), *args)
    assert rendered.returncode == 0, rendered.stderr
    import yaml

    docs = [d for d in yaml.safe_load_all(rendered.stdout) if d]
    client, headless = one(docs, "Service", "rg-regroup"), one(docs, "Service", "rg-regroup-headless")
    assert client["metadata"]["annotations"] == {
        "service.beta.kubernetes.io/aws-load-balancer-internal": "true"
    }
    assert headless["metadata"]["annotations"] == {"mesh.example.com/inject": "false"}
    assert_valid(docs)
    plain = render(helm, DB)
    assert not [d for d in plain if d["kind"] == "Service" and d["metadata"].get("annotations")]
    assert "service.annotations" in render_error(helm, DB, "service.annotations.enabled=true")


def readme_values(containing: str) -> dict[str, Any]:
    """The chart README's YAML block (a values file) holding `containing`."""
    import yaml

    from tests.support.doc_blocks import parse

    readme = CHART / "README.md"
    (block,) = [
        b
        for b in parse(readme.read_text(), str(readme.relative_to(ROOT)))
        if b.language == "yaml" and containing in b.code
    ]
    values = yaml.safe_load(block.code)
    assert isinstance(values, dict)
    return values


def test_the_readme_postgres_ca_values_mount_the_file_pgsslrootcert_names(helm: str) -> None:
    """The chart's own PGSSLROOTCERT example, end to end: in both pods that connect to
    Postgres, the path the variable names lies in a mounted volume holding that key."""
    import yaml

    values = readme_values("PGSSLROOTCERT")
    docs = render(helm, values=values)
    for owner, template in pods(docs).items():
        spec = template["spec"]
        (container,) = spec["containers"]
        path = Path(container_env(container)["PGSSLROOTCERT"])
        (mount,) = [m for m in container["volumeMounts"] if path.is_relative_to(m["mountPath"])]
        assert mount["readOnly"] is True, owner
        (volume,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
        items = {i["path"]: i["key"] for i in volume["secret"]["items"]}
        assert items == {str(path.relative_to(mount["mountPath"])): "ca.crt"}, owner
    assert_valid(docs)
    # The names of the chart's own volumes are refused, with the reason.
    clash = {**values, "extraVolumes": [{"name": "tmp", "emptyDir": {}}]}
    result = run(helm, "template", "rg", str(CHART), "-f", "-", stdin=yaml.safe_dump(clash))
    assert result.returncode != 0 and "the chart's own volumes" in result.stderr


def test_priority_class_and_extra_env_from_reach_the_server_and_the_migration_job(helm: str) -> None:
    env_from = [
        {"configMapRef": {"name": "regroup-env"}},
        {"secretRef": {"name": "otlp", "optional": True}, "prefix": "OTEL_"},
    ]
    values = {"database": {"url": "postgresql://db/regroup"}, "priorityClassName": "platform-critical"}
    docs = render(helm, values={**values, "extraEnvFrom": env_from})
    for owner, template in pods(docs).items():
        assert template["spec"]["priorityClassName"] == "platform-critical", owner
        assert template["spec"]["containers"][0]["envFrom"] == env_from, owner
    assert_valid(docs)
    for owner, template in pods(render(helm, DB)).items():
        assert "priorityClassName" not in template["spec"], owner
        assert "envFrom" not in template["spec"]["containers"][0], owner
    assert "extraEnvFrom" in render_error(helm, DB, "extraEnvFrom[0].configMap.name=x")


def test_sidecars_run_beside_the_server_only(helm: str) -> None:
    sidecar = {
        "name": "proxy",
        "image": "envoyproxy/envoy:v1.31.0",
        "ports": [{"name": "proxy", "containerPort": 8443}],
        "volumeMounts": [{"name": "proxy-config", "mountPath": "/etc/envoy", "readOnly": True}],
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
    }
    values = {
        "database": {"url": "postgresql://db/regroup"},
        "sidecars": [sidecar],
        "extraVolumes": [{"name": "proxy-config", "configMap": {"name": "envoy"}}],
    }
    docs = render(helm, values=values)
    regroup, proxy = server_pod(docs)["containers"]
    assert regroup["name"] == "regroup" and proxy == sidecar
    # The migration Job would never complete beside a container that never exits.
    assert [c["name"] for c in pods(docs)["Job"]["spec"]["containers"]] == ["migrate"]
    assert_valid(docs)
    assert "sidecars" in render_error(helm, DB, "sidecars[0].name=proxy")  # no image
    assert "server container's name" in render_error(
        helm, DB, "sidecars[0].name=regroup", "sidecars[0].image=x"
    )


def admitted(policy: dict[str, Any], port: str, namespace: str, labels: dict[str, str]) -> bool:
    """Whether a NetworkPolicy admits a pod (in `namespace`, with `labels`) to the named port
    of the pods it selects, by the NetworkPolicy rules: a peer with a podSelector alone means
    the policy's namespace; a namespaceSelector matches the namespace's labels, which include
    kubernetes.io/metadata.name. matchLabels only, which is all the chart renders."""
    own = policy["metadata"].get("namespace", "default")
    namespace_labels = {"kubernetes.io/metadata.name": namespace}

    def matches(selector: dict[str, Any], candidate: dict[str, str]) -> bool:
        assert set(selector) <= {"matchLabels"}, selector
        return selects(selector.get("matchLabels") or {}, candidate)

    def peer_admits(peer: dict[str, Any]) -> bool:
        assert set(peer) <= {"podSelector", "namespaceSelector"}, peer
        if "namespaceSelector" in peer:
            in_namespace = matches(peer["namespaceSelector"], namespace_labels)
        else:
            in_namespace = namespace == own
        return in_namespace and matches(peer.get("podSelector", {}), labels)

    return any(
        port in [p["port"] for p in rule["ports"]]
        and ("from" not in rule or any(peer_admits(peer) for peer in rule["from"]))
        for rule in policy["spec"]["ingress"]
    )


PROMETHEUS = {"app.kubernetes.io/name": "prometheus", "prometheus": "k8s"}


def test_the_network_policy_admits_the_prometheus_a_service_monitor_sends(helm: str) -> None:
    """With the NetworkPolicy and the ServiceMonitor both on, Prometheus reaches the metrics
    port: by default the Prometheus Operator's Prometheus pods in the namespace monitoring."""
    sets = (DB, "networkPolicy.enabled=true", "metrics.serviceMonitor.enabled=true")
    docs = render(helm, *sets)
    policy = one(docs, "NetworkPolicy")
    assert admitted(policy, "metrics", "monitoring", PROMETHEUS)
    assert not admitted(policy, "metrics", "monitoring", {"app.kubernetes.io/name": "grafana"})
    assert not admitted(policy, "metrics", "default", PROMETHEUS)  # another namespace's Prometheus
    assert not admitted(policy, "metrics", "default", {"app": "worker"})
    assert admitted(policy, "grpc", "default", {"app": "worker"})  # clients unchanged
    assert_valid(docs)
    # The web view (on the metrics port) is fenced the same way.
    viewed = one(render(helm, *sets, "webView.enabled=true"), "NetworkPolicy")
    assert admitted(viewed, "metrics", "monitoring", PROMETHEUS)
    assert not admitted(viewed, "metrics", "default", {"app": "worker"})

    # Prometheus elsewhere: its namespace ("" for the release's own) and its pods' labels.
    elsewhere = one(render(helm, *sets, "networkPolicy.prometheus.namespace=observability"), "NetworkPolicy")
    assert admitted(elsewhere, "metrics", "observability", PROMETHEUS)
    assert not admitted(elsewhere, "metrics", "monitoring", PROMETHEUS)
    values = {
        "database": {"url": "postgresql://db/regroup"},
        "networkPolicy": {"enabled": True, "prometheus": {"namespace": "", "podLabels": {"app": "prom"}}},
        "metrics": {"serviceMonitor": {"enabled": True}},
    }
    local = one(render(helm, values=values), "NetworkPolicy")
    assert admitted(local, "metrics", "default", {"app": "prom"})
    assert not admitted(local, "metrics", "monitoring", {"app": "prom"})
    assert not admitted(local, "metrics", "default", PROMETHEUS)

    # networkPolicy.metrics, when listed, is exactly who is admitted.
    listed = one(
        render(helm, *sets, "networkPolicy.metrics[0].namespaceSelector.matchLabels.team=sre"),
        "NetworkPolicy",
    )
    assert not admitted(listed, "metrics", "monitoring", PROMETHEUS)
    # Without a ServiceMonitor nobody is, unless listed (as before); without metrics, no rule.
    assert not admitted(
        one(render(helm, DB, "networkPolicy.enabled=true"), "NetworkPolicy"),
        "metrics",
        "monitoring",
        PROMETHEUS,
    )
    (grpc_only,) = one(render(helm, *sets, "metrics.enabled=false"), "NetworkPolicy")["spec"]["ingress"]
    assert grpc_only["ports"][0]["port"] == "grpc"
    assert "networkPolicy.prometheus" in render_error(helm, *sets, "networkPolicy.prometheus.name=x")


# --- NOTES.txt (issue 38) -----------------------------------------------------------------------


def test_the_notes_speak_plain_text_tls_or_mtls_as_the_values_say(helm: str) -> None:
    """The hints follow tls.*: -plaintext only without TLS, the CA with it, and a client
    certificate under mTLS. tests/integration/test_tls.py runs these commands against a
    server of each kind."""
    from tests.support.chart import render_notes

    address = "rg-regroup.default.svc:50051"
    tls = render_notes(helm, DB, "tls.enabled=true", "tls.secretName=rg-tls")
    assert "-plaintext" not in tls and "plaintext" not in tls
    assert "(gRPC, TLS)" in tls
    assert "get secret rg-tls -o jsonpath='{.data.ca\\.crt}' | base64 -d > ca.crt" in tls
    assert f"grpcurl -cacert ca.crt {address} grpc.health.v1.Health/Check" in tls
    assert f"regroup groups list --bootstrap {address} --tls-ca ca.crt\n" in tls
    assert "-cert " not in tls and "--tls-cert" not in tls

    mtls = render_notes(helm, DB, "tls.enabled=true", "tls.secretName=rg-tls", "tls.clientAuth=true")
    assert "-plaintext" not in mtls and "(gRPC, mutual TLS)" in mtls
    assert f"grpcurl -cacert ca.crt -cert client.crt -key client.key {address} " in mtls
    client_flags = "--tls-ca ca.crt --tls-cert client.crt --tls-key client.key"
    assert f"regroup groups list --bootstrap {address} {client_flags}" in mtls

    plain = render_notes(helm, DB)
    assert f"grpcurl -plaintext {address} grpc.health.v1.Health/Check" in plain
    assert f"regroup groups list --bootstrap {address}\n" in plain
    assert "(gRPC, plaintext)" in plain and "-cacert" not in plain and "--tls" not in plain

    # The release's own names: namespace, port, fullname.
    moved = render_notes(helm, DB, "service.port=6000", "fullnameOverride=groups", "tls.enabled=false")
    assert "grpcurl -plaintext groups.default.svc:6000 " in moved


def test_the_notes_say_where_metrics_go_and_when_a_policy_blocks_them(helm: str) -> None:
    from tests.support.chart import render_notes

    assert "metrics" not in render_notes(helm, DB, "metrics.enabled=false")
    monitored = render_notes(helm, DB, "metrics.serviceMonitor.enabled=true", "networkPolicy.enabled=true")
    assert "scraped through the ServiceMonitor rg-regroup" in monitored
    assert "admits nobody" not in monitored
    blocked = render_notes(helm, DB, "networkPolicy.enabled=true")
    assert "The NetworkPolicy admits nobody to that port" in blocked
    listed = render_notes(
        helm, DB, "networkPolicy.enabled=true", "networkPolicy.metrics[0].podSelector.matchLabels.app=prom"
    )
    assert "admits nobody" not in listed
    assert "web view" not in monitored
    viewed = render_notes(helm, DB, "webView.enabled=true")
    assert "/api/v1/namespaces/default/pods/<pod>:9464/proxy/" in viewed
