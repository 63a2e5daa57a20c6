"""Every Prometheus metric operator_kit exports, in one place.

They live in prometheus_client's default registry (the one piece of global state the
project allows) and are served on ``/metrics``. Names follow Prometheus conventions:
``_total`` counters, ``_seconds`` histograms, and labels kept to bounded sets
(controller, resource, path, outcome) so cardinality never grows with objects.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

# -- controllers -----------------------------------------------------------------------
RECONCILES = Counter(
    "operator_kit_controller_reconciles",
    "Reconciles run, by controller.",
    ["controller"],
)
RECONCILE_ERRORS = Counter(
    "operator_kit_controller_reconcile_errors",
    "Reconciles (or finalizer cleanups) that raised, by controller.",
    ["controller"],
)
RECONCILE_DURATION = Histogram(
    "operator_kit_controller_reconcile_duration_seconds",
    "Time spent in one reconcile, by controller.",
    ["controller"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
QUEUE_DEPTH = Gauge(
    "operator_kit_controller_queue_depth",
    "Keys waiting in a controller's work queue (ready or delayed).",
    ["controller"],
)
RETRIES = Counter(
    "operator_kit_controller_retries",
    "Keys requeued with failure backoff after an error, by controller.",
    ["controller"],
)
IN_FLIGHT = Gauge(
    "operator_kit_controller_reconciles_in_flight",
    "Reconciles running now, by controller.",
    ["controller"],
)

STUCK = Gauge(
    "operator_kit_controller_stuck_reconciles",
    "Reconciles running longer than the controller's reconcile_timeout.",
    ["controller"],
)

# -- watches ---------------------------------------------------------------------------
WATCH_RESTARTS = Counter(
    "operator_kit_watch_restarts",
    "Watches restarted, by resource and reason (expired, stalled, error, closed, relist).",
    ["resource", "reason"],
)
CACHE_OBJECTS = Gauge(
    "operator_kit_cache_objects",
    "Objects held in a watch's cache, by resource.",
    ["resource"],
)

# -- leader election -------------------------------------------------------------------
LEADER = Gauge(
    "operator_kit_leader",
    "1 while this replica holds the operator's Lease, else 0.",
    ["operator"],
)

# -- webhooks --------------------------------------------------------------------------
WEBHOOK_REQUESTS = Counter(
    "operator_kit_webhook_requests",
    "Webhook requests by path and outcome (allowed, denied, patched, converted, "
    "bad_request, error).",
    ["path", "outcome"],
)
WEBHOOK_READ_TIMEOUTS = Counter(
    "operator_kit_webhook_read_timeouts",
    "Connections closed because nothing complete arrived within OPERATOR_KIT_READ_TIMEOUT, "
    "by stage: connecting (TLS handshake), idle (no request began), request (partway).",
    ["stage"],
)
WEBHOOK_DURATION = Histogram(
    "operator_kit_webhook_duration_seconds",
    "Time to answer one webhook request, by path.",
    ["path"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
)

# -- API server requests (client-go's names, so its dashboards and alerts work) ---------
REST_CLIENT_REQUESTS = Counter(
    "rest_client_requests",
    "Number of HTTP requests to the API server, partitioned by status code, method, and "
    "host (code is <error> when no answer came).",
    ["code", "method", "host"],
)
REST_CLIENT_REQUEST_DURATION = Histogram(
    "rest_client_request_duration_seconds",
    "Request latency in seconds (to the response headers for a watch), broken down by "
    "verb and host.",
    ["verb", "host"],
    buckets=(0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0),
)
