"""``python -m core_agent``: the ``core-agent`` command, for when the script is not on PATH."""

import sys

from core_agent.cli import main

if __name__ == "__main__":
    sys.exit(main())
