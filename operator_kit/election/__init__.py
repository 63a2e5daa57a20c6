"""Leader election and sharding: which replica runs what.

`leader`: a `coordination.k8s.io` Lease (`LeaderElection`, `LeaderElector`), never two
holders. `sharding`: objects of a controller spread over replicas by a consistent-hash
ring and member Leases (`Sharding`, the pure `plan`), moved by a drain handshake;
`sharder`: the run-time side (a member's Lease and fenced writes, the leader's assigner).

Layer: above `operator_kit.runtime`; independent of `operator_kit.webhooks`.
"""
