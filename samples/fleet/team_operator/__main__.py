"""``python -m team_operator``: the operator's command line (flags, probes, metrics,
``--manifests``); running, it runs the hub operator with its fleet until SIGTERM."""

import sys

from operator_kit.cli import main
from team_operator import fleet, operator

sys.exit(main(operator, run=lambda: fleet().run_with(operator)))
