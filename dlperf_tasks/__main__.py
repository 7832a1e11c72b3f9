import sys

from dlperf_tasks.cli import main

sys.exit(main())
