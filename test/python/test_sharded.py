"""Unit tests of ShardedClient's arguments (no server: they are refused before connecting).

Run: PYTHONPATH=python /usr/bin/python3 -m unittest discover -s test/python -p 'test_*.py'
"""

from __future__ import annotations

import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"))

from rollgym_client.sharded import ShardedClient, _split_pace  # noqa: E402


class GiveUpAfterTest(unittest.TestCase):
    def test_refuses_what_is_not_a_positive_number_of_seconds(self) -> None:
        for bad in (0, -1.5, True, "10", None):
            with self.subTest(give_up_after=bad):
                with self.assertRaisesRegex(ValueError, r"give_up_after must be a number of seconds > 0, got "):
                    ShardedClient(["http://127.0.0.1:9"], give_up_after=bad)


class SplitPaceTest(unittest.TestCase):
    def test_shares_sum_to_the_stream_s_and_follow_the_group_split(self) -> None:
        self.assertEqual(_split_pace(5, 2, None, None), [{"groups_per_step": 2}, {"groups_per_step": 3}])
        self.assertEqual(_split_pace(5, 2, 3, 7), [{"groups_per_step": 1, "in_flight": 3}, {"groups_per_step": 2, "in_flight": 4}])
        for b in range(3, 12):
            self.assertEqual(sum(p["groups_per_step"] for p in _split_pace(8, 3, b, None)), b)

    def test_refuses_a_share_left_with_nothing(self) -> None:
        with self.assertRaisesRegex(ValueError, r"groups_per_step must be an integer >= 3 \(the stream's shares: each needs one\), got 2"):
            _split_pace(6, 3, 2, None)
        with self.assertRaisesRegex(ValueError, r"in_flight must be an integer >= 2 .*, got True"):
            _split_pace(6, 2, None, True)


class StreamOptionsTest(unittest.TestCase):
    def test_refuses_strict_staleness(self) -> None:
        client = ShardedClient.__new__(ShardedClient)  # no connection: refused before any
        with self.assertRaisesRegex(TypeError, "ShardedClient.stream does not take strict_staleness"):
            ShardedClient.stream(client, tag="FrozenLake", groups=2, max_staleness=1, strict_staleness=True)


if __name__ == "__main__":
    unittest.main()
