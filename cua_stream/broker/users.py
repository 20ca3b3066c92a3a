"""The secured local broker's users: one SCRAM user per role (``cua_stream.bus.acl.ROLES``), each with a
generated password kept in ``<home>/secrets/<role>.password`` (0600), and the ``--add-scram`` arguments
that create them when the KRaft storage is formatted (in KRaft that is how the first users exist: no
client can authenticate to create them before).

The format tool is given each user's salted password (salt, iterations, SCRAM's ``Hi``), never the
password itself: a command line is readable by every user of the machine while it runs.
"""

from __future__ import annotations

import base64
import hashlib
import os
import secrets
from pathlib import Path

from cua_stream.bus.acl import ROLES

MECHANISM = "SCRAM-SHA-512"
ITERATIONS = 8192
"""SCRAM's PBKDF2 iterations (Kafka's minimum is 4096)."""


def password_file(home: Path, role: str) -> Path:
    return home / "secrets" / f"{role}.password"


def ensure_passwords(home: Path) -> dict[str, str]:
    """Each role's password (generated on first use, then read back), by role."""
    folder = home / "secrets"
    folder.mkdir(parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    out = {}
    for role in ROLES:
        path = password_file(home, role)
        if not path.exists():
            write_private(path, secrets.token_urlsafe(24) + "\n")
        out[role] = path.read_text().splitlines()[0]
    return out


def scram_arguments(passwords: dict[str, str]) -> list[str]:
    """``--add-scram`` arguments for ``kafka-storage format``, one per user, salted here."""
    args = []
    for role, password in passwords.items():
        salt = secrets.token_bytes(32)
        salted = hashlib.pbkdf2_hmac("sha512", password.encode(), salt, ITERATIONS)  # SCRAM's Hi()
        b64 = base64.b64encode
        args += [
            "--add-scram",
            f'{MECHANISM}=[name={role},iterations={ITERATIONS},salt="{b64(salt).decode()}",'
            f'saltedpassword="{b64(salted).decode()}"]',
        ]
    return args


def write_private(path: Path, text: str) -> None:
    """Write ``text`` readable by its owner only (created 0600, never briefly wider)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # a file that existed keeps its mode through O_CREAT
    with os.fdopen(fd, "w") as f:
        f.write(text)
