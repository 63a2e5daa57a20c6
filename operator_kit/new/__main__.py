"""``python -m operator_kit.new``: the starter generator's command line (`main`)."""

import sys

from operator_kit.new import main

sys.exit(main())
