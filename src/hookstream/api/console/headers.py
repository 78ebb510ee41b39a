"""The security headers of every console response. Pure.

The policy allows only the console's own files: no inline script or style (so injected
markup cannot run even if escaping were ever missed), no eval, no plugins, forms posting
only to the console, and framing only by the configured origins.
"""

from __future__ import annotations

from collections.abc import Sequence


def content_security_policy(frame_ancestors: Sequence[str]) -> str:
    ancestors = " ".join(frame_ancestors) if frame_ancestors else "'none'"
    return "; ".join((
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self'",
        "connect-src 'self'",
        "form-action 'self'",
        "base-uri 'none'",
        f"frame-ancestors {ancestors}",
    ))


def security_headers(frame_ancestors: Sequence[str], *, cache: bool = False,
                     https: bool = False) -> dict[str, str]:
    headers = {
        "Content-Security-Policy": content_security_policy(frame_ancestors),
        "X-Content-Type-Options": "nosniff",
        # Pages carry ids and sometimes a secret shown once: nothing leaks through the
        # Referer of a link followed from them.
        "Referrer-Policy": "no-referrer",
        "Cross-Origin-Opener-Policy": "same-origin",
        "Permissions-Policy": "camera=(), microphone=(), geolocation=()",
    }
    if not frame_ancestors:
        headers["X-Frame-Options"] = "DENY"  # for browsers without frame-ancestors
    if not cache:
        headers["Cache-Control"] = "no-store"
    if https:
        headers["Strict-Transport-Security"] = "max-age=31536000"
    return headers
