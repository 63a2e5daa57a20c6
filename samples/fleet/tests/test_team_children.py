"""What a Team declares on each member (no API server needed)."""

from __future__ import annotations

from team_operator import Team, TeamSpec, TeamSync, namespace_of, operator

from operator_kit.manifests import crd


def test_a_team_declares_its_namespace_settings_and_role_binding_per_cluster() -> None:
    team = Team("payments", TeamSpec(members=["ana"], role="view", config={"tier": "gold"}))
    namespace, config, binding = TeamSync().children(team, "east")
    assert namespace == {"apiVersion": "v1", "kind": "Namespace",
                         "metadata": {"name": "team-payments"}}
    assert config["metadata"] == {"name": "team-config", "namespace": "team-payments"}
    assert config["data"] == {"tier": "gold", "cluster": "east"}
    assert binding["roleRef"]["name"] == "view"
    assert binding["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                                    "name": "ana"}]


def test_a_team_may_name_its_namespace() -> None:
    assert namespace_of(Team("a", TeamSpec(namespace="shared"))) == "shared"
    assert namespace_of(Team("a", TeamSpec())) == "team-a"


def test_the_hub_needs_the_team_crd_and_rbac_on_teams_and_their_status() -> None:
    definition = crd(Team)
    assert definition["spec"]["scope"] == "Cluster"
    resources = {r for rule in operator.rules() for r in rule.resources}
    assert {"teams", "teams/status"} <= resources
