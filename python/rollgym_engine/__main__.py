"""``python -m rollgym_engine``: serve a TinyLM over vLLM's API subset (see server.py).

    python -m rollgym_engine --weights sft.pt --model tiny --port 8000
    python -m rollgym_engine --init-seed 0 --model tiny          # random weights of the default shape

Prints ``serving on http://HOST:PORT/v1`` once it listens; SIGTERM or Ctrl-C stops it."""

from __future__ import annotations

import argparse
import signal
import sys
import threading

import torch

from .model import ModelConfig, TinyLM
from .server import Engine, serve


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rollgym_engine", description=__doc__.split("\n")[0])
    parser.add_argument("--weights", help="a TinyLM.save checkpoint (default: random weights from --init-seed)")
    parser.add_argument("--init-seed", type=int, default=0, help="seed of the random weights when no --weights")
    parser.add_argument("--model", default="rollgym-tiny", help="served model name")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--max-batch", type=int, default=256, help="rows decoded together")
    parser.add_argument("--logprobs-mode", choices=("raw_logprobs", "processed_logprobs"), default="raw_logprobs",
                        help="vLLM's --logprobs-mode: the model's logprobs, or those of the distribution sampled from")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (0: torch's default; 1 avoids contention beside a trainer on a small machine)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.weights:
        model, version = TinyLM.load(args.weights)
    else:
        torch.manual_seed(args.init_seed)
        model, version = TinyLM(ModelConfig()), "init"
    engine = Engine(model, args.model, version, max_batch=args.max_batch, logprobs_mode=args.logprobs_mode)
    server, url = serve(engine, args.host, args.port)
    print(f"rollgym_engine: serving on {url}/v1 (model {args.model}, weights {version})", flush=True)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    try:
        done.wait()
    except KeyboardInterrupt:
        pass
    server.shutdown()
    engine.scheduler.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
