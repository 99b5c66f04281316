"""``python -m parbench.cli``: the ``parbench`` command."""

import sys

from .main import main

sys.exit(main())
