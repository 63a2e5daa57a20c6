"""``python -m cronjob_operator``: run the operator; ``--manifests`` prints its manifests."""

import sys

from cronjob_operator import operator

sys.exit(operator.main())
