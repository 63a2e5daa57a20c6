"""Webhooks: admission and conversion over TLS, and the certificate that serves them.

`server`: the Flask app (`Webhooks`: `validate`, `mutate`, `convert`) and how one request
flows; `admission`: the AdmissionReview on the wire (`AdmissionRequest`, `Denied`);
`conversion`: the ConversionReview; `jsonpatch`: a mutating answer's RFC 6902 patch;
`loader`: the gunicorn entry point (which app a worker serves); `certificates`: the CA and
serving certificate (`WebhookCertificate`, `ExternalCertificate`); `certkeeper`: keeping
it valid and its CA bundle injected while the operator runs; `tls`: the TLS policy;
`gunicorn_worker`: the worker that keeps idle and slow connections off its threads;
`limits`: the body budget, the memory limit derived from it, and log throttling.

``gunicorn operator_kit.webhooks:app`` serves the object named by ``OPERATOR_KIT_APP``.

Layer: above `operator_kit.runtime`; independent of `operator_kit.election`.
"""

from typing import Any

from operator_kit.webhooks.admission import AdmissionRequest, Denied
from operator_kit.webhooks.jsonpatch import json_patch
from operator_kit.webhooks.loader import import_target, load_app, loaded_target
from operator_kit.webhooks.server import Registration, Webhooks

__all__ = [
    "AdmissionRequest",
    "Denied",
    "Registration",
    "Webhooks",
    "import_target",
    "json_patch",
    "load_app",
    "loaded_target",
]


def __getattr__(name: str) -> Any:
    # ``gunicorn operator_kit.webhooks:app`` reads ``app`` here, in the worker process.
    if name == "app":
        return load_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
