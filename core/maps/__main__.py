import sys

from core.cli import dispatch

sys.exit(dispatch(["maps", *sys.argv[1:]]))
