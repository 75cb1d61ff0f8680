"""rollgym_engine under rollgym's connection pattern (run by closed-loop.test.ts under the torch
venv). rollgym opens one keep-alive connection per request in flight and lets idle ones close
between training steps, so every step starts with a burst of new connections, often while the
engine is busy decoding. Two checks, neither on wall time:

1. A burst of connections that arrives while nothing accepts (the listener exists, the accept
   loop has not run yet) is queued by the kernel, not dropped: no client segment is ever
   retransmitted (TCP_INFO), and every request is answered. With socketserver's default
   listen backlog of 5 the connections past the sixth are dropped and the clients retransmit
   with exponential backoff: the stall that left 10 of rollgym's 16 requests unread.
2. Keep-alive clients sending completions back to back while a trainer cycles pause(keep) →
   load weights → resume: every request is answered, none aborted, each names a loaded version.

Exits non-zero with a message when a check fails; prints one JSON summary line."""

from __future__ import annotations

import http.client
import json
import os
import select
import socket
import struct
import tempfile
import threading

import engine_checking  # first: puts python/ on the path
import torch
from engine_checking import check

from rollgym_engine.model import ModelConfig, TinyLM  # noqa: E402
from rollgym_engine.server import Engine, listen  # noqa: E402
from rollgym_engine.vocab import chat_ids, encode  # noqa: E402

torch.set_num_threads(1)
BURST = 64
def total_retrans(sock: socket.socket) -> int:
    # struct tcp_info: 8 one-byte fields, then u32s; tcpi_total_retrans is the 24th u32.
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
    return struct.unpack_from("8B24I", info)[8 + 23]


def read_response(sock: socket.socket) -> tuple[int, dict]:
    sock.setblocking(True)
    sock.settimeout(120)  # a hang fails the check instead of the suite's timeout; not a timing
    answer = http.client.HTTPResponse(sock)
    answer.begin()
    return answer.status, json.loads(answer.read())


torch.manual_seed(3)
model = TinyLM(ModelConfig(d_model=32, n_heads=2))
engine = Engine(model, "tiny", "v0")
server = listen(engine)
host, port = server.server_address[:2]
prompt = chat_ids([{"role": "user", "content": "pick one"}]) + encode("<think>")
completion = {"model": "tiny", "prompt": prompt, "max_tokens": 8, "temperature": 1.0, "logprobs": 0,
              "return_token_ids": True}
body = json.dumps(completion).encode()
request = (f"POST /v1/completions HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
           f"Content-Length: {len(body)}\r\n\r\n").encode() + body

# 1. The burst: every client connects and sends before the accept loop runs.
clients = []
for _ in range(BURST):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setblocking(False)
    s.connect_ex((host, port))
    clients.append(s)
threading.Thread(target=server.serve_forever, name="rollgym-engine-http", daemon=True).start()
for s in clients:
    _, writable, _ = select.select([], [s], [], 120)
    check(bool(writable) and s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0, "a burst connection was refused")
    s.setblocking(True)
    s.sendall(request)
answers = [read_response(s) for s in clients]
check(all(status == 200 and a["choices"][0]["finish_reason"] in ("stop", "length") for status, a in answers),
      f"every request of the burst answered: {[status for status, _ in answers]}")
retransmitted = [total_retrans(s) for s in clients]
check(sum(retransmitted) == 0,
      f"{sum(1 for r in retransmitted if r)} of {BURST} burst connections had segments retransmitted: "
      "the engine's listen backlog dropped them")
for s in clients:
    s.close()

# 2. Keep-alive clients against pause(keep) → load → resume cycles.
ROUNDS, CLIENTS, CYCLES = 6, 16, 8
versions = {"v0": {k: v.clone() for k, v in model.state_dict().items()}}
results: list[dict] = []
errors: list[str] = []
lock = threading.Lock()


def client(index: int) -> None:
    connection = http.client.HTTPConnection(host, port, timeout=120)
    try:
        for round_ in range(ROUNDS):
            connection.request("POST", "/v1/completions", json.dumps({**completion, "seed": index * 100 + round_}),
                               {"Content-Type": "application/json"})
            answer = connection.getresponse()
            payload = json.loads(answer.read())
            with lock:
                results.append(payload) if answer.status == 200 else errors.append(str(payload))
    except Exception as error:  # noqa: BLE001 — reported as a failed check below
        with lock:
            errors.append(f"client {index}: {error!r}")
    finally:
        connection.close()


def control(path: str, payload=None) -> dict:
    connection = http.client.HTTPConnection(host, port, timeout=120)
    connection.request("POST", path, json.dumps(payload or {}), {"Content-Type": "application/json"})
    answer = connection.getresponse()
    result = json.loads(answer.read())
    connection.close()
    if answer.status != 200:
        raise AssertionError(f"{path}: {result}")
    return result


threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
for t in threads:
    t.start()
with tempfile.TemporaryDirectory() as tmp:
    for cycle in range(1, CYCLES + 1):
        torch.manual_seed(100 + cycle)
        fresh = TinyLM(ModelConfig(d_model=32, n_heads=2))
        label = f"v{cycle}"
        versions[label] = fresh.state_dict()
        path = os.path.join(tmp, f"{label}.pt")
        fresh.save(path, label)
        control("/pause?mode=keep")
        control("/update_weights_from_disk", {"model_path": path, "weight_version": label})
        control("/resume")
for t in threads:
    t.join(300)
check(not any(t.is_alive() for t in threads), "a keep-alive client never got its answer across pause/load/resume")
check(not errors, f"failed requests: {errors[:3]}")
check(len(results) == ROUNDS * CLIENTS, f"{len(results)} answers, {ROUNDS * CLIENTS} asked")
check(all(r["choices"][0]["finish_reason"] in ("stop", "length") for r in results), "no request aborted by keep")
check({r["weight_version"] for r in results} <= set(versions), "every answer names a version that was loaded")

server.shutdown()
engine.scheduler.close()
print(json.dumps({"ok": True, "checks": engine_checking.made, "burst": BURST, "answers": len(results)}))
