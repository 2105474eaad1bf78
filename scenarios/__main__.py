"""``python -m durasim.scenarios``: the ``durasim`` command."""

import sys

from ._cli import main

sys.exit(main())
