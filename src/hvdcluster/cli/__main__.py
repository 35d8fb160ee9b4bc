"""``python -m hvdcluster.cli``."""

import sys

from . import main

sys.exit(main())
