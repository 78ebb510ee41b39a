"""CSRF tokens: an HMAC of the session id, so every form of one session carries the same
token and nothing needs storing. Pure.

A cross-site page can make the browser send the session cookie (SameSite=Lax still
allows a top-level navigation) but cannot read a page to learn the token; a token of
another session, or of no session, does not match.
"""

from __future__ import annotations

import base64
import hashlib
import hmac

FIELD = "csrf"  # the hidden form field
HEADER = "X-CSRF-Token"  # or this header, for scripted requests
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def token_for(key: bytes, sid: str) -> str:
    mac = hmac.new(key, b"hookstream.console.csrf:" + sid.encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(mac).decode("ascii").rstrip("=")


def valid(key: bytes, sid: str, presented: str | None) -> bool:
    if not presented or len(presented) > 200:
        return False
    # constant time: a timing difference would let a page guess the token byte by byte
    return hmac.compare_digest(token_for(key, sid).encode(), presented.encode("utf-8",
                                                                              "replace"))


def cross_site(sec_fetch_site: str | None) -> bool:
    """The browser says the request comes from another site (``Sec-Fetch-Site``): refused
    before the token is even looked at. Absent (old browsers, scripts): the token decides."""
    return sec_fetch_site == "cross-site"
