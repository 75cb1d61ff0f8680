"""Unit tests of ShardedClient's arguments (no server: they are refused before connecting).

Run: PYTHONPATH=python /usr/bin/python3 -m unittest discover -s test/python -p 'test_*.py'
"""

from __future__ import annotations

import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"))

from rollgym_client.sharded import ShardedClient  # noqa: E402


class GiveUpAfterTest(unittest.TestCase):
    def test_refuses_what_is_not_a_positive_number_of_seconds(self) -> None:
        for bad in (0, -1.5, True, "10", None):
            with self.subTest(give_up_after=bad):
                with self.assertRaisesRegex(ValueError, r"give_up_after must be a number of seconds > 0, got "):
                    ShardedClient(["http://127.0.0.1:9"], give_up_after=bad)


if __name__ == "__main__":
    unittest.main()
