"""The Helm chart's NOTES.txt, rendered offline.

`helm template` renders every template but leaves NOTES.txt out of its output, and
`helm install --dry-run=client` (which prints it) still asks a cluster for its version
first: without one it fails with "Kubernetes cluster unreachable". So the notes are
rendered by `helm template` from a scratch copy of the chart, in which one extra
template hands the text of NOTES.txt to `tpl`: the same engine, the same values and
the same named templates as `helm install` would render it with. The chart itself is
unchanged.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent.parent
CHART = ROOT / "helm" / "regroup"


def helm_binary() -> str:
    """The pinned helm binary (tools/helm.py installs it into the virtualenv if missing)."""
    spec = importlib.util.spec_from_file_location("regroup_tools_helm", ROOT / "tools" / "helm.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return str(module.ensure_helm())


#: A ConfigMap whose data is the rendered notes; its name is the test's, not the chart's.
_PROBE = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: notes-under-test
data:
  notes: {{ tpl (.Files.Get "notes-under-test.txt") . | toJson }}
"""


def render_notes(helm: str, *sets: str, release: str = "rg") -> str:
    """NOTES.txt as `helm install <release> helm/regroup --set ...` would print it."""
    with tempfile.TemporaryDirectory() as scratch:
        chart = Path(scratch) / "regroup"
        shutil.copytree(CHART, chart)
        # Outside templates/, so that .Files can read it (and Helm does not render it twice).
        (chart / "notes-under-test.txt").write_text((CHART / "templates" / "NOTES.txt").read_text())
        (chart / "templates" / "notes-under-test.yaml").write_text(_PROBE)
        args = [a for s in sets for a in ("--set", s)]
        result = subprocess.run(
            [helm, "template", release, str(chart), *args, "--show-only", "templates/notes-under-test.yaml"],
            capture_output=True,
            text=True,
            timeout=120,
        )
    if result.returncode != 0:
        raise AssertionError(result.stderr)
    notes = yaml.safe_load(result.stdout)["data"]["notes"]
    assert isinstance(notes, str)
    return notes
