#!/usr/bin/env python3
"""Client-side decode speed of group frames, for bench/tokens.ts.

Reads FILE: frames as [u32 little-endian length][msgpack bytes] one after the other (what the
server sends per group), then times what the Python client does on arrival: msgpack decode
(rollgym_client.codec.decode) and Group.from_frame (numpy views of the typed arrays, and in
token mode the token logs' checks). Repeats the whole file until at least MIN_SECONDS have
passed and prints one line of JSON: bytes, frames, seconds, MB/s (10^6 bytes), MB per CPU-second
of this process (what a free core would do: steadier than MB/s on a busy machine), and msgpack
alone.

Usage: /usr/bin/python3 bench/tokens_decode.py FILE [MIN_SECONDS]
"""
import json
import os
import struct
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from rollgym_client.batch import Group  # noqa: E402
from rollgym_client.codec import decode  # noqa: E402


def frames(path):
    with open(path, "rb") as f:
        data = f.read()
    out = []
    at = 0
    while at < len(data):
        (n,) = struct.unpack_from("<I", data, at)
        out.append(data[at + 4 : at + 4 + n])
        at += 4 + n
    return out


def main():
    path = sys.argv[1]
    min_seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 2.0
    items = frames(path)
    total = sum(len(b) for b in items)
    episodes = 0
    tokens = 0
    for b in items:  # warm-up and a sanity check of what was decoded
        g = Group.from_frame(decode(b))
        episodes += len(g.episodes)
        if g.tokens is not None:
            tokens += sum(len(t.ids) for t in g.tokens)

    reps = 0
    start, cpu = time.perf_counter(), time.process_time()
    while True:
        for b in items:
            Group.from_frame(decode(b))
        reps += 1
        seconds = time.perf_counter() - start
        if seconds >= min_seconds and reps >= 3:
            break
    cpu_seconds = time.process_time() - cpu

    # msgpack alone, for the split.
    mp_reps = 0
    mp_start = time.perf_counter()
    while True:
        for b in items:
            decode(b)
        mp_reps += 1
        mp_seconds = time.perf_counter() - mp_start
        if mp_seconds >= min_seconds / 2 and mp_reps >= 3:
            break

    print(
        json.dumps(
            {
                "frames": len(items),
                "episodes": episodes,
                "token_ids": tokens,
                "bytes": total,
                "repetitions": reps,
                "seconds": seconds,
                "mb_per_s": total * reps / seconds / 1e6,
                "cpu_seconds": cpu_seconds,
                "mb_per_cpu_s": total * reps / cpu_seconds / 1e6,
                "frames_per_s": len(items) * reps / seconds,
                "episodes_per_s": episodes * reps / seconds,
                "msgpack_only_mb_per_s": total * mp_reps / mp_seconds / 1e6,
            }
        )
    )


if __name__ == "__main__":
    main()
