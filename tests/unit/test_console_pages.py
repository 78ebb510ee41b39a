"""The console's templates and headers, without a server: customer text is escaped
everywhere, no template opts out of escaping or carries inline script or style (the CSP
would block it), and the headers say what the README promises."""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime
from importlib import resources

import pytest

from hookstream.api.console import headers
from hookstream.api.console.render import environment, render_html, static_files
from hookstream.api.console.session import Viewer
from hookstream.controlplane.tokens import Session

HOSTILE = '"><script>alert(1)</script><img src=x onerror=alert(2)>\'-alert(3)-\''
TEMPLATES = resources.files("hookstream.api.console") / "templates"


def template_sources() -> dict[str, str]:
    return {t.name: t.read_text("utf-8") for t in TEMPLATES.iterdir() if t.name.endswith(".html")}


@pytest.mark.parametrize("name", sorted(template_sources()))
def test_no_template_opts_out_of_escaping_or_inlines_code(name: str) -> None:
    src = template_sources()[name]
    assert "|safe" not in src.replace(" ", "") and "autoescape" not in src
    assert "Markup" not in src
    assert not re.search(r"<script(?![^>]*\bsrc=)", src), "inline script"
    assert not re.search(r"\son[a-z]+\s*=", src), "inline event handler"
    assert not re.search(r"\sstyle\s*=|<style", src), "inline style"
    assert "hx-on" not in src and "js:" not in src


def test_the_environment_escapes_every_template() -> None:
    env = environment()
    assert env.autoescape is True
    assert env.from_string("{{ x }}").render(x="<b>") == "&lt;b&gt;"


def _context(**extra: object) -> dict[str, object]:
    viewer = Viewer(Session("sid", 2**31, uuid.uuid4(), "acme", False, "key"))
    return {"viewer": viewer, "csrf_token": "tok", "csrf_field": "csrf", "done": None,
            "grafana_url": "", "path": "/console/endpoints", **extra}


def test_hostile_endpoint_and_attempt_text_is_escaped() -> None:
    now = datetime.now(UTC)
    endpoint_id, delivery_id, event_id = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    ep = {"id": endpoint_id, "url": "https://x.example.com/" + HOSTILE, "description": HOSTILE,
          "status": "active", "tenant": "acme", "event_types": ["*"], "rate_per_s": 1.0,
          "burst": 1, "max_in_flight": 1, "coalesce": True, "paused_until": None,
          "disabled_reason": HOSTILE}
    d = {"delivery_id": delivery_id, "event_id": event_id, "event_type": "a.b",
         "status": "failed", "attempts": 1, "last_error": HOSTILE, "created_at": now,
         "expires_at": now, "delivered_at": None, "endpoint_id": endpoint_id, "tenant": "acme"}
    attempt = {"attempt_no": 1, "started_at": now, "outcome": "failed", "status_code": 500,
               "latency_ms": 3.0, "error_class": HOSTILE, "response_excerpt": HOSTILE,
               "manual": False}
    event = {"payload": ('{"note": %s}' % ('"' + HOSTILE.replace('"', '\\"') + '"')).encode()}
    html = render_html("delivery.html", _context(
        d=d, ep=ep, attempts=[attempt], live=False, replay_refusal=HOSTILE, event=event,
        path="/console/deliveries/x"))
    assert "<script>alert" not in html and "<img src=x" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    # inside attributes the quotes are escaped too (the replay button's title)
    assert 'title="&#34;&gt;&lt;script&gt;' in html


def test_the_headers() -> None:
    h = headers.security_headers(())
    csp = h["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
    assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
    assert h["X-Frame-Options"] == "DENY" and h["Cache-Control"] == "no-store"
    assert h["Referrer-Policy"] == "no-referrer" and h["X-Content-Type-Options"] == "nosniff"
    framed = headers.security_headers(("https://app.example.com",), cache=True, https=True)
    assert "frame-ancestors https://app.example.com" in framed["Content-Security-Policy"]
    assert "X-Frame-Options" not in framed and "Cache-Control" not in framed
    assert "Strict-Transport-Security" in framed


def test_static_files_are_the_vendored_ones() -> None:
    files = static_files()
    assert {"htmx.min.js", "portal.js", "console.css"} <= set(files)
    assert files["htmx.min.js"].content_type == "text/javascript"
    assert b"htmx" in files["htmx.min.js"].body[:200]
