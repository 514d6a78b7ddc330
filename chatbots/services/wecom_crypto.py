"""WeCom's callback encryption ("加解密方案"), the scheme its WXBizMsgCrypt samples implement.

- The signature is the hex SHA-1 of token, timestamp, nonce and the ciphertext, sorted as strings
  and joined without a separator.
- The key is the base64-decoded EncodingAESKey (43 characters, plus one "=") : 32 bytes, AES-256;
  the IV is the key's first 16 bytes; CBC with PKCS#7 padding to 32-byte blocks (not AES's 16).
- The plaintext is 16 random bytes, the message's length as 4 network-order bytes, the message,
  then the receiver id (the corp id for a self-built app's callback), which must match.
"""

import base64
import binascii
import hashlib
import hmac
import os
import struct

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

BLOCK = 32


class CryptoError(ValueError):
    """The ciphertext, its padding or its receiver id is not what the scheme produces."""


def signature(token: str, timestamp: str, nonce: str, encrypted: str) -> str:
    return hashlib.sha1("".join(sorted([token, timestamp, nonce, encrypted])).encode()).hexdigest()


def signature_matches(expected: str, *, token: str, timestamp: str, nonce: str, encrypted: str) -> bool:
    return hmac.compare_digest(expected.encode(), signature(token, timestamp, nonce, encrypted).encode())


def _key(encoding_aes_key: str) -> bytes:
    if len(encoding_aes_key) != 43:
        raise CryptoError("EncodingAESKey must be 43 characters")
    try:
        key = base64.b64decode(encoding_aes_key + "=", validate=True)
    except binascii.Error as error:
        raise CryptoError("EncodingAESKey is not base64") from error
    return key


def decrypt(encrypted: str, *, encoding_aes_key: str, receive_id: str) -> bytes:
    """The message inside `encrypted`, checked to be addressed to `receive_id`."""
    key = _key(encoding_aes_key)
    try:
        data = base64.b64decode(encrypted, validate=True)
    except binascii.Error as error:
        raise CryptoError("ciphertext is not base64") from error
    if not data or len(data) % 16:
        raise CryptoError("ciphertext is not whole AES blocks")
    decryptor = Cipher(algorithms.AES(key), modes.CBC(key[:16])).decryptor()
    padded = decryptor.update(data) + decryptor.finalize()
    pad = padded[-1]
    if not 1 <= pad <= BLOCK or padded[-pad:] != bytes([pad]) * pad:
        raise CryptoError("bad padding")
    plain = padded[:-pad]
    if len(plain) < 20:
        raise CryptoError("plaintext too short")
    (length,) = struct.unpack(">I", plain[16:20])
    message, rest = plain[20 : 20 + length], plain[20 + length :]
    if len(message) != length or not hmac.compare_digest(rest, receive_id.encode()):
        raise CryptoError("receiver id does not match")
    return message


def encrypt(message: bytes, *, encoding_aes_key: str, receive_id: str, random: bytes | None = None) -> str:
    """The scheme's ciphertext of `message` (answers encrypted passively, and tests that record a
    request as WeCom sends it)."""
    key = _key(encoding_aes_key)
    plain = (random or os.urandom(16)) + struct.pack(">I", len(message)) + message + receive_id.encode()
    pad = BLOCK - len(plain) % BLOCK
    encryptor = Cipher(algorithms.AES(key), modes.CBC(key[:16])).encryptor()
    return base64.b64encode(encryptor.update(plain + bytes([pad]) * pad) + encryptor.finalize()).decode()
