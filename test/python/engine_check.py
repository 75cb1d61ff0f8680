"""rollgym_engine's HTTP API against what rollgym's token mode and a trainer rely on (run by
closed-loop.test.ts under the torch venv). Exits non-zero with a message when a check fails;
prints one JSON summary line."""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time
import urllib.error
import urllib.request

import engine_checking  # first: puts python/ on the path
import torch
from engine_checking import check

from rollgym_engine.model import ModelConfig, TinyLM  # noqa: E402
from rollgym_engine.server import Engine, serve  # noqa: E402
from rollgym_engine.vocab import IM_END_ID, chat_ids, encode  # noqa: E402

torch.set_num_threads(1)
def call(method: str, path: str, body=None):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(URL + path, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


torch.manual_seed(1)
model = TinyLM(ModelConfig())
reference = TinyLM(ModelConfig())
reference.load_state_dict(model.state_dict())
engine = Engine(model, "tiny", "v0")
server, URL = serve(engine)

# Discovery: vLLM's model card with the context length; no llama.cpp /props.
status, models = call("GET", "/v1/models")
check(status == 200 and models["data"][0]["id"] == "tiny" and models["data"][0]["max_model_len"] == 1280, f"/v1/models: {models}")
status, body = call("GET", "/props")
check(status == 404 and body["error"]["code"] == 404, "/props must be a 404 with vLLM's error body (dialect: vllm)")

# Templates and byte-level round trips.
messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "Grüße <|im_end|>?"}]
status, tok = call("POST", "/tokenize", {"model": "tiny", "messages": messages, "add_generation_prompt": True})
check(tok["tokens"] == chat_ids(messages) and tok["count"] == len(tok["tokens"]), "/tokenize messages follows the ChatML template")
check(tok["tokens"][-len(encode("<|im_start|>assistant\n")):] == encode("<|im_start|>assistant\n"), "generation prompt last")
status, tok = call("POST", "/tokenize", {"model": "tiny", "prompt": "a<|im_end|>é", "add_special_tokens": False})
check(tok["tokens"] == [97, IM_END_ID, 0xC3, 0xA9], f"special-token text becomes its id: {tok['tokens']}")
status, text = call("POST", "/detokenize", {"model": "tiny", "tokens": tok["tokens"]})
check(text["prompt"] == "a<|im_end|>é", "detokenize keeps special tokens and joins UTF-8 bytes")
status, body = call("POST", "/detokenize", {"tokens": [1, 999]})
check(status == 400 and "tokens[1]" in body["error"]["message"] and "999" in body["error"]["message"], "bad id named")

# Completions: ids and a logprob for every sampled token, equal to the trainer's recomputation.
prompt = chat_ids(messages) + encode("<think>")
request = {"model": "tiny", "prompt": prompt, "max_tokens": 24, "temperature": 1.0, "top_p": 1.0, "top_k": -1,
           "min_p": 0.0, "repetition_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0,
           "seed": 7, "stop": None, "n": 1, "logprobs": 0, "return_token_ids": True}
status, answer = call("POST", "/v1/completions", request)
choice = answer["choices"][0]
ids, logprobs = choice["token_ids"], choice["logprobs"]["token_logprobs"]
check(status == 200 and len(ids) == len(logprobs) > 0, f"one logprob per sampled token: {choice}")
check(choice["prompt_token_ids"] == prompt and choice["finish_reason"] in ("stop", "length"), "prompt echoed, finish reason")
full = torch.tensor([prompt + ids])
recomputed = reference.token_logprobs(full, torch.arange(full.shape[1])[None])[0, len(prompt):]
diff = float((recomputed.detach() - torch.tensor(logprobs)).abs().max())
check(diff < 1e-4, f"engine logprobs equal the model's on the whole sequence (max diff {diff})")
status, again = call("POST", "/v1/completions", request)
check(again["choices"][0]["token_ids"] == ids, "same seed, same tokens")

# Refusals name the field.
status, body = call("POST", "/v1/completions", {**request, "max_tokens": 1280})
check(status == 400 and "maximum context length is 1280" in body["error"]["message"] and body["error"]["param"] == "max_tokens",
      f"context overflow: {body}")
status, body = call("POST", "/v1/completions", {**request, "repetition_penalty": 1.2})
check(status == 400 and body["error"]["param"] == "repetition_penalty" and "1.2" in body["error"]["message"], f"{body}")
status, body = call("POST", "/v1/completions", {**request, "model": "other"})
check(status == 404 and "other" in body["error"]["message"], "unknown model")

# Pause: keep holds requests (new and running) until resume; abort ends running ones.
long_request = {**request, "max_tokens": 400, "ignore_eos": True}
results = {}


def run(name: str, body: dict) -> None:
    results[name] = call("POST", "/v1/completions", body)[1]


status, _ = call("POST", "/pause?mode=keep")
check(call("GET", "/is_paused")[1] == {"is_paused": True}, "paused")
waiter = threading.Thread(target=run, args=("queued", request))
waiter.start()
# Once the request is queued, pausing alone decides whether it runs.
while not engine.scheduler.queue:
    time.sleep(0.01)
time.sleep(0.2)
check("queued" not in results, "a request sent while paused waits")
call("POST", "/resume")
waiter.join(60)
check(results["queued"]["choices"][0]["token_ids"] == ids, "and runs after resume, unchanged")

runner = threading.Thread(target=run, args=("aborted", long_request))
runner.start()
while not engine.scheduler.running:  # abort must meet it running, not queued
    time.sleep(0.01)
call("POST", "/pause?mode=abort")
runner.join(60)
aborted = results["aborted"]["choices"][0]
check(aborted["finish_reason"] == "abort" and len(aborted["token_ids"]) < 400, f"abort ends running requests: {aborted['finish_reason']}")
call("POST", "/resume")
status, body = call("POST", "/pause?mode=later")
check(status == 400 and "later" in body["error"]["message"], "pause mode named")

# Weights from disk, with a version label the engine then reports and stamps on answers.
with tempfile.TemporaryDirectory() as tmp:
    torch.manual_seed(2)
    other = TinyLM(ModelConfig())
    other.save(os.path.join(tmp, "w.pt"), "v1")
    status, loaded = call("POST", "/update_weights_from_disk", {"model_path": os.path.join(tmp, "w.pt"), "weight_version": "step-1"})
    check(status == 200 and loaded["weight_version"] == "step-1", f"loaded: {loaded}")
    check(call("GET", "/weight_info")[1]["weight_version"] == "step-1", "weight_info reports the new version")
    status, answer = call("POST", "/v1/completions", request)
    check(answer["weight_version"] == "step-1", "answers carry the version that produced them")
    new_ids = answer["choices"][0]["token_ids"]
    full = torch.tensor([prompt + new_ids])
    recomputed = other.token_logprobs(full, torch.arange(full.shape[1])[None])[0, len(prompt):]
    diff = float((recomputed.detach() - torch.tensor(answer["choices"][0]["logprobs"]["token_logprobs"])).abs().max())
    check(diff < 1e-4, f"sampled with the new weights (max diff {diff})")
    TinyLM(ModelConfig(d_model=16, n_heads=2)).save(os.path.join(tmp, "small.pt"))
    status, body = call("POST", "/update_weights_from_disk", {"model_path": os.path.join(tmp, "small.pt")})
    check(status == 400 and "model config" in body["error"]["message"], "a checkpoint of another shape is refused")
    check(call("GET", "/weight_info")[1]["weight_version"] == "step-1", "and the served weights stay")

server.shutdown()
print(json.dumps({"ok": True, "checks": engine_checking.made}))
