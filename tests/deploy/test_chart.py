"""The Helm chart (helm/shadowguard): values against values.schema.json, every template rendered
(tests/deploy/gotemplate.py, no helm binary here) and parsed as YAML, and each object checked against the
``kubernetes`` client's models: an unknown field or a wrong type anywhere fails, a missing required field
fails. docs/deploy.md lists what these tests do not check."""

from __future__ import annotations

import copy
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from kubernetes import client as k8s

from proxy.config import ProxyConfig

CHART = Path(__file__).resolve().parents[2] / "helm" / "shadowguard"
TOKEN = "a" * 64
REVIEWER_TOKEN = "b" * 64

_spec = importlib.util.spec_from_file_location("sg_gotemplate", Path(__file__).with_name("gotemplate.py"))
assert _spec is not None and _spec.loader is not None
gotemplate = importlib.util.module_from_spec(_spec)
sys.modules["sg_gotemplate"] = gotemplate
_spec.loader.exec_module(gotemplate)

MODELS = {
    ("v1", "ConfigMap"): "V1ConfigMap",
    ("v1", "Secret"): "V1Secret",
    ("v1", "Service"): "V1Service",
    ("apps/v1", "Deployment"): "V1Deployment",
    ("policy/v1", "PodDisruptionBudget"): "V1PodDisruptionBudget",
    ("batch/v1", "Job"): "V1Job",
}
_SCALARS: dict[str, tuple[type, ...]] = {"str": (str,), "int": (int,), "bool": (bool,), "float": (int, float)}


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def values(**over: Any) -> dict[str, Any]:
    """The chart's values.yaml with ``over`` merged in as ``helm --set``/``-f`` would."""
    base = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    given = {"auth": {"agents": [{"name": "agent", "token_sha256": TOKEN}]}}
    return _merge(_merge(base, given), over)


def schema_errors(vals: dict[str, Any]) -> list[str]:
    schema = json.loads((CHART / "values.schema.json").read_text(encoding="utf-8"))
    validator = jsonschema.Draft7Validator(schema)
    return [e.message for e in validator.iter_errors(vals)]


def render(vals: dict[str, Any]) -> list[dict[str, Any]]:
    """Every object the chart renders with ``vals`` (which must pass the schema first, as in helm)."""
    assert schema_errors(vals) == []
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text(encoding="utf-8"))
    context = {
        "Values": vals,
        "Release": {"Name": "demo", "Namespace": "default", "Service": "Helm"},
        "Chart": {"Name": chart["name"], "Version": chart["version"], "AppVersion": chart["appVersion"]},
    }
    sources = {p.name: p.read_text(encoding="utf-8") for p in sorted((CHART / "templates").iterdir())}
    renderer = gotemplate.Renderer(sources, context)
    objects: list[dict[str, Any]] = []
    for name in sources:
        if name.startswith("_"):
            continue
        for doc in yaml.safe_load_all(renderer.render(name)):
            if doc is not None:
                objects.append(doc)
    return objects


def check_model(value: Any, type_name: str, where: str) -> None:
    """``value`` (as in YAML) fits the kubernetes client model ``type_name``: no unknown key, right types."""
    if type_name.startswith("Optional["):
        check_model(value, type_name[9:-1], where)
    elif type_name.startswith(("list[", "List[")):
        assert isinstance(value, list), f"{where}: a list expected"
        for i, item in enumerate(value):
            check_model(item, type_name[5:-1], f"{where}[{i}]")
    elif type_name.startswith(("dict(", "Dict[")):
        assert isinstance(value, dict), f"{where}: a map expected"
        inner = type_name[5:-1].split(", ", 1)[1]
        for key, item in value.items():
            check_model(item, inner, f"{where}.{key}")
    elif type_name in _SCALARS:
        ok = isinstance(value, _SCALARS[type_name]) and (type_name == "bool" or not isinstance(value, bool))
        assert ok, f"{where}: {type_name} expected, got {value!r}"
    elif type_name != "object":
        model = getattr(k8s, type_name)
        assert isinstance(value, dict), f"{where}: a {type_name} object expected"
        by_json = {json_key: attr for attr, json_key in model.attribute_map.items()}
        for key, item in value.items():
            assert key in by_json, f"{where}: {key!r} is not a field of {type_name}"
            check_model(item, model.openapi_types[by_json[key]], f"{where}.{key}")


def check_object(obj: dict[str, Any]) -> Any:
    model = MODELS[(obj["apiVersion"], obj["kind"])]
    check_model(obj, model, obj["kind"])
    # the client's own deserialisation: required fields (e.g. a container's name) must be present
    return k8s.ApiClient()._ApiClient__deserialize(obj, model)  # type: ignore[attr-defined]


def by_kind(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, f"{kind} {name}: {len(found)} rendered"
    return found[0]


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


# -- tests ----------------------------------------------------------------------------------------


def test_default_values_render_valid_kubernetes_objects() -> None:
    objects = render(values())
    kinds = sorted(o["kind"] for o in objects)
    assert kinds == [
        *("ConfigMap", "Deployment", "Deployment", "PodDisruptionBudget", "Secret", "Service", "Service")
    ]
    for obj in objects:
        check_object(obj)
    deployment = by_kind(objects, "Deployment", "demo-shadowguard")
    pod = deployment["spec"]["template"]
    assert pod["metadata"]["annotations"]["prometheus.io/scrape"] == "true"
    (proxy,) = pod["spec"]["containers"]
    assert proxy["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert proxy["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert proxy["resources"]["requests"] == {"cpu": "100m", "memory": "192Mi"}
    assert proxy["securityContext"]["runAsNonRoot"] is True
    env = env_of(proxy)
    assert env["SHADOWGUARD_APPROVALS__STORE"] == "redis://demo-shadowguard-redis:6379/0"
    assert env["SHADOWGUARD_REPLICAS__REDIS"] == "redis://demo-shadowguard-redis:6379/0"
    assert env["SHADOWGUARD_REPLICAS__URL"] == "http://$(POD_IP):8790"
    names = [e["name"] for e in proxy["env"]]
    assert names.index("POD_IP") < names.index("SHADOWGUARD_REPLICAS__URL")  # k8s expands earlier vars only
    for key in ("agents", "reviewers", "orchestrators"):
        ref = env[f"SHADOWGUARD_AUTH__{key.upper()}"]["secretKeyRef"]
        assert ref == {"name": "demo-shadowguard-tokens", "key": key}
    service = by_kind(objects, "Service", "demo-shadowguard")
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]


def test_rendered_config_and_secret_load_in_the_proxy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ConfigMap's file plus the Secret's token sets, as the pod gets them, pass the proxy's own
    config validation (proxy/config.py), tokens landing in the right sets."""
    reviewers = [{"name": "rev", "role": "approver", "token_sha256": REVIEWER_TOKEN}]
    upstream = {"name": "app", "transport": "http", "url": "http://127.0.0.1:9000/mcp"}
    objects = render(values(auth={"reviewers": reviewers}, config={"upstreams": [upstream]}))
    config_file = tmp_path / "shadowguard.yaml"
    config_file.write_text(by_kind(objects, "ConfigMap")["data"]["shadowguard.yaml"], encoding="utf-8")
    secret = by_kind(objects, "Secret")["stringData"]
    for key, value in secret.items():
        monkeypatch.setenv(f"SHADOWGUARD_AUTH__{key.upper()}", value)
    loaded = ProxyConfig.load(config_file)
    assert [a.name for a in loaded.auth.agents] == ["agent"]
    assert [(r.name, r.role) for r in loaded.auth.reviewers] == [("rev", "approver")]
    assert loaded.auth.orchestrators == []
    assert loaded.upstreams[0].url == "http://127.0.0.1:9000/mcp"


def test_sidecar_puts_the_proxy_beside_the_app() -> None:
    app = {"name": "agent-app", "image": "example/app:1", "port": 8080, "env": [{"name": "X", "value": "1"}]}
    objects = render(values(mode="sidecar", replicaCount=1, redis={"enabled": False}, app=app))
    for obj in objects:
        check_object(obj)
    containers = by_kind(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["agent-app", "shadowguard"]
    assert env_of(containers[0]) == {"SHADOWGUARD_URL": "http://127.0.0.1:8790/mcp", "X": "1"}
    assert "SHADOWGUARD_APPROVALS__STORE" not in env_of(containers[1])
    assert "SHADOWGUARD_REPLICAS__REDIS" not in env_of(containers[1])
    ports = {p["name"] for p in by_kind(objects, "Service")["spec"]["ports"]}
    assert ports == {"http", "app"}


def test_external_redis_existing_secret_servicemonitor_and_no_pdb() -> None:
    vals = values(
        auth={"agents": [], "existingSecret": "my-tokens"},
        redis={"enabled": False, "externalUrl": "redis://redis.example:6379/2"},
        metrics={"serviceMonitor": {"enabled": True}},
        podDisruptionBudget={"enabled": False},
    )
    objects = render(vals)
    assert not [o for o in objects if o["kind"] in ("Secret", "PodDisruptionBudget")]
    assert len([o for o in objects if o["kind"] == "Deployment"]) == 1
    (proxy,) = by_kind(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    env = env_of(proxy)
    assert env["SHADOWGUARD_APPROVALS__STORE"] == "redis://redis.example:6379/2"
    assert env["SHADOWGUARD_AUTH__AGENTS"]["secretKeyRef"]["name"] == "my-tokens"
    monitor = by_kind(objects, "ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["spec"]["endpoints"] == [{"port": "http", "path": "/metrics", "interval": "30s"}]


def test_campaign_job() -> None:
    objects = render(values(campaign={"enabled": True, "dataClaim": "bench-data"}))
    job = check_object(by_kind(objects, "Job"))
    container = job.spec.template.spec.containers[0]
    assert container.command[:3] == ["shadowguard", "bench", "run"]
    assert container.args == ["--agent", "oracle", "--arms", "off,guard", "--repeat", "2", "--workers", "2"]
    assert job.spec.template.spec.volumes[0].persistent_volume_claim.claim_name == "bench-data"
    assert job.spec.template.spec.restart_policy == "Never"


@pytest.mark.parametrize(
    ("over", "says"),
    [
        ({"replicaCount": "two"}, "is not of type 'integer'"),
        ({"port": 70000}, "is greater than the maximum"),
        ({"auth": {"agents": []}}, "is not valid under any of the given schemas"),
        ({"auth": {"agents": [{"name": "a", "token_sha256": "secret"}]}}, "does not match"),
        ({"auth": {"reviewers": [{"name": "r", "role": "admin", "token_sha256": TOKEN}]}}, "is not one of"),
        ({"redis": {"enabled": False}}, "is not valid under any of the given schemas"),
        ({"mode": "sidecar"}, "should be non-empty"),
        ({"config": {"auth": {"agents": []}}}, "should not be valid"),
        ({"campaign": {"enabled": True}}, "should be non-empty"),
        ({"resources": {"requests": {"cpu": "lots", "memory": "1Gi"}}}, "does not match"),
        ({"replica": 3}, "Additional properties are not allowed"),
    ],
)
def test_schema_rejects_wrong_values(over: dict[str, Any], says: str) -> None:
    errors = schema_errors(values(**over))
    assert errors, f"{over} was accepted"
    assert any(says in e for e in errors), errors


def test_model_check_catches_a_misplaced_field() -> None:
    """The object check is not vacuous: a field in the wrong place or of the wrong type fails."""
    deployment = copy.deepcopy(by_kind(render(values()), "Deployment", "demo-shadowguard"))
    deployment["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["path"] = "/healthz"
    with pytest.raises(AssertionError, match="'path' is not a field of V1Probe"):
        check_object(deployment)
    deployment = copy.deepcopy(by_kind(render(values()), "Deployment", "demo-shadowguard"))
    deployment["spec"]["replicas"] = "2"
    with pytest.raises(AssertionError, match="int expected"):
        check_object(deployment)
    del deployment["spec"]["selector"]
    deployment["spec"]["replicas"] = 2
    with pytest.raises(ValueError, match="selector"):
        check_object(deployment)
