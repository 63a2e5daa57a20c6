"""A complete operator: Backups become CronJobs, with webhooks and leader election.

``backup_operator:operator`` is the `Operator`; ``backup_operator.Backup`` its kind::

    python -m operator_kit.manifests backup_operator:operator | kubectl apply -f -
    OPERATOR_KIT_APP=backup_operator:operator gunicorn -c python:operator_kit.gunicorn_conf \\
        operator_kit.webhooks:app
"""

from backup_operator.controller import BackupController
from backup_operator.resources import Backup, BackupSpec, BackupSpecV2, BackupStatus, BackupV2
from backup_operator.webhooks import register
from operator_kit import LeaderElection, Operator

# One replica reconciles at a time: the holder of Lease "backup-operator" in the
# operator's namespace (client-go's timings).
operator = Operator("backup-operator", [BackupController()],
                    leader_election=LeaderElection(lease_name="backup-operator"))
register(operator.webhooks)

__all__ = ["Backup", "BackupController", "BackupSpec", "BackupSpecV2", "BackupStatus",
           "BackupV2", "operator"]
