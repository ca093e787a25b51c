"""Where the brokers are and how to log in: :class:`BrokerSettings`, parsed and checked.

Pure values (no network): a bad URL is one ValueError naming it, before any client is made.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterable

import attrs


def _join_urls(value: str | Iterable[str]) -> str:
    return value if isinstance(value, str) else ",".join(value)


def _check_url(url: str) -> urllib.parse.SplitResult:
    """One broker URL, parsed; a ValueError naming it when its scheme, host or port is wrong."""
    if not url:
        raise ValueError("an empty broker URL (two commas in a row, or one at the end?)")
    if any(c.isspace() for c in url):
        raise ValueError(f"{url!r} is not a broker URL (it holds a space; separate several URLs with commas)")
    if "://" not in url and ":" not in url:  # a bare word: a typo as often as a host name
        raise ValueError(f"{url!r} is not a broker URL (write mqtt://{url}:1883, or host:port)")
    u = urllib.parse.urlsplit(url if "://" in url else f"mqtt://{url}")
    if u.scheme not in ("mqtt", "mqtts", "tcp", "ssl"):
        raise ValueError(f"{url!r} is not a broker URL (scheme must be mqtt:// or mqtts://)")
    if not u.hostname:
        raise ValueError(f"{url!r} is not a broker URL (no host)")
    if u.netloc.endswith(":"):
        raise ValueError(f"{url!r} is not a broker URL (no port after the ':'; leave both out for the default)")
    try:
        port = u.port  # urllib checks the port only when asked
    except ValueError as e:
        if "out of range" not in str(e):  # not a number: urllib's words say so
            raise ValueError(f"{url!r} is not a broker URL ({e})") from None
        port = -1
    if port is not None and not 1 <= port <= 65535:  # port 0 would connect to the default port, 1883
        shown = u.netloc.rpartition(":")[2]
        raise ValueError(f"{url!r} is not a broker URL (port {shown}: a port is 1 to 65535)")
    return u


def _shown(url: str) -> str:
    """``url`` with its password, if any, left out (for logs)."""
    u = urllib.parse.urlsplit(url if "://" in url else f"mqtt://{url}")
    if u.password is None:
        return url
    return u._replace(netloc=u.netloc.replace(f":{u.password}@", ":***@", 1)).geturl()


@attrs.frozen
class BrokerSettings:
    """How to reach the broker. Credentials never travel in the run config.

    ``url`` is one broker URL or an ordered, comma-separated list of them (a list or tuple
    of URLs is joined): the client connects to the first that answers and fails over
    to the next when its broker is gone (:attr:`urls`, :meth:`at`)."""

    url: str = attrs.field(default="mqtt://127.0.0.1:1883", converter=_join_urls)
    username: str | None = None
    password: str | None = None
    #: CA bundle for TLS (mqtts://); None uses the system store
    tls_ca: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    #: skip hostname verification (self-signed test setups only)
    tls_insecure: bool = False
    #: "auto" tries MQTT 5 and falls back to 3.1.1; or "5" / "3.1.1"
    protocol: str = "auto"
    keepalive: int = 15
    #: how long the broker keeps a persistent session while we are away
    session_expiry_s: int = 3600

    @property
    def urls(self) -> tuple[str, ...]:
        """The broker URLs in failover order, each checked (scheme, host, port); a ValueError
        naming the first bad one, a repeated one, or a list mixing TLS and plain brokers."""
        urls = tuple(u.strip() for u in self.url.split(","))
        schemes = {_check_url(u).scheme in ("mqtts", "ssl") for u in urls}
        if len(schemes) > 1:
            raise ValueError(
                f"{self.url!r} mixes mqtts:// and mqtt:// brokers; a failover list is all TLS or all plain"
            )
        seen = set()
        for u in urls:
            if u in seen:
                raise ValueError(f"{u!r} is listed twice in {self.url!r}")
            seen.add(u)
        return urls

    def at(self, index: int) -> BrokerSettings:
        """These settings for the ``index``-th broker of the list alone."""
        urls = self.urls
        return self if len(urls) == 1 else attrs.evolve(self, url=urls[index])

    @property
    def shown(self) -> str:
        """The URL(s) for logs and messages, passwords left out."""
        return ",".join(_shown(u) for u in self.urls)

    @property
    def parsed(self) -> urllib.parse.SplitResult:
        """The first broker's URL, parsed (every URL of a list is checked)."""
        return _check_url(self.urls[0])

    @property
    def host(self) -> str:
        return self.parsed.hostname or "127.0.0.1"

    @property
    def port(self) -> int:
        return self.parsed.port or (8883 if self.tls else 1883)

    @property
    def tls(self) -> bool:
        return self.parsed.scheme in ("mqtts", "ssl") or self.tls_ca is not None

    @property
    def user(self) -> str | None:
        return self.username or (urllib.parse.unquote(self.parsed.username) if self.parsed.username else None)

    @property
    def secret(self) -> str | None:
        return self.password or (urllib.parse.unquote(self.parsed.password) if self.parsed.password else None)
