"""``python -m mai_graph.cli``: the ``mai-graph`` command."""

import sys

from mai_graph.cli import main

if __name__ == "__main__":
    sys.exit(main())
