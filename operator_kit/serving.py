"""The operator's web side: the app that serves its webhooks and probes, and their certificate.

`WebhookServing` is a part of `operator_kit.operator.Operator`, kept in a module of its
own: the Flask app (``/livez``, ``/readyz``, ``/metrics`` and the webhooks registered on
it), the ``kubernetes.io/tls`` Secret its replicas share the webhook certificate in, the
CA bundles that must trust it (`operator_kit.webhooks.certkeeper`), and the RBAC rules
all that needs. With `metrics_secure`, ``/metrics`` answers only requests whose bearer
token the API server allows to ``get /metrics`` (`operator_kit.client.delegated`).
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from operator_kit.api.rbac import Rule
from operator_kit.client.delegated import DelegatedAuth
from operator_kit.client.events import RULE as EVENTS_RULE
from operator_kit.client.events import EventRecorder
from operator_kit.client.transport import Api, api_client
from operator_kit.probes import add_probe_views
from operator_kit.settings import ENV, env_bool

if TYPE_CHECKING:
    from operator_kit.api.resources import CustomResource
    from operator_kit.operator import Operator
    from operator_kit.webhooks.certificates import ExternalCertificate
    from operator_kit.webhooks.server import Registration, Webhooks

log = logging.getLogger("operator_kit.operator")


class WebhookServing:
    """The webhooks, probes and metrics app of an `Operator`, and its certificate."""

    name: str
    kubeconfig: str | None
    stopping: threading.Event
    webhook_certificate: ExternalCertificate | None
    webhook_service: str
    validating_configuration: str
    mutating_configuration: str
    _webhooks: Webhooks | None
    _tls_keeper: Any
    metrics_secure: bool | None = None
    """``/metrics`` only for bearer tokens the API server allows to ``get /metrics``
    (``--metrics-secure``); None: as ``OPERATOR_KIT_METRICS_SECURE`` says (off unset)."""
    _metrics_checker: DelegatedAuth | None = None

    if TYPE_CHECKING:  # the Operator's
        @property
        def api(self) -> Api: ...

        @property
        def namespace(self) -> str: ...

        def custom_kinds(self) -> list[type[CustomResource]]: ...

        def live(self) -> bool: ...

        def ready(self) -> bool: ...

        def ready_detail(self) -> str: ...

    @property
    def webhooks(self) -> Webhooks:
        """The Flask app that serves this operator's webhooks, probes and metrics."""
        if self._webhooks is None:
            from operator_kit.webhooks.server import Webhooks

            self._webhooks = Webhooks(self.name)
            add_probe_views(self._webhooks, live=self.live, ready=self.ready,
                            metrics_auth=self.metrics_auth, detail=self.ready_detail)
        return self._webhooks

    def metrics_auth(self) -> DelegatedAuth | None:
        """What checks a scrape's token when the metrics are secure (`metrics_secure`),
        over the operator's own API client; None when they are not."""
        secure = self.metrics_secure
        if secure is None:
            secure = env_bool(ENV["metrics_secure"], False)
        if not secure:
            return None
        checker = self._metrics_checker
        if checker is None or checker.api is not self.api:
            checker = self._metrics_checker = DelegatedAuth(self.api)
        return checker

    @property
    def app(self) -> Webhooks:
        """The same as `webhooks`: the name gunicorn's ``OPERATOR_KIT_APP`` looks up."""
        return self.webhooks

    def webhook_registrations(self) -> tuple[Registration, ...]:
        """The webhooks registered on this operator's app (none if it has no app yet)."""
        return self._webhooks.registrations() if self._webhooks is not None else ()

    @property
    def webhook_secret(self) -> str:
        """The ``kubernetes.io/tls`` Secret replicas share their webhook certificate in."""
        return f"{self.name}-webhook-tls"

    def prepare_webhook_tls(self, directory: str) -> None:
        """Get the shared webhook certificate, install it in `directory`, patch CA bundles.

        Run before the webhook server starts (gunicorn_conf does it in the master): the
        first replica creates the certificate Secret, the others read it (and heal or
        renew it when needed); every configuration and conversion webhook of this
        operator is told to trust its CA (`operator_kit.webhooks.certkeeper`). Nothing to do, and
        nothing done, when the operator has no webhooks or brings its own certificate
        (`webhook_certificate`).
        """
        if not self.webhook_registrations() or self.webhook_certificate is not None:
            return
        from operator_kit.cli import apply_environment

        # the renamed Service and configurations, the namespace
        apply_environment(cast("Operator", self))
        # A client of its own: this runs in gunicorn's master, whose connections must not
        # be inherited by the worker it forks.
        with api_client(self.kubeconfig) as api:
            keeper = self._certificate_keeper(Api(api), directory, manage=True)
            keeper.sync(wait=False)
        assert keeper.installed is not None
        log.info("operator %s: webhook certificate installed in %s (valid until %s)",
                 self.name, directory, keeper.installed.not_after.isoformat())

    def keep_webhook_tls(self, directory: str, *, manage: bool = True) -> None:
        """In the serving process: follow the certificate Secret from now on (renew,
        rotate, heal, keep the caBundles) and be not ready while a caBundle does not trust
        the served certificate. With `manage` False only that check is made."""
        if not self.webhook_registrations():
            return
        from operator_kit.cli import apply_environment

        apply_environment(cast("Operator", self))
        manage = manage and self.webhook_certificate is None
        keeper = self._certificate_keeper(self.api, directory, manage=manage)
        keeper.recorder = EventRecorder(self.api, self.name)
        if manage and keeper.installed is not None and keeper.problem is None:
            pass  # just installed and checked by prepare_webhook_tls in the master
        else:  # check now (and post the Event the master could not, e.g. another
            # installation's webhook configuration)
            keeper.problem = "the webhook certificate was not checked yet"
            try:
                keeper.sync()
            except Exception as err:  # noqa: BLE001 - the thread retries; logged
                log.error("operator %s: checking the webhook certificate failed: %s",
                          self.name, err)
        keeper.start(self.stopping)

    def _certificate_keeper(self, api: Api, directory: str, *, manage: bool) -> Any:
        from operator_kit.webhooks.certkeeper import CertificateKeeper, Rotation

        keeper = self._tls_keeper
        if keeper is None or keeper.manage != manage:
            validating, mutating, crds = self._ca_bundle_targets()
            keeper = CertificateKeeper(
                api, self.namespace, self.webhook_secret, self.webhook_service, Path(directory),
                validating=validating, mutating=mutating, crds=crds,
                rotation=Rotation.from_env(), manage=manage)
            self._tls_keeper = keeper
        keeper.api = api
        return keeper

    def _ca_bundle_targets(self) -> tuple[list[str], list[str], list[str]]:
        """What must trust the webhook CA: the validating and the mutating configuration
        (`validating_configuration`, `mutating_configuration`) when it has such webhooks,
        and the CRDs its conversion webhook converts — the same kinds the manifests give
        ``conversion: Webhook``."""
        types = {r.type for r in self.webhook_registrations()}
        crds: list[str] = []
        if "convert" in types:
            crds = sorted(f"{k.plural}.{k.group}" for k in self.custom_kinds()
                          if len(k.versions()) > 1)
        return ([self.validating_configuration] if "validate" in types else [],
                [self.mutating_configuration] if "mutate" in types else [], crds)

    def _webhook_rules(self, external: bool) -> list[Rule]:
        """What serving webhooks needs: the shared certificate and the CA bundle patches."""
        if not self.webhook_registrations():
            return []
        rules = [EVENTS_RULE]
        if not external:  # a mounted Secret is read by the kubelet, not by the operator
            rules += [Rule([""], ["secrets"], ["create"]),
                      Rule([""], ["secrets"], ["get", "update"], [self.webhook_secret])]
        validating, mutating, crds = self._ca_bundle_targets()
        for names, group, resource in (
                (validating, "admissionregistration.k8s.io", "validatingwebhookconfigurations"),
                (mutating, "admissionregistration.k8s.io", "mutatingwebhookconfigurations"),
                (crds, "apiextensions.k8s.io", "customresourcedefinitions")):
            if names:
                # Brought-your-own: read to check trust; cert-manager writes the caBundle.
                rules.append(Rule([group], [resource], ["get"] if external else ["get", "patch"],
                                  names))
        return rules
