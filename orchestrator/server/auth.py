"""Users and bearer tokens. A token is 32 random bytes shown once; only its SHA-256 is stored
(a random token needs no slow hash: there is nothing to guess)."""

from __future__ import annotations

import hashlib
import re
import secrets
import threading
import time

from sqlalchemy import select

from orchestrator.common.errors import UserError
from orchestrator.server.db import Database, Token, User

USER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> tuple[str, str]:
    """A fresh token and the digest to store."""
    token = secrets.token_urlsafe(32)
    return token, digest(token)


def check_user_name(name: str) -> str:
    if not USER_NAME.match(name):
        raise UserError(f"--user: {name!r} is not a user name; use letters, digits, '.', '_' "
                        "or '-' (at most 64)")
    return name


def create_token(db: Database, user: str, admin: bool = False) -> str:
    """Create (or update) `user` and give it a new token; returns the token, shown once."""
    check_user_name(user)
    token, token_digest = new_token()
    with db.session() as s:
        row = s.get(User, user)
        if row is None:
            s.add(User(name=user, admin=admin))
        elif admin:
            row.admin = True
        s.add(Token(digest=token_digest, user=user))
    return token


def user_for(db: Database, token: str) -> User | None:
    """The user a bearer token belongs to; None for an unknown token."""
    with db.session() as s:
        user = s.scalar(select(User).join(Token, Token.user == User.name)
                        .where(Token.digest == digest(token)))
        if user is not None:
            s.expunge(user)
        return user


class Authenticator:
    """`user_for` with each answer kept for `ttl_s`: every poll of every client is
    authenticated, and one lookup a few seconds is enough (a token is never edited, only
    created)."""

    def __init__(self, db: Database, ttl_s: float = 5.0):
        self.db = db
        self.ttl_s = ttl_s
        self._known: dict[str, tuple[float, User]] = {}
        self._lock = threading.Lock()

    def __call__(self, token: str) -> User | None:
        key = digest(token)
        now = time.monotonic()
        with self._lock:
            hit = self._known.get(key)
        if hit and now - hit[0] < self.ttl_s:
            return hit[1]
        user = user_for(self.db, token)
        if user is not None:
            with self._lock:
                self._known[key] = (now, user)
        return user
