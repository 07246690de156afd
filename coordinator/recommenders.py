"""Moved to models/recommenders.py: this old name stays for one release (docs/upgrading.md)."""

import sys

from models import recommenders
from models.recommenders import CUSTOM_OBJECTS  # noqa: F401 (the name the previous version's docs gave)

sys.modules[__name__] = recommenders
