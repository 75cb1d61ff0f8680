"""rollgym_client — Python client for the rollgym rollout server (protocol 1).

    from rollgym_client import Client
    with Client("ws://127.0.0.1:8787", token=None) as client:
        batch = client.rollout(tag="CoordSokoban", groups=8, group_size=16)
        batch.scores, batch.group_ids, batch.kept, batch.metrics

Needs only ``websockets`` (>= 10.4, asyncio API), ``msgpack`` (>= 1.0) and ``numpy``.
"""

from .aio import PROTOCOL_VERSION, AsyncClient, EnvSession, RolloutStream, normalize_tags, ws_url
from .batch import Batch, Group, StepResult
from .errors import AuthError, ConnectionLost, ProtocolError, RollgymError
from .sync import Client, SyncEnvSession, SyncRolloutStream

__version__ = "0.1.0"

__all__ = [
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
    "normalize_tags",
    "ws_url",
]
