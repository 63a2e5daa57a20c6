"""The controller runtime: from a watch event to a reconcile and its writes.

In the order an event travels: `watching` (list, then watch, per kind; `Informers`
shares one per kind), `cache` (the `Store` the watch keeps, with its indexes),
`filters` (which changes queue a reconcile), `queueing` (the per-key work queue with
backoff), `controller` (what a user declares — `Controller`, `Owns`, `Watch`, `Index`,
`Action` — and the `ControllerRunner` that joins the stages), `context` (the `Context`
a reconcile gets), `objects` (reads from the cache or the API, writes by kind),
`own_writes` (the resourceVersions a controller wrote, so their echoes are recognised)
and `scope` (what a sharded runner is told about its share).

Layer: above `operator_kit.client`; below election, webhooks, manifests and the operator.
"""
