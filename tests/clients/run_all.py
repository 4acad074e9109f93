"""Runs every SDK test module against one live server, then checks the server stops cleanly
on SIGTERM (exit code 0). Usage: run_all.py /path/to/deepinfer"""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import live_server  # noqa: E402


def main():
    os.environ["DEEPINFER_BIN"] = sys.argv[1]
    suite = unittest.defaultTestLoader.discover(os.path.dirname(os.path.abspath(__file__)),
                                                pattern="test_*.py")
    result = unittest.TextTestRunner(verbosity=2).run(suite)
    code = live_server.stop_shared_server()
    if code != 0:
        print(f"server exited with {code} after SIGTERM (expected 0)")
        return 1
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
