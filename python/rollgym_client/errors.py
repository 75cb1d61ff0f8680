"""Exceptions raised by the rollgym client.

Every error the server reports arrives as ``error {code, message, rollout?, field?}``; the
client raises it as :class:`RollgymError` with the same ``code`` (``unknown_tag``,
``limit``, ``bad_frame``, ...). Connection-level failures get their own subclasses so a
trainer can tell "my request was wrong" from "the server went away".
"""

from __future__ import annotations

from typing import Optional


class RollgymError(Exception):
    """An error reported by the server, or detected by the client.

    Attributes:
        code: the server's error code (``unknown_tag``, ``limit``, ``bad_frame`` ...) or a
            client-side code (``connection_lost``, ``auth``, ``protocol``, ``timeout``).
        message: the human-readable explanation.
        rollout: the rollout id the error refers to, when there is one.
        field: the request field the server named, when there is one.
    """

    def __init__(self, code: str, message: str, rollout: Optional[str] = None, field: Optional[str] = None):
        self.code = code
        self.message = message
        self.rollout = rollout
        self.field = field
        super().__init__(str(self))

    def __str__(self) -> str:
        where = []
        if self.rollout is not None:
            where.append(f"rollout {self.rollout!r}")
        if self.field is not None:
            where.append(f"field {self.field!r}")
        suffix = f" ({', '.join(where)})" if where else ""
        return f"[{self.code}] {self.message}{suffix}"

    def __reduce__(self):  # picklable (Ray moves exceptions between processes)
        return (type(self), (self.code, self.message, self.rollout, self.field))


class AuthError(RollgymError):
    """The server refused the WebSocket upgrade with HTTP 401 (missing or wrong token)."""

    def __init__(self, message: str, code: str = "auth", rollout: Optional[str] = None, field: Optional[str] = None):
        super().__init__(code, message, rollout, field)

    def __reduce__(self):
        return (type(self), (self.message, self.code, self.rollout, self.field))


class ProtocolError(RollgymError):
    """The peer does not speak this client's protocol (version mismatch, bad frames,
    no WebSocket route at the URL)."""

    def __init__(self, message: str, code: str = "protocol", rollout: Optional[str] = None, field: Optional[str] = None):
        super().__init__(code, message, rollout, field)

    def __reduce__(self):
        return (type(self), (self.message, self.code, self.rollout, self.field))


class ConnectionLost(RollgymError):
    """The connection is gone for good: the server could not be reached, resume was refused
    (unknown or expired session), the grace period ran out, resume is disabled, or the
    server shut down. Work that was in flight on the connection cannot be completed."""

    def __init__(self, message: str, code: str = "connection_lost", rollout: Optional[str] = None, field: Optional[str] = None):
        super().__init__(code, message, rollout, field)

    def __reduce__(self):
        return (type(self), (self.message, self.code, self.rollout, self.field))
