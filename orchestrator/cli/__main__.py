"""`python -m orchestrator.cli`: the same as the `paratune` command."""

import sys

from orchestrator.cli import main

sys.exit(main())
