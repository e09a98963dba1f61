#!/usr/bin/env python3
"""An independent implementation of docs/PROTOCOL.md, written from the document alone, checked
against its test vectors (section 11). Needs only the `cryptography` package.

    python3 protocol/tests/interop/check_vectors.py
"""
import hashlib
import hmac
import struct

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

ALPHABET = "abcdefghijkmnpqrstuvwxyz23456789"


def seq(start):
    return bytes((start + i) & 0xFF for i in range(32))


def x25519_pub(secret):
    return X25519PrivateKey.from_private_bytes(secret).public_key().public_bytes(
        Encoding.Raw, PublicFormat.Raw)


def dh(secret, public):
    return X25519PrivateKey.from_private_bytes(secret).exchange(
        X25519PublicKey.from_public_bytes(public))


def hostid(location, key):
    return hashlib.sha1(b"SFS-HOSTID-1\0" + struct.pack(">I", len(location))
                        + location.encode() + key).digest()


def base32(b):
    n = int.from_bytes(b, "big")
    return "".join(ALPHABET[(n >> (155 - 5 * i)) & 31] for i in range(32))


# ---- Noise NK, from the Noise specification ----

def hkdf2(ck, ikm):
    temp = hmac.new(ck, ikm, hashlib.sha256).digest()
    o1 = hmac.new(temp, b"\x01", hashlib.sha256).digest()
    o2 = hmac.new(temp, o1 + b"\x02", hashlib.sha256).digest()
    return o1, o2


def noise_nonce(n):
    return b"\0" * 4 + struct.pack("<Q", n)


class Symmetric:
    def __init__(self, name, prologue):
        self.h = name.ljust(32, b"\0") if len(name) <= 32 else hashlib.sha256(name).digest()
        self.ck = self.h
        self.k = None
        self.n = 0
        self.mix_hash(prologue)

    def mix_hash(self, data):
        self.h = hashlib.sha256(self.h + data).digest()

    def mix_key(self, ikm):
        self.ck, self.k = hkdf2(self.ck, ikm)
        self.n = 0

    def encrypt_and_hash(self, pt):
        ct = ChaCha20Poly1305(self.k).encrypt(noise_nonce(self.n), pt, self.h)
        self.n += 1
        self.mix_hash(ct)
        return ct

    def decrypt_and_hash(self, ct):
        pt = ChaCha20Poly1305(self.k).decrypt(noise_nonce(self.n), ct, self.h)
        self.n += 1
        self.mix_hash(ct)
        return pt

    def split(self):
        return hkdf2(self.ck, b"")


def frame(body):
    return struct.pack(">H", len(body)) + body


def main():
    # Section 11: server key and name.
    server_secret = seq(0x01)
    spub = x25519_pub(server_secret)
    assert spub.hex() == "07a37cbc142093c8b755dc1b10e86cb426374ad16aa853ed0bdfc0b2b86d1c7c"
    hid = hostid("golden.example%4004", spub)
    assert hid.hex() == "71838efd7653019b198259e7bff4d6427dc34755"
    assert "@golden.example," + base32(hid) == "@golden.example,qgb279mykna3ygncmhv597gyij86gt4x"

    # Handshake.
    s0_body = b"SFSK" + spub
    s0 = frame(s0_body)
    assert s0.hex() == "00245346534b07a37cbc142093c8b755dc1b10e86cb426374ad16aa853ed0bdfc0b2b86d1c7c"
    prologue = b"SFS-HANDSHAKE-1\0" + s0_body
    name = b"Noise_NK_25519_ChaChaPoly_SHA256"
    ce, se = seq(0x40), seq(0x80)
    max_payload = (1 << 20) + 4096

    # Client writes C1: pre-message s, then e, es, payload.
    c = Symmetric(name, prologue)
    c.mix_hash(spub)
    ce_pub = x25519_pub(ce)
    c.mix_hash(ce_pub)
    c.mix_key(dh(ce, spub))
    hello = struct.pack(">III", 1, 1, max_payload)
    c1 = frame(ce_pub + c.encrypt_and_hash(hello))
    assert c1.hex() == ("003c79a631eede1bf9c98f12032cdeadd0e7a079398fc786b88cc846ec89af85a51a0c"
                        "3b3bb775f70c8a658d5fc5752edfc688370c8b66d4c5a6168a1ff6"), c1.hex()

    # Server reads C1 and writes S1: e, ee, payload.
    s = Symmetric(name, prologue)
    s.mix_hash(spub)
    body = c1[2:]
    s.mix_hash(body[:32])
    s.mix_key(dh(server_secret, body[:32]))
    assert s.decrypt_and_hash(body[32:]) == hello
    se_pub = x25519_pub(se)
    s.mix_hash(se_pub)
    s.mix_key(dh(se, body[:32]))
    accept = struct.pack(">III", 0, 1, max_payload)
    s1 = frame(se_pub + s.encrypt_and_hash(accept))
    assert s1.hex() == ("003c493e82fc74464a59268817623d2053c5eb8e2cc4a988b4fee179ec6b010d531d0d"
                        "35b9ea47a7381795484433371c1db49a2d5e9da54d9f8dffe48fb1"), s1.hex()

    # Client reads S1.
    c.mix_hash(s1[2:34])
    c.mix_key(dh(ce, s1[2:34]))
    assert c.decrypt_and_hash(s1[34:]) == accept
    assert c.h == s.h
    assert c.h.hex() == "1cd5090bfd25c020d3c8d458f85c2aee7b52032cf985f83e1e57cdc4d6257bf0"
    k1, k2 = c.split()

    # Records.
    def seal(key, counter, payload):
        header = struct.pack(">I", len(payload))
        return header + ChaCha20Poly1305(key).encrypt(noise_nonce(counter), payload, header)

    req = struct.pack(">QII", 1, 0, 0)
    assert seal(k1, 0, req).hex() == \
        "000000107e113aa142e871d759d950d48a6fef76c2515805a0ad27d047e93d5b7365cdc8"
    rep = struct.pack(">IQII", 1, 1, 0, 0)
    assert seal(k2, 0, rep).hex() == \
        "00000014c1fb081eaceac229a46d8447641a07f7e6e47089f0f630fa5d85483cc64d5ed3bcff2d1d"
    assert seal(b"\x07" * 32, 0, b"hello").hex() == \
        "000000055fe145600fa268124eca8af793728effffbc40bbe8"
    assert seal(b"\x07" * 32, 1, b"").hex() == "0000000057461cb12f57e7b331185eed71e86765"

    # File handle.
    body = struct.pack(">IQQQ", 1, 0x801, 0x12345678, 42)
    fh = body + hmac.new(b"\x09" * 32, b"SFS-FH-1\0" + body, hashlib.sha1).digest()
    assert fh.hex() == ("0000000100000000000008010000000012345678000000000000002ac27bd1655725"
                        "124ef73bd124749a666b62c4865e")

    # Messages.
    name_xdr = struct.pack(">I", 9) + b"hello.txt" + b"\0" * 3
    lookup = struct.pack(">QII", 0x0102030405060708, 3, 3) + fh + name_xdr
    assert lookup.hex() == ("010203040506070800000003000000030000000100000000000008010000000012"
                            "345678000000000000002ac27bd1655725124ef73bd124749a666b62c4865e0000"
                            "000968656c6c6f2e747874000000")

    # Login.
    sid = bytes(range(0xA0, 0xC0))
    user = b"alice"
    stmt = b"SFS-LOGIN-1\0" + sid + hid + struct.pack(">QI", 1, len(user)) + user
    key = Ed25519PrivateKey.from_private_bytes(seq(0xC0))
    upub = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    assert upub.hex() == "dde3bccec7f3a66a1115f45d720f4dc135c3ae7c4e22dca38fdb1efd6a495ff8"
    sig = key.sign(stmt)
    assert sig.hex() == ("f5657070be96547212af7609a4ba18864e129146f7abf059f41fe26d0cf95e8c"
                         "013c2d8cc9159028c6329879f65391fba2efec04d7c06c027f6e57734b065202")
    print("all test vectors of docs/PROTOCOL.md reproduced")


if __name__ == "__main__":
    main()
