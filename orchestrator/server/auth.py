"""Users and bearer tokens. A token is 32 random bytes shown once; only its SHA-256 is stored
(a random token needs no slow hash: there is nothing to guess)."""

from __future__ import annotations

import hashlib
import re
import secrets
import threading

from sqlalchemy import Connection, delete, select
from sqlalchemy.exc import DBAPIError

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


def revoke_tokens(db: Database, user: str) -> int:
    """Delete every token of `user`: their requests are refused from the next one on, and their
    queued campaigns do not start (admission.py); how many there were."""
    with db.session() as s:
        return s.execute(delete(Token).where(Token.user == user)).rowcount


class Authenticator:
    """`user_for` on every request, so that a deleted token or user is refused at the next one:
    one indexed read, on a connection of its own kept open in autocommit (a pooled session's
    checkout, ping and reset would cost more than the read, on every poll of every client)."""

    def __init__(self, db: Database):
        self.db = db
        self._connection: Connection | None = None
        self._lock = threading.Lock()

    def __call__(self, token: str) -> User | None:
        query = (select(User.name, User.admin).join(Token, Token.user == User.name)
                 .where(Token.digest == digest(token)))
        with self._lock:
            try:
                row = self._connected().execute(query).first()
            except DBAPIError:  # the database went away: once more, on a new connection
                self.close()
                row = self._connected().execute(query).first()
        return None if row is None else User(name=row.name, admin=row.admin)

    def _connected(self) -> Connection:
        if self._connection is None:
            self._connection = self.db.engine.connect().execution_options(
                isolation_level="AUTOCOMMIT")
        return self._connection

    def close(self) -> None:
        if self._connection is not None:
            try:
                self._connection.close()
            except DBAPIError:
                pass
            self._connection = None
