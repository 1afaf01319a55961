"""``python -m pipeline``: the command line (see ``pipeline/cli.py``)."""
from pipeline import cli
cli.run()
