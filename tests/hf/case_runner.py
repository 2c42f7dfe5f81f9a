"""What the tests of tests/hf share: the token shard they train on, and running the unittest cases a
command line selects (a group of classes, -k's substring of a test's id)."""
import sys
import unittest

import numpy as np


def write_shard(path, tokens):
    """A token shard (share/docs/usage.md, Token shards): 256 int32 header, uint16 tokens."""
    header = np.zeros(256, dtype=np.int32)
    header[:3] = (20240520, 1, len(tokens))
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(np.asarray(tokens, dtype=np.uint16).tobytes())


def run_cases(cases, pattern=None):
    """Runs every test of the TestCase classes `cases` whose id contains `pattern` (all: None); exits 0
    when all pass, else 1."""
    suite = unittest.TestSuite()
    for case in cases:
        for test in unittest.TestLoader().loadTestsFromTestCase(case):
            if pattern is None or pattern in test.id():
                suite.addTest(test)
    result = unittest.TextTestRunner(verbosity=2).run(suite)
    sys.exit(0 if result.wasSuccessful() else 1)
