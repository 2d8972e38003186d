"""The web console: static files (HTML, CSS, JavaScript, no build step) that ``agentflow
serve`` serves at ``/`` and that use the same API as everyone else (``agentflow.api``).

``static/vendor/js-yaml.min.js`` is js-yaml 4.1.0 (MIT, its licence beside it): the YAML editor
reads and writes configs with it.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

STATIC = Path(str(files(__name__) / "static"))
"""Where the console's files are."""
