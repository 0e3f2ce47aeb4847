"""`python -m src.ptx count ...`: see src/ptx/cli.py."""

import sys

from src.ptx.cli import main

sys.exit(main())
