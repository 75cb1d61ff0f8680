"""Frames on the wire: one msgpack map per binary WebSocket frame, numeric arrays as
little-endian typed arrays in msgpack ``bin`` fields named ``*_i32``, ``*_f32``, ``*_u8``."""

from __future__ import annotations

from typing import Any, Dict

import msgpack
import numpy as np

from .errors import ProtocolError

#: dtype of each array-field suffix (little-endian, as PROTOCOL.md fixes them).
ARRAY_SUFFIXES = {"_i32": np.dtype("<i4"), "_f32": np.dtype("<f4"), "_u8": np.dtype("<u1")}


def encode(frame: Dict[str, Any]) -> bytes:
    """One client frame as msgpack bytes (str as msgpack str, bytes as bin, floats as float64)."""
    return msgpack.packb(frame, use_bin_type=True)


def decode(data: bytes) -> Dict[str, Any]:
    """One server frame: a msgpack map with a string ``type``."""
    try:
        value = msgpack.unpackb(data, raw=False, strict_map_key=False)
    except Exception as error:  # msgpack raises several unrelated types
        raise ProtocolError(f"undecodable frame from the server: {error}") from None
    if not isinstance(value, dict) or not isinstance(value.get("type"), str):
        raise ProtocolError(f"server frame is not a msgpack map with a string type: {type(value).__name__}")
    return value


# Per suffix: the wire dtype and the dtype users see. On a little-endian machine they are the
# same, so ``frombuffer`` gives the final array directly (no conversion).
_DTYPES = {suffix: (wire, wire.newbyteorder("=")) for suffix, wire in ARRAY_SUFFIXES.items()}


def _dtypes(name: str):
    # Suffixes are "_i32", "_f32" (4 chars) and "_u8" (3): two dict lookups, no loop.
    return _DTYPES.get(name[-4:]) or _DTYPES.get(name[-3:])


def array_dtype(name: str):
    """The dtype a field name announces, or None when it is not an array field."""
    dtypes = _dtypes(name)
    return None if dtypes is None else dtypes[0]


def decode_array(name: str, data: Any, length: int = -1) -> np.ndarray:
    """A ``*_i32``/``*_f32``/``*_u8`` bin field as a read-only numpy view (no copy, no loop).

    ``length`` (when >= 0) is the number of entries the frame promises, e.g. one per episode.
    """
    dtypes = _dtypes(name)
    if dtypes is None:
        raise ProtocolError(f"field {name!r} is not a typed-array field (*_i32, *_f32, *_u8)", field=name)
    wire, native = dtypes
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ProtocolError(f"field {name!r} must be msgpack bin, got {type(data).__name__}", field=name)
    if len(data) % wire.itemsize != 0:
        raise ProtocolError(f"field {name!r} holds {len(data)} bytes, not a multiple of {wire.itemsize}", field=name)
    array = np.frombuffer(data, dtype=wire)
    if length >= 0 and array.shape[0] != length:
        raise ProtocolError(f"field {name!r} has {array.shape[0]} entries, the frame has {length} episodes", field=name)
    # "<i4" on a little-endian machine is plain int32; normalise so users see native dtypes.
    return array if wire is native or array.dtype == native else array.astype(native)
