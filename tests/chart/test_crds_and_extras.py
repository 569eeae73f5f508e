"""The CRD comes from templates/ (upgraded with the release, kept on uninstall, left out with
crds.install=false) and is the repository's CRD; the Argo CD health check is optional; NOTES.txt
tells what was installed, how to see who leads and how to apply a policy."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.chart.chart_support import CHART, NAMESPACE, ROOT, Chart, find, named

CRD_FILES = ("consumergrouppolicy.yaml", "consumergroupcluster.yaml")
HEALTH_LUA = CHART / "files" / "argocd-health.lua"
HEALTH_KEY = "resource.customizations.health.groupops.dev_ConsumerGroupPolicy"


@pytest.mark.parametrize("file", CRD_FILES)
def test_the_chart_ships_the_repository_crd(file: str) -> None:
    assert (CHART / "files" / "crds" / file).read_text() == (ROOT / "crds" / file).read_text(), (
        f"copy crds/{file} to charts/groupops/files/crds/{file}"
    )


def test_the_chart_ships_every_repository_crd() -> None:
    assert sorted(p.name for p in (ROOT / "crds").glob("*.yaml")) == sorted(CRD_FILES)


def test_the_chart_has_no_crds_directory() -> None:
    # Helm installs crds/ on every first install whatever crds.install says, never upgrades it, and
    # the same CRD from templates/ would then fail the install ("invalid ownership metadata").
    assert not (CHART / "crds").exists(), (
        "the CRD lives in files/crds/ and is rendered by templates/crds.yaml"
    )


@pytest.mark.parametrize("file", CRD_FILES)
def test_the_crd_is_rendered_unchanged_and_kept_on_uninstall(chart: Chart, file: str) -> None:
    source = yaml.safe_load((ROOT / "crds" / file).read_text())
    crd = dict(find(chart.render({}), "CustomResourceDefinition", source["metadata"]["name"]))
    meta, source_meta = crd.pop("metadata"), source.pop("metadata")
    assert crd == source
    assert meta["annotations"]["helm.sh/resource-policy"] == "keep"
    assert source_meta["labels"].items() <= meta["labels"].items()
    assert meta["labels"]["app.kubernetes.io/instance"] == "groupops"


def test_crds_install_false_renders_no_crd(chart: Chart) -> None:
    docs = chart.render({"crds": {"install": False}})
    assert not named(docs, "CustomResourceDefinition")
    assert find(docs, "Deployment")


def test_a_new_crd_restarts_the_operator(chart: Chart) -> None:
    annotations = find(chart.render({}), "Deployment")["spec"]["template"]["metadata"]["annotations"]
    assert len(annotations["checksum/crd"]) == 16


def test_the_argo_cd_health_check_is_optional(chart: Chart) -> None:
    assert not named(chart.render({}), "ConfigMap")
    values = {"argocd": {"healthCheck": {"enabled": True}}}
    if not HEALTH_LUA.is_file() or not HEALTH_LUA.read_text().strip():
        assert "files/argocd-health.lua is missing" in chart.refusal(values)
        return
    configmap = find(chart.render(values), "ConfigMap", "groupops-argocd-health")
    assert configmap["metadata"]["namespace"] == NAMESPACE
    assert configmap["data"][HEALTH_KEY].strip() == HEALTH_LUA.read_text().strip()


def test_notes_say_what_was_installed_and_how_to_check_it(chart: Chart, tmp_path: Path) -> None:
    notes = chart.notes({}, tmp_path / "default")
    assert "Deployment groupops (2 replica(s); one leads through the Lease groupops-operator" in notes
    assert "kubectl -n ops get lease groupops-operator -o jsonpath='{.spec.holderIdentity}" in notes
    assert "a Role groupops in each watched namespace: ops" in notes
    assert "kubectl apply -n ops -f examples/policies/failover.yaml" in notes
    assert "kept when the release is uninstalled" in notes
    assert "Kafka auth Secrets the operator may read" in notes
    assert "It reads no other Secret" in notes
    assert "cannot read its Secret until the Secret is added to kafkaAuthSecrets" in notes

    values = {
        "scope": "namespaced",
        "watchNamespaces": ["team-a"],
        "kafkaAuthSecrets": [{"namespace": "team-a", "name": "kafka-auth"}],
        "crds": {"install": False},
    }
    namespaced = chart.notes(values, tmp_path / "namespaced")
    assert "  - team-a/kafka-auth" in namespaced
    assert "no CRD (crds.install=false)" in namespaced
    assert "a Role groupops in each watched namespace: team-a" in namespaced
    assert "kubectl apply -n team-a -f examples/policies/failover.yaml" in namespaced

    cluster = chart.notes({"scope": "cluster"}, tmp_path / "cluster")
    assert "a ClusterRole groupops: it manages consumer pods" in cluster
    assert "kubectl apply -n <namespace> -f examples/policies/failover.yaml" in cluster
