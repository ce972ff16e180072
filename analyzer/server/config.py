"""The server's settings: one class, from the command line and the environment."""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass

from base.errors import IotapeError

TOKEN_ENV = "IOTAPE_TOKEN"


@dataclass(frozen=True)
class Settings:
    db: str | None = None  # store URL; None: $IOTAPE_DB, else the default DuckDB file
    host: str = "127.0.0.1"
    port: int = 8000
    token: str | None = None  # bearer token every API request must carry, if set
    query_timeout_s: float = 30.0  # a query running longer is interrupted (503)
    row_cap: int = 1_000_000  # a query returning more rows is refused (503)
    prewarm: bool = False  # build every run's histograms in the background at start

    @classmethod
    def from_env(cls, **given) -> Settings:
        token = given.pop("token", None) or os.environ.get(TOKEN_ENV) or None
        return cls(token=token, **given)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind(s: Settings) -> None:
    """Anything but loopback is reachable from the network: it needs a token."""
    if not is_loopback(s.host) and not s.token:
        raise IotapeError(
            f"--host {s.host}: not a loopback address; set {TOKEN_ENV} to a secret "
            "that clients send as 'Authorization: Bearer <token>'"
        )
