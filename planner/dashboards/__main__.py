import sys

from planner.dashboards import main

sys.exit(main())
