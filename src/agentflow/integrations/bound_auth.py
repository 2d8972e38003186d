"""Credentials bound to an origin: headers and query parameters the guarded transport adds to a
request's hops to that origin only.

A stored credential travels in the request's extensions (``CREDENTIAL_EXTENSION``), not in its
headers or URL, and :class:`~agentflow.integrations.guarded_http.GuardedTransport` adds it to
each hop whose scheme, host and port are the ones it was given for. So:

* a redirect to another host, or from https down to http, never carries it (httpx itself only
  drops ``Authorization`` on such redirects, not an API key header or query parameter);
* httpx never sees it: not in its log lines (which print URLs), not in ``response.request``,
  not in the messages of its exceptions.
"""

from __future__ import annotations

from collections.abc import Mapping

import httpx

from agentflow.core.frozen import frozen

CREDENTIAL_EXTENSION = "agentflow.credential"
_DEFAULT_PORTS = {"http": 80, "https": 443}


def _origin(url: httpx.URL) -> tuple[str, str, int | None]:
    return url.scheme, url.host, url.port or _DEFAULT_PORTS.get(url.scheme)


@frozen
class BoundAuth:
    """Headers and query parameters for the hops of a request to one origin.

    Attributes:
        origin: scheme, host and port.
        headers: set on each hop to the origin, replacing headers of the same name.
        query: merged into the query of each hop to the origin.
    """

    origin: tuple[str, str, int | None]
    headers: tuple[tuple[str, str], ...]
    query: tuple[tuple[str, str], ...]

    @classmethod
    def for_url(cls, url: httpx.URL, headers: Mapping[str, str], query: Mapping[str, str]) -> BoundAuth:
        """Bound to ``url``'s origin."""
        return cls(_origin(url), tuple(headers.items()), tuple(query.items()))

    def applies_to(self, url: httpx.URL) -> bool:
        """Whether a hop to ``url`` gets the credential."""
        return _origin(url) == self.origin

    def apply(self, url: httpx.URL, headers: httpx.Headers) -> tuple[httpx.URL, httpx.Headers]:
        """``url`` and ``headers`` with the credential added."""
        if self.query:
            url = url.copy_merge_params(dict(self.query))
        if self.headers:
            headers = headers.copy()
            for name, value in self.headers:
                headers[name] = value
        return url, headers
