"""Leader election and sharding: which replica runs what.

`leader`: a `coordination.k8s.io` Lease (`LeaderElection`, `LeaderElector`), never two
holders. `sharding`: objects of a controller spread over replicas by a consistent-hash
ring and member Leases (`Sharding`), moved by a drain handshake.

Layer: above `operator_kit.runtime`; independent of `operator_kit.webhooks`.
"""
