"""Everything an operator needs in a cluster, from its `Operator` object.

`operator_manifests(operator, namespace=..., image=...)` gathers, in apply order:

0. the Namespace (unless turned off);
1. the CRD of every kind a controller watches or a webhook serves (with
   ``conversion: Webhook`` when the operator registers a converter and the kind has
   several versions);
2. RBAC: a ServiceAccount, a ClusterRole with exactly `Operator.rules()` (the Lease
   rule in a namespaced Role instead) and their bindings; with a fleet whose provider
   reads the hub, the Role ``<name>-fleet`` that grants it (`_fleet`);
3. the Service the API server calls webhooks through, and the Deployment: gunicorn
   serving ``operator_kit.webhooks:app`` on one TLS port (webhooks, ``/livez``,
   ``/readyz``, ``/metrics``), probes on that port, the ServiceAccount, a non-root,
   read-only security context (user and group 65532), a preStop sleep that keeps it
   serving until the endpoints drop it (`PRE_STOP_SECONDS`), CPU, memory and ephemeral-storage
   requests and limits (the memory limit derived from the webhook server's bounds,
   `operator_kit.webhooks.limits.memory_limit_mib`); with more than one replica, a
   preferred anti-affinity that spreads the pods over nodes and a PodDisruptionBudget
   that keeps one serving during a drain (the webhooks fail closed: none serving means
   no writes);
4. the Validating/MutatingWebhookConfigurations for the registered admission webhooks;
5. with ``service_monitor``, the metrics Service and a ServiceMonitor (`_monitoring`);
   with ``metrics_secure``, the ClusterRole ``<operator>-metrics-reader`` to bind to
   Prometheus, the rights to create TokenReviews and SubjectAccessReviews in the
   operator's ClusterRole, ``OPERATOR_KIT_METRICS_SECURE=1`` in its Deployment, and a
   ServiceMonitor that sends a bearer token over HTTPS;
6. the admission policies that guard the installation (`_guard`): its ServiceAccount may
   change only caBundles, a second installation cannot re-point the cluster-scoped
   documents (each carries ``operator-kit.io/installation: <namespace>``), and only the
   operator sets or moves shard labels; the policies name the ServiceAccount exactly
   (their parameter, ``system:serviceaccount:<namespace>:<name>``).

An operator that registers no webhooks gets no Service, no webhook configurations and
no certificate: its Deployment runs the operator's own command line
(``python -m operator_kit``, which runs `Operator.main` of the Operator
``OPERATOR_KIT_APP`` names), the probes over HTTP on :8081 and the metrics on :8080.

Replicas: 2 with leader election (a follower ready to lead), 3 when the operator shards
(every replica a member), 1 without leader election; more than one replica of an
operator whose controllers do not elect a leader is refused (`ValueError`): every
replica would reconcile the same objects at once.

With a certificate brought along (`ExternalCertificate`: the Operator's
``webhook_certificate`` or the `certificate` argument), the Deployment mounts that Secret
at ``OPERATOR_KIT_TLS_DIR`` and sets ``OPERATOR_KIT_MANAGE_TLS=0``; the webhook
configurations and the converted CRDs carry ``cert-manager.io/inject-ca-from``, so
cert-manager's CA injector fills their caBundle, which the operator may only read.

Every document carries the recommended ``app.kubernetes.io/*`` labels (`_labels`).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from operator_kit.api.resources import CustomResource
from operator_kit.client.delegated import RULES as METRICS_AUTH_RULES
from operator_kit.manifests._crd import crd, with_conversion_webhook
from operator_kit.manifests._fleet import hub_access_documents
from operator_kit.manifests._guard import INSTALLATION_LABEL, guard_policies
from operator_kit.manifests._labels import RecommendedLabels, labelled, version_of_image
from operator_kit.manifests._monitoring import (
    metrics_reader_role,
    metrics_service,
    service_monitor,
)
from operator_kit.manifests._rbac import Rbac
from operator_kit.manifests._webhooks import (
    WebhookRule,
    WebhookTarget,
    excluding_namespace,
    webhook_configuration,
)
from operator_kit.settings import ENV, METRICS_PORT, NAME_ENV, PROBE_PORT
from operator_kit.webhooks.certificates import INJECT_CA_FROM, ExternalCertificate
from operator_kit.webhooks.limits import (
    CONTROLLERS_MEMORY_MIB,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_CONVERSION_BODY_BYTES,
    DEFAULT_THREADS,
    memory_limit_mib,
)

if TYPE_CHECKING:
    from operator_kit.operator import Operator
    from operator_kit.webhooks.server import Registration

WEBHOOK_PORT = 8443
# What the operator's image runs after ``gunicorn`` (LocalDeployment runs the same).
GUNICORN_ARGS = ("-c", "python:operator_kit.gunicorn_conf", "operator_kit.webhooks:app")
# What it runs when it serves no webhooks: the operator's own command line, `Operator.main`
# of the Operator OPERATOR_KIT_APP names (`operator_kit.__main__`; LocalDeployment runs the
# same with its own interpreter).
OPERATOR_COMMAND = ("python", "-m", "operator_kit")


def kinds_of(operator: Operator) -> list[type[CustomResource]]:
    """The storage version of every custom kind the operator watches or serves, once each."""
    return operator.custom_kinds()


def operator_manifests(operator: Operator, *, app: str, namespace: str, image: str,
                       replicas: int | None = None, ca_bundle: bytes | None = None,
                       webhook_port: int = 443,
                       certificate: ExternalCertificate | None = None,
                       namespace_document: bool = True,
                       version: str | None = None, instance: str | None = None,
                       part_of: str | None = None,
                       service_monitor: bool = False,
                       metrics_secure: bool = False) -> list[dict[str, Any]]:
    """All documents the operator needs, for ``kubectl apply -f -``.

    `app` is how the image imports the operator (``MODULE:ATTR``, gunicorn's
    ``OPERATOR_KIT_APP``); `webhook_port` is the Service port the API server calls the
    webhooks on; `certificate` (default: the operator's ``webhook_certificate``) a
    Secret to mount instead of the certificate the replicas keep themselves. The stream
    begins with the Namespace (unless `namespace_document` is False, or the namespace is
    one Kubernetes makes: default, kube-*), and every document carries the recommended
    ``app.kubernetes.io/*`` labels: name, instance (default: the operator's name),
    version (default: the image's tag), component, part-of (default: the operator's
    name) and managed-by. `replicas` defaults to 2 (a
    follower ready to lead), 3 when the operator shards (every replica a member), or 1
    without leader election; more than 1 without it is a `ValueError` when the operator
    has controllers (every replica would reconcile the same objects).

    An operator that registers no webhooks gets no Service, no webhook configurations and
    no certificate (`certificate` is ignored): its Deployment runs its own command line
    (`OPERATOR_COMMAND`), probes and metrics over HTTP on ports of their own.

    `service_monitor` adds a Prometheus Operator ServiceMonitor and the metrics Service
    it scrapes (`operator_kit.manifests._monitoring`). `metrics_secure` serves ``/metrics``
    only to bearer tokens the API server allows (``--metrics-secure``): the operator may
    ask it (TokenReviews, SubjectAccessReviews), and ``<name>-metrics-reader`` is the
    ClusterRole that allows a scraper."""
    replicas = _replicas(operator, replicas)
    registrations = operator.webhook_registrations()
    certificate = (certificate or operator.webhook_certificate) if registrations else None
    inject = ({INJECT_CA_FROM: certificate.inject_ca_from(namespace)} if certificate
              else None)
    labels = RecommendedLabels(operator.name, instance or operator.name,
                               version if version is not None else version_of_image(image),
                               part_of)
    target = WebhookTarget(operator.webhook_service, namespace, webhook_port, ca_bundle)
    converters = [r for r in registrations if r.type == "convert"]
    docs: list[dict[str, Any]] = []
    if namespace_document and not _made_by_kubernetes(namespace):
        docs.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    for kind in kinds_of(operator):
        definition = crd(kind)
        # The converter registered for this kind (convert(path, kind=...)), else one
        # registered for no kind in particular.
        converter = next((c for c in converters if c.kind is not None
                          and kind in c.kind.versions()), None) or next(
            (c for c in converters if c.kind is None), None)
        if converter is not None and len(kind.versions()) > 1:
            definition = with_conversion_webhook(definition, target, converter.path)
            if inject:
                definition["metadata"]["annotations"] = dict(inject)
        elif _served_schemas_differ(definition):
            warnings.warn(_NO_CONVERTER.format(
                kind=kind.kind, versions=", ".join(v.version for v in kind.versions())),
                UserWarning, stacklevel=2)
        docs.append(definition)
    docs += Rbac(operator.name, namespace, member_leases=operator.sharding is not None).rules(
        *operator.rules(external_certificate=certificate is not None),
        *(METRICS_AUTH_RULES if metrics_secure else ())).documents()
    docs += hub_access_documents(operator, namespace)  # what its fleet's provider reads
    if metrics_secure:
        docs.append(metrics_reader_role(operator.name))
    if registrations:
        docs.append(service(operator.webhook_service, namespace, selects=operator.name))
    docs.append(deployment(operator.name, app=app, namespace=namespace, image=image,
                           replicas=replicas, names=_names_env(operator, registrations),
                           tls_secret=certificate.secret if certificate else None,
                           webhooks=bool(registrations), metrics_secure=metrics_secure,
                           body_budget=operator.webhooks.budget_bytes() if registrations
                           else None))
    if replicas > 1:
        docs.append(disruption_budget(operator.name, namespace))
    docs.append(network_policy(operator.name, namespace, webhooks=bool(registrations)))
    if service_monitor:
        docs += _metrics_documents(operator, namespace, certificate,
                                   webhooks=bool(registrations), secure=metrics_secure)
    for mutating in (False, True):
        rules = [_webhook_rule(r, namespace) for r in registrations
                 if r.target is not None and r.type == ("mutate" if mutating else "validate")]
        if rules:
            name = (operator.mutating_configuration if mutating
                    else operator.validating_configuration)
            docs.append(webhook_configuration(name, mutating, target, rules))
            if inject:
                docs[-1]["metadata"]["annotations"] = dict(inject)
    docs += _guard(operator, docs, namespace, app, keeps_ca_bundles=certificate is None)
    for doc in docs:  # cluster-scoped: say which installation they belong to
        if "namespace" not in doc["metadata"] and doc["kind"] != "Namespace":
            doc["metadata"].setdefault("labels", {})[INSTALLATION_LABEL] = namespace
    return [labelled(doc, labels) for doc in docs]


def _guard(operator: Operator, docs: Sequence[dict[str, Any]], namespace: str, app: str, *,
           keeps_ca_bundles: bool) -> list[dict[str, Any]]:
    """The admission policies that guard these documents (`_guard`)."""
    def named(kind: str) -> list[str]:
        return [d["metadata"]["name"] for d in docs if d["kind"] == kind]
    crds = [d for d in docs if d["kind"] == "CustomResourceDefinition"]
    shard: list[str] = []
    sharded: list[tuple[str, str]] = []
    if operator.sharding is not None:
        shard = [operator.sharding.label_key(operator.name),
                 operator.sharding.drain_label_key(operator.name)]
        for controller in operator.controllers:
            if operator.sharding.shards(controller.name):
                primary = controller.primary_kind()
                sharded.append((primary.group, primary.resource_name))
                sharded += [(k.group, k.resource_name) for k in controller.owned_kinds()]
    return guard_policies(
        operator.name, namespace, app, account=operator.name,
        validating=named("ValidatingWebhookConfiguration"),
        mutating=named("MutatingWebhookConfiguration"),
        crds=[d["metadata"]["name"] for d in crds],
        ca_bundle_crds=[d["metadata"]["name"] for d in crds
                        if (d["spec"].get("conversion") or {}).get("webhook")],
        keeps_ca_bundles=keeps_ca_bundles, shard=shard, sharded=sharded)


def _metrics_documents(operator: Operator, namespace: str,
                       certificate: ExternalCertificate | None, *,
                       webhooks: bool, secure: bool = False) -> list[dict[str, Any]]:
    """The metrics Service and the ServiceMonitor: over TLS on the webhook port, checking
    the served certificate (the brought one's Secret, else the one the operator keeps),
    or over HTTP on the command line's metrics port (HTTPS when `secure`); when `secure`,
    with Prometheus's ServiceAccount token."""
    if not webhooks:
        return [metrics_service(operator.name, namespace, port=METRICS_PORT,
                                target_port="metrics"),
                service_monitor(operator.name, namespace, secure=secure)]
    if certificate:  # the name a webhook Certificate is issued for (cert-manager's habit)
        secret, server_name = certificate.secret, f"{operator.webhook_service}.{namespace}.svc"
    else:  # the operator's own certificate has the bare Service name too, which an
        # overlay's namePrefix rewrites (kustomizeconfig.yaml) and its namespace leaves alone
        secret, server_name = operator.webhook_secret, operator.webhook_service
    return [metrics_service(operator.name, namespace, port=WEBHOOK_PORT, target_port="https"),
            service_monitor(operator.name, namespace, tls_secret=secret,
                            server_name=server_name, secure=secure)]


def _replicas(operator: Operator, replicas: int | None) -> int:
    """How many replicas: the default for the operator, or `replicas` if it is safe."""
    elects = operator.leader_election is not None
    if replicas is None:
        if operator.sharding is not None:
            return 3
        return 2 if elects or not operator.controllers else 1
    if replicas > 1 and not elects and operator.controllers:
        raise ValueError(
            f"--replicas {replicas} without leader election: every replica would reconcile "
            f"the same objects at once; use --replicas 1, or give Operator "
            f"{operator.name!r} leader_election=LeaderElection()")
    return replicas


def _webhook_rule(registration: Registration, namespace: str) -> WebhookRule:
    """The rule of an admission webhook; on a kind the operator does not define, one that
    leaves the operator's own namespace out (`excluding_namespace`)."""
    target = registration.target
    assert target is not None
    selector = registration.namespace_selector
    if not target.defined_here:
        selector = excluding_namespace(selector, namespace)
    return WebhookRule(registration.kind or target, registration.path,
                       namespace_selector=selector,
                       object_selector=registration.object_selector)


def _made_by_kubernetes(namespace: str) -> bool:
    """default and kube-*: there already, and `kubectl delete -f` must not try them."""
    return namespace == "default" or namespace.startswith("kube-")


def _names_env(operator: Operator, registrations: Sequence[Registration]) -> dict[str, str]:
    """The names the operator refers to at run time, as the Deployment tells it them
    (`operator_kit.settings.NAME_ENV`): a kustomize namePrefix rewrites these values with the
    objects' names (kustomizeconfig.yaml)."""
    if not registrations:
        return {}
    types = {r.type for r in registrations}
    names = {NAME_ENV["webhook_service"]: operator.webhook_service}
    if "validate" in types:
        names[NAME_ENV["validating_configuration"]] = operator.validating_configuration
    if "mutate" in types:
        names[NAME_ENV["mutating_configuration"]] = operator.mutating_configuration
    return names


_NO_CONVERTER = (
    "{kind} is served as {versions} with different schemas, and the operator registers "
    "no conversion webhook: the API server will convert between them by changing "
    "apiVersion alone and prune the fields the other version lacks, losing data. Register "
    "a converter (@operator.webhooks.convert(\"/convert\")), or give the versions one schema."
)


def _served_schemas_differ(definition: dict[str, Any]) -> bool:
    schemas = [v["schema"] for v in definition["spec"]["versions"] if v.get("served", True)]
    return any(schema != schemas[0] for schema in schemas[1:])


def _labels(name: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": name, "app.kubernetes.io/managed-by": "operator-kit"}


def service(name: str, namespace: str, *, selects: str | None = None) -> dict[str, Any]:
    """The Service webhooks are called through (443 -> the pods' TLS port), in front of
    the pods of operator `selects` (default: `name`)."""
    return {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": namespace, "labels": _labels(selects or name)},
        "spec": {
            "selector": {"app.kubernetes.io/name": selects or name},
            "ports": [{"name": "https", "port": 443, "targetPort": "https",
                       "protocol": "TCP"}],
        },
    }


def _probe(path: str, port: str = "https", scheme: str = "HTTPS") -> dict[str, Any]:
    return {"httpGet": {"path": path, "port": port, "scheme": scheme},
            "periodSeconds": 10, "timeoutSeconds": 3, "failureThreshold": 3}


PRE_STOP_SECONDS = 5
"""How long a webhook-serving pod keeps serving after its deletion, before SIGTERM
(``lifecycle.preStop.sleep``, Kubernetes 1.30+): time for the Service's endpoints to drop
it. The termination grace period (40 s) covers it and gunicorn's 20 s graceful stop."""


def deployment(name: str, *, app: str, namespace: str, image: str,
               replicas: int = 2, names: Mapping[str, str] | None = None,
               tls_secret: str | None = None, webhooks: bool = True,
               metrics_secure: bool = False,
               body_budget: int | None = None) -> dict[str, Any]:
    """The operator's Deployment: gunicorn serving webhooks, probes and metrics over TLS
    (with `tls_secret`, from that Secret mounted read-only; the operator writes none);
    without `webhooks`, the operator's own command line (`OPERATOR_COMMAND`), probes over
    HTTP on :8081 and metrics on :8080, no certificate (HTTPS, self-signed, with
    `metrics_secure`).

    `names` are environment variables naming the objects the operator refers to;
    `metrics_secure` sets ``OPERATOR_KIT_METRICS_SECURE=1``. The memory limit is
    `CONTROLLERS_MEMORY_MIB`, plus with webhooks what answering them may take: the
    `memory_limit_mib` of `body_budget` (the Webhooks app's ``budget_bytes()``; default
    that of the default limits) on the worker's `DEFAULT_THREADS`."""
    secure = [{"name": ENV["metrics_secure"], "value": "1"}] if metrics_secure else []
    if not webhooks:
        container = _operator_container(name, image, app)
        container["env"] += secure
        return _deployment(name, namespace, replicas, container,
                           scheme="https" if metrics_secure else "http")
    env: list[dict[str, Any]] = [
        {"name": "OPERATOR_KIT_APP", "value": app},
        {"name": "OPERATOR_KIT_BIND", "value": f"0.0.0.0:{WEBHOOK_PORT}"},
        {"name": "OPERATOR_KIT_TLS_DIR", "value": "/run/operator-kit/tls"},
        *_pod_env(),
        *secure,
    ]
    env += [{"name": variable, "value": value} for variable, value in (names or {}).items()]
    tls_volume: dict[str, Any] = {"name": "tls", "emptyDir": {"medium": "Memory",
                                                              "sizeLimit": "1Mi"}}
    if tls_secret:
        env.append({"name": "OPERATOR_KIT_MANAGE_TLS", "value": "0"})
        # Readable by the pod's group only (fsGroup below), never written by the pod.
        tls_volume = {"name": "tls", "secret": {"secretName": tls_secret,
                                                "defaultMode": 0o440}}
    container = {
        "name": "operator",
        "image": image,
        "command": ["gunicorn", *GUNICORN_ARGS],
        "env": env,
        "ports": [{"name": "https", "containerPort": WEBHOOK_PORT, "protocol": "TCP"}],
        "livenessProbe": _probe("/livez"),
        "readinessProbe": _probe("/readyz"),
        # Serving on while the API server learns that the pod is going: gunicorn stops
        # accepting at SIGTERM, and the Service's endpoints drop a terminating pod only
        # a moment after its deletion, so a webhook call in that moment was refused (a
        # failed admission during a rolling update). The kubelet sleeps first.
        "lifecycle": {"preStop": {"sleep": {"seconds": PRE_STOP_SECONDS}}},
        "resources": _resources(memory_limit_mib(
            body_budget or max(DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_CONVERSION_BODY_BYTES),
            DEFAULT_THREADS)),
        "securityContext": _container_security(),
        "volumeMounts": [{"name": "tls", "mountPath": "/run/operator-kit/tls",
                          **({"readOnly": True} if tls_secret else {})},
                         {"name": "tmp", "mountPath": "/tmp"}],
    }
    return _deployment(name, namespace, replicas, container, scheme="https",
                       metrics_port=WEBHOOK_PORT, tls_volume=tls_volume,
                       group_readable=bool(tls_secret))


def _pod_env() -> list[dict[str, Any]]:
    return [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "POD_NAMESPACE",
             "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}]


def _resources(memory_mib: int = CONTROLLERS_MEMORY_MIB) -> dict[str, Any]:
    return {"requests": {"cpu": "50m", "memory": "96Mi", "ephemeral-storage": "16Mi"},
            "limits": {"cpu": "1", "memory": f"{memory_mib}Mi", "ephemeral-storage": "64Mi"}}


def _container_security() -> dict[str, Any]:
    return {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
            "runAsNonRoot": True, "capabilities": {"drop": ["ALL"]}}


def _operator_container(name: str, image: str, app: str) -> dict[str, Any]:
    """The container of an operator without webhooks: `Operator.main`, as run by hand,
    with the probe and metrics servers on every interface of the pod."""
    return {
        "name": "operator",
        "image": image,
        "command": list(OPERATOR_COMMAND),
        "env": [{"name": "OPERATOR_KIT_APP", "value": app},
                {"name": ENV["health_probe_bind_address"], "value": f":{PROBE_PORT}"},
                {"name": ENV["metrics_bind_address"], "value": f":{METRICS_PORT}"},
                *_pod_env()],
        "ports": [{"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"},
                  {"name": "probes", "containerPort": PROBE_PORT, "protocol": "TCP"}],
        "livenessProbe": _probe("/livez", "probes", "HTTP"),
        "readinessProbe": _probe("/readyz", "probes", "HTTP"),
        "resources": _resources(),
        "securityContext": _container_security(),
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
    }


def _deployment(name: str, namespace: str, replicas: int, container: dict[str, Any], *,
                scheme: str = "http", metrics_port: int = METRICS_PORT,
                tls_volume: dict[str, Any] | None = None,
                group_readable: bool = False) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": _labels(name)},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app.kubernetes.io/name": name}},
            "template": {
                "metadata": {"labels": _labels(name),
                             "annotations": {"prometheus.io/scrape": "true",
                                             "prometheus.io/scheme": scheme,
                                             "prometheus.io/port": str(metrics_port)}},
                "spec": {
                    "serviceAccountName": name,
                    "securityContext": {"runAsNonRoot": True, "runAsUser": 65532,
                                        "runAsGroup": 65532,
                                        **({"fsGroup": 65532} if group_readable else {}),
                                        "seccompProfile": {"type": "RuntimeDefault"}},
                    "terminationGracePeriodSeconds": 40,
                    **({"affinity": _spread(name)} if replicas > 1 else {}),
                    "containers": [container],
                    "volumes": [*([tls_volume] if tls_volume else []),
                                {"name": "tmp", "emptyDir": {"sizeLimit": "32Mi"}}],
                },
            },
        },
    }


def _spread(name: str) -> dict[str, Any]:
    """Prefer replicas on different nodes (preferred: a one-node cluster still runs them)."""
    return {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
        "weight": 100,
        "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                            "labelSelector": {"matchLabels": {"app.kubernetes.io/name": name}}},
    }]}}


def disruption_budget(name: str, namespace: str) -> dict[str, Any]:
    """At most one replica evicted at a time (a node drain never takes them all)."""
    return {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": namespace, "labels": _labels(name)},
        "spec": {"maxUnavailable": 1,
                 "selector": {"matchLabels": {"app.kubernetes.io/name": name}}},
    }


def network_policy(name: str, namespace: str, *, webhooks: bool = True) -> dict[str, Any]:
    """Ingress to the pods on their TLS port only (webhook calls, probes, metrics); without
    `webhooks`, on the metrics and probe ports only.

    Egress is left open: the operator calls the API server, whose address behind the
    ``kubernetes`` Service (after its DNAT, which is what a NetworkPolicy sees) differs
    from cluster to cluster; a guessed rule would cut the operator off (docs/how-to/deploying.md,
    "kube-score")."""
    return {
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": namespace, "labels": _labels(name)},
        "spec": {
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": name}},
            "policyTypes": ["Ingress"],
            "ingress": [{"ports": [{"port": port, "protocol": "TCP"} for port in
                                   (("https",) if webhooks else ("metrics", "probes"))]}],
        },
    }
