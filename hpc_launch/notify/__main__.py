"""`python -m hpc_launch.notify ...`: the job script's own sender (job scripts in queues call this path)."""

import sys

from . import main

sys.exit(main())
