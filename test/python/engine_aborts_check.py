"""rollgym_engine when clients hang up (run by closed-loop.test.ts under the torch venv). rollgym
aborts the requests it no longer needs (a cancelled rollout, a pause): each aborted request once
left a BrokenPipeError or ConnectionResetError traceback on the engine's stderr (about 40 per
aborted rollout, issue 28.8). Clients here hang up four ways, eight times each: with a FIN or a
reset while their completion is decoded, with a reset while the engine waits for a keep-alive
connection's next request, and with a reset in the middle of a request body. Once every handler
thread has ended, stderr must hold no traceback and the engine must still answer.

Exits non-zero with a message when a check fails; prints one JSON summary line."""

from __future__ import annotations

import contextlib
import http.client
import io
import json
import socket
import struct
import threading
import time

import engine_checking  # first: puts python/ on the path
import torch
from engine_checking import check

from rollgym_engine.model import ModelConfig, TinyLM  # noqa: E402
from rollgym_engine.server import Engine, listen  # noqa: E402
from rollgym_engine.vocab import chat_ids, encode  # noqa: E402

torch.set_num_threads(1)
EACH = 8

torch.manual_seed(3)
engine = Engine(TinyLM(ModelConfig(d_model=32, n_heads=2)), "tiny", "v0")
server = listen(engine)
host, port = server.server_address[:2]
prompt = chat_ids([{"role": "user", "content": "pick one"}]) + encode("<think>")
body = json.dumps({"model": "tiny", "prompt": prompt, "max_tokens": 48, "ignore_eos": True}).encode()


def head(length: int) -> bytes:
    return (f"POST /v1/completions HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {length}\r\n\r\n").encode()


def reset(sock: socket.socket) -> None:
    """Closes with a TCP reset instead of a FIN, as a killed client or a proxy's abort does."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def handler_threads() -> int:
    return sum(1 for t in threading.enumerate() if t.name.endswith("(process_request_thread)"))


def answer_one(sock: socket.socket) -> int:
    sock.sendall(head(len(body)) + body)
    response = http.client.HTTPResponse(sock)
    response.begin()
    response.read()
    return response.status


captured = io.StringIO()
with contextlib.redirect_stderr(captured):
    threading.Thread(target=server.serve_forever, daemon=True).start()
    clients = []
    for i in range(EACH):
        finned = socket.create_connection((host, port))
        finned.sendall(head(len(body)) + body)
        reset_while_decoding = socket.create_connection((host, port))
        reset_while_decoding.sendall(head(len(body)) + body)
        kept_alive = socket.create_connection((host, port))
        check(answer_one(kept_alive) == 200, "a keep-alive client's first request was not answered")
        cut_short = socket.create_connection((host, port))
        cut_short.sendall(head(len(body)) + body[:10])
        clients.append((finned, reset_while_decoding, kept_alive, cut_short))
    for finned, reset_while_decoding, kept_alive, cut_short in clients:
        finned.close()
        reset(reset_while_decoding)
        reset(kept_alive)
        reset(cut_short)
    # Every aborted request's thread writes its answer (or reads) into the closed socket and
    # ends; waits for that (a hang is a failure, not a timing: nothing is asserted on time).
    waited = 0
    while handler_threads() > 0 and waited < 6000:
        time.sleep(0.02)
        waited += 1
    check(handler_threads() == 0, f"{handler_threads()} handler threads still running")
    with socket.create_connection((host, port)) as after:
        check(answer_one(after) == 200, "the engine stopped answering after clients hung up")
    server.shutdown()

stderr = captured.getvalue()
check("Traceback" not in stderr and "Exception occurred" not in stderr,
      f"{stderr.count('Traceback')} tracebacks on stderr after {4 * EACH} clients hung up:\n{stderr[:3000]}")
print(json.dumps({"ok": True, "checks": engine_checking.made, "aborted": 4 * EACH, "stderr_chars": len(stderr)}))
