"""``python -m backup_operator``: run the operator; ``--manifests`` prints its manifests."""

import sys

from backup_operator import operator

sys.exit(operator.main())
