"""``python -m team_operator``: run the hub operator and its fleet until SIGTERM."""

import sys

from team_operator import fleet, operator

sys.exit(fleet().run_with(operator))
