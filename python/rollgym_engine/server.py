"""The engine's HTTP API: the subset of vLLM's OpenAI server that rollgym's token mode uses
(``/v1/completions`` with token-id prompts, ``return_token_ids`` and logprobs, ``/tokenize``
with text or chat messages, ``/detokenize``, ``/v1/models`` with ``max_model_len``), vLLM's
``/pause``, ``/resume`` and ``/is_paused``, and weights loaded from a file
(``/update_weights_from_disk``, SGLang's name; ``/weight_info`` gives the loaded version).
Errors use vLLM's body, ``{"error": {"message", "type", "param", "code"}}``."""

from __future__ import annotations

import json
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, List, Optional, Tuple
from urllib.parse import parse_qs, urlparse

from .model import TinyLM, read_checkpoint
from .scheduler import Request, Sampling, Scheduler
from .vocab import VOCAB_SIZE, check_ids, chat_ids, decode, encode


class ApiError(Exception):
    def __init__(self, message: str, status: int = 400, param: Optional[str] = None):
        super().__init__(message)
        self.status = status
        self.param = param


def _number(body: Dict[str, Any], name: str, default: float, low: float, high: float) -> float:
    value = body.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise ApiError(f"{name} is {value!r}; allowed: a number in [{low}, {high}]", param=name)
    return float(value)


def _integer(body: Dict[str, Any], name: str, default: Optional[int], low: int, high: int) -> Optional[int]:
    value = body.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ApiError(f"{name} is {value!r}; allowed: an integer in [{low}, {high}]", param=name)
    return value


# Fields rollgym sends whose only supported value is vLLM's neutral one.
NEUTRAL = {"repetition_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0, "n": 1}


class Engine:
    def __init__(self, model: TinyLM, name: str, version: Optional[str], max_batch: int = 256,
                 logprobs_mode: str = "raw_logprobs"):
        self.name = name
        self.max_model_len = model.config.max_len
        self.scheduler = Scheduler(model, version, max_batch=max_batch, logprobs_mode=logprobs_mode)
        self.created = int(time.time())

    # -- routes ----------------------------------------------------------------------------------

    def models(self) -> Dict[str, Any]:
        card = {"id": self.name, "object": "model", "created": self.created, "owned_by": "rollgym_engine",
                "root": self.name, "parent": None, "max_model_len": self.max_model_len}
        return {"object": "list", "data": [card]}

    def check_model(self, body: Dict[str, Any]) -> None:
        model = body.get("model")
        if model is not None and model != self.name:
            raise ApiError(f"The model `{model}` does not exist.", 404, "model")

    def tokenize(self, body: Dict[str, Any]) -> Dict[str, Any]:
        self.check_model(body)
        if "messages" in body:
            messages = body["messages"]
            if not isinstance(messages, list):
                raise ApiError("messages must be a list of {role, content}", param="messages")
            try:
                tokens = chat_ids(messages, bool(body.get("add_generation_prompt", True)),
                                  bool(body.get("continue_final_message", False)))
            except ValueError as error:
                raise ApiError(str(error), param="messages") from error
        elif isinstance(body.get("prompt"), str):
            tokens = encode(body["prompt"])
        else:
            raise ApiError("give prompt (a string) or messages", param="prompt")
        return {"count": len(tokens), "max_model_len": self.max_model_len, "tokens": tokens, "token_strs": None}

    def detokenize(self, body: Dict[str, Any]) -> Dict[str, Any]:
        self.check_model(body)
        try:
            tokens = check_ids(body.get("tokens"), "tokens")
        except ValueError as error:
            raise ApiError(str(error), param="tokens") from error
        return {"prompt": decode(tokens)}

    def completions(self, body: Dict[str, Any]) -> Dict[str, Any]:
        self.check_model(body)
        prompt = self._prompt(body.get("prompt"))
        sampling = self._sampling(body, len(prompt))
        request = self.scheduler.submit(Request(prompt=prompt, sampling=sampling))
        if request.finish_reason == "error":
            raise ApiError(f"generation failed: {getattr(request, 'error', 'unknown')}", 500)
        as_ids = bool(body.get("return_tokens_as_token_ids", False))
        skip = bool(body.get("skip_special_tokens", True))
        text = decode(request.ids, skip_special_tokens=skip)
        choice: Dict[str, Any] = {"index": 0, "text": text, "logprobs": None,
                                  "finish_reason": request.finish_reason, "stop_reason": None}
        if body.get("logprobs") is not None:
            shown = [f"token_id:{i}" if as_ids else decode([i]) for i in request.ids]
            offsets, at = [], 0
            for i in request.ids:
                offsets.append(at)
                at += len(decode([i], skip_special_tokens=skip))
            top = [{(f"token_id:{t}" if as_ids else decode([t])): v for t, v in entry.items()}
                   for entry in request.top] if request.top else [{s: v} for s, v in zip(shown, request.logprobs)]
            choice["logprobs"] = {"text_offset": offsets, "token_logprobs": request.logprobs,
                                  "tokens": shown, "top_logprobs": top}
        if body.get("return_token_ids"):
            choice["token_ids"] = request.ids
            choice["prompt_token_ids"] = prompt
        usage = {"prompt_tokens": len(prompt), "completion_tokens": len(request.ids),
                 "total_tokens": len(prompt) + len(request.ids)}
        return {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time()),
                "model": self.name, "choices": [choice], "usage": usage,
                "weight_version": request.weight_version}

    def _prompt(self, prompt: Any) -> List[int]:
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (list, str)):
            prompt = prompt[0]
        if isinstance(prompt, str):
            ids = encode(prompt)
        else:
            try:
                ids = check_ids(prompt, "prompt")
            except ValueError as error:
                raise ApiError(f"{error} (one prompt: token ids or a string)", param="prompt") from error
        if not ids:
            raise ApiError("prompt is empty", param="prompt")
        return ids

    def _sampling(self, body: Dict[str, Any], prompt_len: int) -> Sampling:
        for name, neutral in NEUTRAL.items():
            value = body.get(name)
            if value is not None and value != neutral:
                raise ApiError(f"{name} is {value!r}; rollgym_engine supports only {neutral}", param=name)
        if body.get("stop"):
            raise ApiError(f"stop is {body['stop']!r}; rollgym_engine supports only stop_token_ids", param="stop")
        if body.get("stream"):
            raise ApiError("stream is true; rollgym_engine answers whole responses only", param="stream")
        room = self.max_model_len - prompt_len
        max_tokens = _integer(body, "max_tokens", 16, 1, 1 << 30)
        assert max_tokens is not None
        if max_tokens > room:
            raise ApiError(
                f"This model's maximum context length is {self.max_model_len} tokens. However, you requested "
                f"{prompt_len + max_tokens} tokens ({prompt_len} in the messages, {max_tokens} in the completion). "
                "Please reduce the length of the messages or completion.", param="max_tokens")
        top_k = _integer(body, "top_k", -1, -1, VOCAB_SIZE)
        stop_ids = body.get("stop_token_ids") or []
        try:
            check_ids(stop_ids, "stop_token_ids")
        except ValueError as error:
            raise ApiError(str(error), param="stop_token_ids") from error
        return Sampling(
            temperature=_number(body, "temperature", 1.0, 0.0, 100.0),
            top_p=_number(body, "top_p", 1.0, 1e-9, 1.0),
            top_k=top_k if top_k and top_k > 0 else -1,
            min_p=_number(body, "min_p", 0.0, 0.0, 1.0),
            max_tokens=max_tokens,
            seed=_integer(body, "seed", None, -(1 << 63), (1 << 64) - 1),
            stop_token_ids=tuple(stop_ids),
            ignore_eos=bool(body.get("ignore_eos", False)),
            top_logprobs=_integer(body, "logprobs", 0, 0, 20) or 0,
        )

    def pause(self, query: Dict[str, List[str]]) -> Dict[str, Any]:
        mode = query.get("mode", ["abort"])[0]
        try:
            self.scheduler.pause(mode)
        except ValueError as error:
            raise ApiError(str(error), param="mode") from error
        return {"status": "paused", "mode": mode}

    def update_weights(self, body: Dict[str, Any]) -> Dict[str, Any]:
        path = body.get("model_path")
        if not isinstance(path, str) or not path:
            raise ApiError(f"model_path is {path!r}; allowed: the path of a TinyLM.save file", param="model_path")
        version = body.get("weight_version")
        if version is not None and not isinstance(version, str):
            raise ApiError(f"weight_version is {version!r}; allowed: a string label", param="weight_version")
        try:
            saved = read_checkpoint(path)
            if saved["config"] != self._config():
                raise ValueError(f"{path} has model config {saved['config']}, the engine serves {self._config()}")
            label = version if version is not None else saved.get("version")
            self.scheduler.load(saved["state_dict"], label)
        except (OSError, ValueError, RuntimeError) as error:
            raise ApiError(f"cannot load {path}: {error}", param="model_path") from error
        return {"success": True, "message": "weights loaded", "weight_version": self.scheduler.version}

    def _config(self) -> Dict[str, Any]:
        from dataclasses import asdict
        return asdict(self.scheduler.model.config)


class EngineHTTPServer(ThreadingHTTPServer):
    # rollgym opens one keep-alive connection per request in flight and lets idle ones close
    # between training steps, so each step begins with a burst of connects, often while decoding
    # holds the GIL. socketserver's default backlog of 5 dropped the rest of the burst; their
    # clients retransmit with exponential backoff and the engine sat idle with requests unread
    # (the RL run that stalled at step 63). The kernel caps this at net.core.somaxconn.
    request_queue_size = 4096
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hung up is no engine error: rollgym aborts the requests it no longer
        # needs (a cancelled rollout, a pause), and each left a BrokenPipeError or
        # ConnectionResetError traceback on stderr when its answer was written.
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


def listen(engine: Engine, host: str = "127.0.0.1", port: int = 0) -> EngineHTTPServer:
    """The engine's HTTP server, listening but not yet answering (``serve`` starts it)."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:  # quiet: one line per request is noise here
            pass

        def _send(self, status: int, payload: Any) -> None:
            data = json.dumps(payload).encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _error(self, error: ApiError) -> None:
            kind = "BadRequestError" if error.status == 400 else "NotFoundError" if error.status == 404 else "InternalServerError"
            self._send(error.status, {"error": {"message": str(error), "type": kind, "param": error.param, "code": error.status}})

        def _body(self) -> Dict[str, Any]:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b"{}"
            try:
                body = json.loads(raw or b"{}")
            except json.JSONDecodeError as error:
                raise ApiError(f"the body is not JSON: {error}") from error
            if not isinstance(body, dict):
                raise ApiError("the body must be a JSON object")
            return body

        def _route(self, method: str) -> None:
            url = urlparse(self.path)
            path = url.path.rstrip("/") or "/"
            try:
                body = self._body() if method == "POST" else {}
                if method == "GET" and path == "/v1/models":
                    result = engine.models()
                elif method == "GET" and path in ("/health", "/ping"):
                    result = {}
                elif method == "GET" and path == "/version":
                    result = {"version": "rollgym_engine 0.1"}
                elif method == "GET" and path == "/is_paused":
                    result = {"is_paused": engine.scheduler.paused}
                elif method == "GET" and path == "/weight_info":
                    result = {"weight_version": engine.scheduler.version}
                elif method == "POST" and path == "/v1/completions":
                    result = engine.completions(body)
                elif method == "POST" and path == "/tokenize":
                    result = engine.tokenize(body)
                elif method == "POST" and path == "/detokenize":
                    result = engine.detokenize(body)
                elif method == "POST" and path == "/pause":
                    result = engine.pause(parse_qs(url.query))
                elif method == "POST" and path == "/resume":
                    engine.scheduler.resume()
                    result = {"status": "resumed"}
                elif method == "POST" and path == "/update_weights_from_disk":
                    result = engine.update_weights(body)
                else:
                    raise ApiError(f"{method} {path} is not a route of rollgym_engine", 404)
            except ApiError as error:
                self._error(error)
                return
            self._send(200, result)

        def do_GET(self) -> None:  # noqa: N802
            self._route("GET")

        def do_POST(self) -> None:  # noqa: N802
            self._route("POST")

    return EngineHTTPServer((host, port), Handler)


def serve(engine: Engine, host: str = "127.0.0.1", port: int = 0) -> Tuple[EngineHTTPServer, str]:
    server = listen(engine, host, port)
    threading.Thread(target=server.serve_forever, name="rollgym-engine-http", daemon=True).start()
    return server, f"http://{host}:{server.server_address[1]}"
