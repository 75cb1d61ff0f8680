"""rollgym_client — Python client for the rollgym rollout server (protocol 1).

    from rollgym_client import Client, pack_batch
    with Client("ws://127.0.0.1:8787", token=None) as client:
        batch = client.rollout(tag="CoordSokoban", groups=8, group_size=16)
        batch.scores, batch.group_ids, batch.kept, batch.metrics

        batch = client.rollout(tag="CoordSokoban", groups=8, group_size=16, tokens=True)
        arrays = pack_batch(batch)      # input_ids, loss_mask, old_logprobs, advantages … [B, T]

Needs only ``websockets`` (>= 10.4, asyncio API), ``msgpack`` (>= 1.0) and ``numpy``.
"""

from .aio import MAX_VERSION_ORDINAL, PROTOCOL_VERSION, AsyncClient, EnvSession, RolloutStream, normalize_tags, ws_url
from .batch import Batch, Group, StepResult
from .errors import AuthError, ConnectionLost, ProtocolError, RollgymError
from .pack import grpo_advantages, pack_batch
from .sync import Client, SyncEnvSession, SyncRolloutStream
from .tokens import TokenLog

__version__ = "0.1.0"

__all__ = [
    "MAX_VERSION_ORDINAL",
    "PROTOCOL_VERSION",
    "AsyncClient",
    "AuthError",
    "Batch",
    "Client",
    "ConnectionLost",
    "EnvSession",
    "Group",
    "ProtocolError",
    "RollgymError",
    "RolloutStream",
    "StepResult",
    "SyncEnvSession",
    "SyncRolloutStream",
    "TokenLog",
    "grpo_advantages",
    "normalize_tags",
    "pack_batch",
    "ws_url",
]
