import sys

from core.cli import dispatch

sys.exit(dispatch())
