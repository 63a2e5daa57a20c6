"""``python -m tenancy_operator``: run the operator; ``--manifests`` prints its manifests."""

import sys

from tenancy_operator import operator

sys.exit(operator.main())
