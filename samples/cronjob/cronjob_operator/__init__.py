"""operator_kit's tutorial: kubebuilder's CronJob operator, written in Python.

``cronjob_operator:operator`` is the `Operator`::

    python -m cronjob_operator --manifests | kubectl apply -f -
"""

# --8<-- [start:operator]
from cronjob_operator.controller import CronJobController
from cronjob_operator.resources import CronJob, CronJobSpec, CronJobStatus
from cronjob_operator.webhooks import register
from operator_kit import LeaderElection, Operator

operator = Operator("cronjob-operator", [CronJobController()],
                    leader_election=LeaderElection(lease_name="cronjob-operator"))
register(operator.webhooks)
# --8<-- [end:operator]

__all__ = ["CronJob", "CronJobController", "CronJobSpec", "CronJobStatus", "operator"]
