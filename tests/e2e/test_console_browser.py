"""The console in a real browser (Debian's chromium, driven by Playwright) against the
real stack: relay, fanout (serving the API and the console) and dispatcher as
processes, and a receiver that verifies every signature.

What is checked is what a person would see and do: a portal link shows one tenant and
nothing of another; a failed delivery shows its error and a press of Replay sends the
same webhook-id again; a bulk replay shows its progress and re-sends each delivery
once; a secret rotated in the page verifies at the receiver; hostile text in a response
and a description stays text; a state change without the CSRF token, or from another
site, is refused.
"""

from __future__ import annotations

import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import psycopg
import pytest
from playwright.sync_api import expect

from hookstream.controlplane import auth, tokens
from hookstream.dev.harness import Pipeline, free_port
from hookstream.dev.receiver import Behaviour, Receiver
from hookstream.io import queries
from hookstream.outbox import write_event
from tests.browser import Watched, browser, new_page, playwright
from tests.e2e.conftest import StartPipeline, add_endpoint, api_call
from tests.helpers import query, scalar, wait_until

pytestmark = pytest.mark.browser
__all__ = ["browser", "new_page", "playwright"]

HOSTILE = ('</code></td>"\'><script>alert("excerpt")</script>'
           '<img src=x onerror=alert(1) id=injected>\'"-alert(2)-"')
NewPage = Callable[[], Watched]

expect.set_options(timeout=30_000)


@dataclass
class Console:
    db_url: str
    port: int
    pipeline: Pipeline
    receiver: Receiver
    operator: str  # an operator API key
    keys: dict[str, str]  # tenant -> API key
    log_dir: Path

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def portal_link(self, tenant: str = "acme", **body: Any) -> dict[str, Any]:
        code, link = api_call(self.port, "POST", "/v1/portal-sessions", self.operator,
                              {"tenant": tenant, **body})
        assert code == 201, link
        return link  # type: ignore[no-any-return]

    def open_portal(self, watched: Watched, tenant: str = "acme", **body: Any) -> Watched:
        watched.page.goto(self.portal_link(tenant, **body)["url"])
        expect(watched.page).to_have_url(self.url("/console/endpoints"))
        return watched

    def sign_in(self, watched: Watched, key: str) -> Watched:
        page = watched.page
        page.goto(self.url("/console/login"))
        page.fill("#api_key", key)
        page.click("button[type=submit]")
        expect(page.locator("#who")).to_be_visible()
        return watched

    def endpoint(self, name: str, tenant: str = "acme", behaviour: Behaviour | None = None,
                 description: str = "") -> str:
        endpoint_id = add_endpoint(self.db_url, self.receiver, name, tenant,
                                   behaviour=behaviour)
        if description:
            query(self.db_url, "UPDATE endpoints SET description = %s WHERE id = %s"
                               " RETURNING id", (description, endpoint_id))
        return endpoint_id

    def emit(self, tenant: str = "acme", n: int = 1, payload: Any = None) -> list[str]:
        with psycopg.connect(self.db_url) as conn:
            return [str(write_event(conn, tenant=tenant, type="invoice.paid",
                                    payload=payload if payload is not None else {"n": i},
                                    object_id=f"inv_{i}", object_version=1))
                    for i in range(n)]

    def deliveries(self, endpoint_id: str, status: str | None = None) -> list[str]:
        rows = query(self.db_url, "SELECT delivery_id::text, status FROM deliveries"
                                  " WHERE endpoint_id = %s ORDER BY created_at", (endpoint_id,))
        return [d for d, s in rows if status is None or s == status]


def api_key(db_url: str, tenant: str | None) -> str:
    """A tenant (when named) and an API key of it, or an operator key, with the API's own
    queries. Synchronous: Playwright's sync API holds this thread's event loop."""
    q = queries.load("api")
    token = auth.new_token()
    with psycopg.connect(db_url) as conn:
        if tenant is not None:
            conn.execute(q["create_tenant"], {"id": tenant, "name": tenant.title()})
        conn.execute(q["create_api_key"], {"tenant": tenant, "name": "console-e2e",
                                           "prefix": auth.display_prefix(token),
                                           "sha": auth.hash_token(token)})
    return token


@pytest.fixture
def console(db_url: str, receiver: Receiver, start_pipeline: StartPipeline,
            log_dir: Path) -> Console:
    port = free_port()
    # One attempt: a failing delivery is dead (and replayable) at once. Batches of two:
    # a bulk replay of a handful of deliveries takes several rounds of progress.
    pipeline = start_pipeline(api_port=str(port), max_attempts="1",
                              api_operation_batch_size="2")
    keys = {t: api_key(db_url, t) for t in ("acme", "globex")}
    return Console(db_url, port, pipeline, receiver, api_key(db_url, None), keys, log_dir)


def assert_not_found(watched: Watched, url: str) -> None:
    response = watched.page.goto(url)
    assert response is not None and response.status == 404, url
    expect(watched.page.locator("#error-title")).to_have_text("Not found")


def test_a_portal_link_shows_its_tenant_and_nothing_of_another(
        console: Console, new_page: NewPage) -> None:
    acme_ep = console.endpoint("acme-1")
    globex_ep = console.endpoint("globex-1", "globex")
    (acme_event,) = console.emit("acme")
    (globex_event,) = console.emit("globex")
    wait_until(lambda: console.deliveries(acme_ep, "delivered")
               and console.deliveries(globex_ep, "delivered"), 60, message="deliveries")
    (globex_delivery,) = console.deliveries(globex_ep)
    (acme_delivery,) = console.deliveries(acme_ep)
    link = console.portal_link("acme")
    watched = new_page()
    page = watched.page
    page.goto(link["url"])
    expect(page).to_have_url(console.url("/console/endpoints"))  # token gone from the URL
    expect(page.locator("#who")).to_contain_text("tenant acme")
    expect(page.locator(f"tr[data-endpoint-id='{acme_ep}']")).to_be_visible()
    expect(page.locator(f"tr[data-endpoint-id='{globex_ep}']")).to_have_count(0)
    page.click(f"tr[data-endpoint-id='{acme_ep}'] a")
    expect(page.locator(f"tr[data-delivery-id='{acme_delivery}']")).to_be_visible()
    # globex's ids in acme's URLs: not found, exactly like ids that never existed
    for url in (f"/console/endpoints/{globex_ep}", f"/console/endpoints/{globex_ep}/secrets",
                f"/console/endpoints/{globex_ep}/edit",
                f"/console/deliveries?endpoint_id={globex_ep}",
                f"/console/events?endpoint_id={globex_ep}",
                f"/console/deliveries/{globex_delivery}", f"/console/events/{globex_event}",
                f"/console/endpoints/{uuid.uuid4()}", "/console/ops"):
        assert_not_found(watched, console.url(url))
    page.goto(console.url("/console/events"))
    expect(page.locator("#events")).to_contain_text(acme_event)
    expect(page.locator("#events")).not_to_contain_text(globex_event)
    # the token reached no log of the service that checked it
    logs = "".join(p.read_text(errors="replace") for p in console.log_dir.glob("*.log"))
    assert logs and link["token"] not in logs


def test_an_expired_or_tampered_portal_link_is_refused(
        console: Console, new_page: NewPage) -> None:
    console.endpoint("acme-1")
    good = console.portal_link()  # the console's key exists from the first link on
    key = bytes(scalar(console.db_url, "SELECT key FROM console_keys"))
    key_id = scalar(console.db_url, "SELECT id FROM api_keys WHERE tenant IS NULL")
    expired = tokens.sign_grant(key, tokens.Grant("acme", int(time.time()) - 1, key_id))
    body, _, signature = good["token"].rpartition(".")
    cases = {"expired": expired, "not valid": body + "." + signature[:-3] + "abc",
             # the payload of another tenant's link under acme's signature
             "not valid ": console.portal_link("globex")["token"].rpartition(".")[0] + "."
             + signature}
    for message, token in cases.items():
        watched = new_page()
        watched.page.goto(console.url(f"/console/portal#token={token}"))
        expect(watched.page.locator("#portal-error")).to_contain_text(message.strip())
        watched.page.goto(console.url("/console/endpoints"))
        expect(watched.page).to_have_url(console.url("/console/login"))


def test_replay_a_failed_delivery_after_the_receiver_is_fixed(
        console: Console, new_page: NewPage) -> None:
    ep = console.endpoint("flaky", behaviour=Behaviour(status=500, body=b"upstream broke"))
    console.emit()
    wait_until(lambda: console.deliveries(ep, "dead"), 60, message="the failed delivery")
    (delivery_id,) = console.deliveries(ep)
    watched = console.sign_in(new_page(), console.keys["acme"])
    page = watched.page
    row = page.locator(f"tr[data-endpoint-id='{ep}']")
    expect(row).to_contain_text("HTTP 500")
    row.locator("a").click()
    expect(page.locator("#last-error")).to_contain_text("HTTP 500")
    page.click(f"tr[data-delivery-id='{delivery_id}'] a")
    expect(page.locator("#webhook-id")).to_have_text(delivery_id)
    expect(page.locator("tr[data-attempt='1']")).to_contain_text("500")
    expect(page.locator("tr[data-attempt='1'] .excerpt")).to_have_text("upstream broke")
    expect(page.locator("#delivery-last-error")).to_contain_text("500")

    console.receiver.behaviour["flaky"] = Behaviour(status=200)
    page.click("#replay")
    expect(page.locator(".notice")).to_contain_text("Replay queued")
    # the attempts table refreshes itself (htmx) until the delivery is settled
    second = page.locator("tr[data-attempt='2']")
    expect(second).to_contain_text("delivered")
    expect(second).to_contain_text("replay")
    expect(page.locator("#delivery-live h2")).to_contain_text("delivered")
    arrivals = [a for a in console.receiver.arrivals if a.name == "flaky"]
    assert [a.webhook_id for a in arrivals] == [delivery_id, delivery_id]
    assert all(a.verified for a in arrivals) and arrivals[0].body == arrivals[1].body
    assert [a.answered for a in arrivals] == [500, 200]
    assert not watched.csp_violations(), watched.console_errors


def test_bulk_replay_since_a_time_shows_progress_and_resends_each_delivery_once(
        console: Console, new_page: NewPage) -> None:
    ep = console.endpoint("bulk")
    before = datetime.now(UTC) - timedelta(seconds=2)
    console.emit(n=5)
    wait_until(lambda: len(console.deliveries(ep, "delivered")) == 5, 60,
               message="five deliveries")
    first_ids = set(console.deliveries(ep))
    watched = console.open_portal(new_page())
    page = watched.page
    page.goto(console.url(f"/console/endpoints/{ep}"))
    page.fill("#replay-since", before.strftime("%Y-%m-%dT%H:%M:%S"))
    page.click("#bulk-replay-submit")
    expect(page).to_have_url(re.compile(r"/console/operations/[0-9a-f-]{36}$"))
    expect(page.locator("#operation-progress")).to_have_attribute("max", "5")
    # the progress part polls itself until the operation is done
    expect(page.locator("#operation-status")).to_contain_text("succeeded")
    expect(page.locator("#operation-counts")).to_have_text("5 of 5 processed, 5 re-sent")
    expect(page.locator("#operation-progress")).to_have_attribute("value", "5")
    wait_until(lambda: scalar(console.db_url, "SELECT count(*) FROM attempts a JOIN deliveries"
                              " d USING (delivery_id) WHERE d.endpoint_id = %s AND a.manual"
                              " AND a.outcome = 'delivered'", (ep,)) == 5, 60,
               message="five replayed attempts recorded")
    assert console.deliveries(ep, "delivered") and set(console.deliveries(ep)) == first_ids
    got: dict[str, int] = {}
    for a in console.receiver.arrivals:
        if a.name == "bulk" and a.verified:
            got[a.webhook_id] = got.get(a.webhook_id, 0) + 1
    assert got == dict.fromkeys(first_ids, 2)  # the original and one replay, each
    assert scalar(console.db_url, "SELECT count(*) FROM attempts") == 10
    page.goto(console.url(f"/console/endpoints/{ep}"))
    expect(page.locator("#operations")).to_contain_text("succeeded")


def test_a_secret_rotated_in_the_page_verifies_at_the_receiver(
        console: Console, new_page: NewPage) -> None:
    ep = console.endpoint("rotating")
    console.emit()
    wait_until(lambda: console.deliveries(ep, "delivered"), 60, message="first delivery")
    old = list(console.receiver.secrets["rotating"])
    watched = console.open_portal(new_page())
    page = watched.page
    page.goto(console.url(f"/console/endpoints/{ep}/secrets"))
    page.fill("#overlap", "0")
    page.click("#rotate")
    secret = page.locator("#new-secret").inner_text().strip()
    assert secret.startswith("whsec_") and secret not in old
    expect(page.locator("tr[data-version='2']")).to_contain_text("valid")
    expect(page.locator("tr[data-version='1']")).to_contain_text("expired")
    # shown once: the page itself holds it no more
    page.goto(console.url(f"/console/endpoints/{ep}/secrets"))
    expect(page.locator("#new-secret")).to_have_count(0)
    assert secret not in page.content()
    # the receiver now knows only the new secret, and verifies the next webhook with it
    console.receiver.secrets["rotating"] = [secret]
    (event_id,) = console.emit(payload={"after": "rotation"})
    wait_until(lambda: len(console.deliveries(ep, "delivered")) == 2, 60,
               message="the webhook after the rotation")
    after = [a for a in console.receiver.arrivals if a.name == "rotating"][-1]
    assert after.verified and after.answered == 200 and b"rotation" in after.body
    assert event_id


def test_hostile_text_in_a_response_and_a_description_stays_text(
        console: Console, new_page: NewPage) -> None:
    ep = console.endpoint("hostile", behaviour=Behaviour(status=500, body=HOSTILE.encode()),
                          description=HOSTILE)
    console.emit(payload={"note": HOSTILE})
    wait_until(lambda: console.deliveries(ep, "dead"), 60, message="the failed delivery")
    (delivery_id,) = console.deliveries(ep)
    event_id = scalar(console.db_url, "SELECT event_id::text FROM deliveries")
    watched = console.open_portal(new_page())
    page = watched.page
    for path, shows in (("/console/endpoints", ".description"),
                        (f"/console/endpoints/{ep}", "#endpoint-description"),
                        (f"/console/endpoints/{ep}/edit", "#description"),
                        (f"/console/deliveries/{delivery_id}", "code.excerpt"),
                        (f"/console/events/{event_id}", "#payload")):
        page.goto(console.url(path))
        target = page.locator(shows).first
        if shows == "#description":
            expect(target).to_have_value(HOSTILE)
        else:
            # the text itself is there, shown as text (JSON escapes its quotes)
            expect(target).to_contain_text("'><script>alert(")
            expect(target).to_contain_text("<img src=x onerror=alert(1) id=injected>")
        expect(page.locator("#injected")).to_have_count(0)
        expect(page.locator("img")).to_have_count(0)
        expect(page.locator("script:not([src])")).to_have_count(0)
        assert page.locator("script").count() == len(re.findall(
            r"<script src=\"/console/static/", page.content())), path
    assert watched.dialogs == []
    # the CSP never had to step in: nothing tried to run
    assert not watched.csp_violations(), watched.console_errors


class HostileSite:
    """Another site (``localhost`` is not the same site as ``127.0.0.1``) whose page
    frames the console and posts a form to it: what a phishing page would do."""

    def __init__(self, target: str, endpoint_id: str) -> None:
        page = (f'<!doctype html><title>elsewhere</title>'
                f'<form id="attack" method="post" action="{target}/console/endpoints/'
                f'{endpoint_id}/disable"><input name="reason" value="csrf">'
                f'<button id="go">win a prize</button></form>'
                f'<iframe id="framed" src="{target}/console/login"></iframe>').encode()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.end_headers()
                self.wfile.write(page)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://localhost:{self.server.server_address[1]}/"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def hostile_site(console: Console) -> Iterator[Callable[[str], HostileSite]]:
    made: list[HostileSite] = []

    def make(endpoint_id: str) -> HostileSite:
        made.append(HostileSite(console.url(""), endpoint_id))
        return made[-1]

    yield make
    for site in made:
        site.close()


def test_a_state_change_without_the_csrf_token_is_refused(
        console: Console, new_page: NewPage,
        hostile_site: Callable[[str], HostileSite]) -> None:
    ep = console.endpoint("guarded")
    watched = console.open_portal(new_page())
    page = watched.page
    page.goto(console.url(f"/console/endpoints/{ep}"))
    status = "SELECT status FROM endpoints WHERE id = %s"
    # a script on the page posting without the token
    code = page.evaluate("""async (url) => (await fetch(url, {method: "POST",
        body: new URLSearchParams({reason: "x"}), redirect: "manual"})).status""",
                         console.url(f"/console/endpoints/{ep}/disable"))
    assert code == 403
    # the form with its token field removed
    page.evaluate("document.querySelector(\"form[action$='/pause'] input[name=csrf]\")"
                  ".remove()")
    page.click("#pause")
    expect(page.locator("#error-message")).to_contain_text("security token is missing")
    assert scalar(console.db_url, status, (ep,)) == "active"
    # another site's form: the browser sends no session cookie with it (SameSite) and
    # says where it comes from (Sec-Fetch-Site); framing the console is refused (CSP)
    site = hostile_site(ep)
    with page.expect_console_message(lambda m: "frame-ancestors" in m.text):
        page.goto(site.url)
    page.click("#go")
    expect(page.locator("#error-message")).to_contain_text("Refused")
    assert scalar(console.db_url, status, (ep,)) == "active"
    # and with the token, from the console's own page, the same change goes through (the
    # other site's post signed nobody out)
    page.goto(console.url(f"/console/endpoints/{ep}"))
    expect(page.locator("#who")).to_contain_text("tenant acme")
    page.fill("#disable-reason", "by hand")
    page.click("#disable")
    expect(page.locator("#endpoint-status")).to_contain_text("disabled")
    assert scalar(console.db_url, status, (ep,)) == "disabled"
