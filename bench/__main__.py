import sys

from bench.registry import dispatch

sys.exit(dispatch())
