"""The controller runtime: from a watch event to a reconcile and its writes.

In the order an event travels: `watching` (list, then watch, per kind; `Informers`
shares one per kind), `streaming` (lists streamed as a watch's initial events, and
reading a watch's stream), `transforms` (what an object becomes before it is cached),
`cache` (the `Store` the watch keeps, with its indexes, and label
selectors matched as `selectors` parses them, as the API server does), `filters` (which
changes queue a reconcile), `mapping` (what a `Watch` mapper returned, checked),
`queueing` (the per-key work queue with backoff), `controller` (what a user declares —
`Controller`, `Owns`, `Watch`, `Index`, `Action`), `runner` (the `ControllerRunner` that
joins the stages), `consistency` (a reconcile starts once the caches have seen what the
last one wrote), `context` (the `Context` a reconcile gets), `objects` (reads from the
cache or the API, writes by kind), `own_writes` (what a controller wrote: the echoes of
its writes, its last applies) and `scope` (what a sharded runner is told about its
share).

Layer: above `operator_kit.client`; below election, webhooks, manifests and the operator.
"""
