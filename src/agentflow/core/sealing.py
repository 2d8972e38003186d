"""Secrets at rest: AES-256-GCM sealing with a key from the environment (no I/O).

A sealed value is ``nonce (12 bytes) || ciphertext+tag``; the associated data binds it to
its row (e.g. ``workspace:workflow``), so a sealed value copied to another row does not open.
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Sequence

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from agentflow.core.errors import ConfigError

KEY_BYTES = 32


class SealBroken(Exception):
    """A sealed value did not open: wrong key, wrong row, or tampered bytes."""


def parse_sealing_key(text: str) -> bytes:
    """Decode a base64 (standard or URL-safe) 32-byte key.

    Raises:
        ConfigError: code ``secret_key_invalid``.
    """
    try:
        raw = base64.urlsafe_b64decode(text.strip().replace("+", "-").replace("/", "_") + "==")
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != KEY_BYTES:
        raise ConfigError(
            "secret_key_invalid",
            "AGENTFLOW_SECRET_KEY must be 32 random bytes in base64",
            solution="Generate one with: python -c"
            ' "import os,base64;print(base64.b64encode(os.urandom(32)).decode())"',
        )
    return raw


def new_sealing_key() -> bytes:
    """A fresh random key."""
    return os.urandom(KEY_BYTES)


def seal(key: bytes, plaintext: bytes, associated: bytes) -> bytes:
    """Encrypt and authenticate ``plaintext`` bound to ``associated``."""
    nonce = os.urandom(12)
    return nonce + AESGCM(key).encrypt(nonce, plaintext, associated)


def unseal_any(keys: Sequence[bytes], sealed: bytes, associated: bytes) -> bytes:
    """Decrypt a sealed value with the first of ``keys`` that opens it (the current key, then
    the previous ones while a key rotation is under way).

    Raises:
        SealBroken: none of the keys opens it.
    """
    for key in keys[:-1]:
        try:
            return unseal(key, sealed, associated)
        except SealBroken:
            continue
    return unseal(keys[-1], sealed, associated)


def unseal(key: bytes, sealed: bytes, associated: bytes) -> bytes:
    """Decrypt a sealed value.

    Raises:
        SealBroken: the key, the associated data or the bytes do not match.
    """
    try:
        return AESGCM(key).decrypt(sealed[:12], sealed[12:], associated)
    except (InvalidTag, ValueError) as exc:
        raise SealBroken("the sealed secret does not open with this key") from exc
