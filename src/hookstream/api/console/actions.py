"""The portal's state changes (POST, each behind the CSRF check of ``mount``): the same
validation, rules and queries as the JSON API's handlers, answered with a redirect to
the page that shows the result (303: a reload never repeats the action) — except a new
secret, which is shown once on the answer itself and stored nowhere to show again.

These mirror the orchestration of ``hookstream.api.app``'s handlers (lock, rule, write;
Kafka only after the commit) rather than call them, since those speak JSON.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from hookstream.api import auth, rules, store
from hookstream.api import validation as v
from hookstream.api.app import start_endpoint_operation
from hookstream.api.console import forms
from hookstream.api.console.context import api_of, form, page, see_other, viewer
from hookstream.api.errors import ApiError
from hookstream.api.tasks import now_utc, replay_tasks


def _uuid(request: web.Request, name: str) -> Any:
    return v.uuid_value(request.match_info[name], name)


def _endpoint_page(endpoint_id: Any, done: str) -> web.HTTPSeeOther:
    return see_other(f"/console/endpoints/{endpoint_id}?done={done}")


async def create_endpoint(request: web.Request) -> web.Response:
    viewing = await viewer(request, write=True)
    data = await form(request)
    api = api_of(request)
    try:
        spec = v.endpoint_create(forms.endpoint_body(data, with_tenant=viewing.operator),
                                 allow_insecure=api.settings.allow_private_targets)
        tenant = auth.acting_tenant(viewing.principal, spec.tenant)
        async with api.conn() as conn:
            await store.require_tenant(conn, tenant)
            row, secret = await store.create_endpoint(conn, tenant, spec, api.settings.secret_keys)
    except ApiError as exc:
        if exc.status != 400:
            raise
        return page(request, "endpoint_form.html", 400, ep=None,
                    values=forms.endpoint_values(data), error=exc.message)
    return page(request, "endpoint_created.html", 201, ep=row, secret=secret)


async def update_endpoint(request: web.Request) -> web.Response:
    viewing = await viewer(request, write=True)
    endpoint_id = _uuid(request, "endpoint_id")
    data = await form(request)
    api = api_of(request)
    try:
        changes = v.endpoint_patch(forms.endpoint_body(data, with_tenant=False),
                                   allow_insecure=api.settings.allow_private_targets)
        async with api.conn() as conn:
            await store.update_endpoint(conn, endpoint_id, viewing.scope, changes)
    except ApiError as exc:
        if exc.status != 400:
            raise
        async with api.conn() as conn:
            ep = await store.get_endpoint(conn, endpoint_id, viewing.scope)
        return page(request, "endpoint_form.html", 400, ep=ep,
                    values=forms.endpoint_values(data), error=exc.message)
    raise _endpoint_page(endpoint_id, "saved")


async def _transition(request: web.Request, action: str, **columns: Any) -> web.Response:
    viewing = await viewer(request, write=True)
    endpoint_id = _uuid(request, "endpoint_id")
    async with api_of(request).conn() as conn:
        ep = await store.get_endpoint(conn, endpoint_id, viewing.scope, lock=True)
        status = rules.next_status(ep["status"], action)
        await store.set_endpoint_status(conn, endpoint_id, status, **columns)
    raise _endpoint_page(endpoint_id, {"pause": "paused", "disable": "disabled",
                                       "enable": "enabled"}[action])


async def pause_endpoint(request: web.Request) -> web.Response:
    data = await form(request)
    until = forms.time_value(data.get("until"))
    body = {} if until is None else {"until": until}
    return await _transition(request, "pause", paused_until=v.pause(body, now=now_utc()))


async def disable_endpoint(request: web.Request) -> web.Response:
    data = await form(request)
    reason = (data.get("reason") or "").strip()
    return await _transition(request, "disable",
                             disabled_reason=v.disable({"reason": reason} if reason else {}))


async def enable_endpoint(request: web.Request) -> web.Response:
    return await _transition(request, "enable")


async def replay_delivery(request: web.Request) -> web.Response:
    viewing = await viewer(request, write=True)
    delivery_id = _uuid(request, "delivery_id")
    api = api_of(request)
    async with api.conn() as conn:
        row = await store.lock_delivery_for_replay(conn, delivery_id, viewing.scope)
        if (refusal := rules.replay_refusal(row["status"], row["endpoint_status"])) is not None:
            raise refusal
        marked = await store.mark_pending(conn, [delivery_id], v.REPLAYABLE)
    # committed: only now the task goes to Kafka (hookstream.api.tasks)
    api.metrics.replays.labels("single").inc(len(marked))
    queued = await api.sink.offer(replay_tasks(marked, now_utc()))
    raise see_other(f"/console/deliveries/{delivery_id}?done="
                    + ("replayed" if queued else "replayed-sweeper"))


async def _start_operation(request: web.Request, kind: str) -> web.Response:
    viewing = await viewer(request, write=True)
    endpoint_id = _uuid(request, "endpoint_id")
    data = await form(request)
    api = api_of(request)
    body = forms.replay_body(data, data.getall("statuses", []))
    op = await start_endpoint_operation(api, viewing.scope, endpoint_id, kind, body,
                                        by_events=False)
    raise see_other(f"/console/operations/{op['id']}")


async def replay_endpoint(request: web.Request) -> web.Response:
    return await _start_operation(request, "replay")


async def recover_endpoint(request: web.Request) -> web.Response:
    return await _start_operation(request, "recover")


async def rotate_secret(request: web.Request) -> web.Response:
    viewing = await viewer(request, write=True)
    endpoint_id = _uuid(request, "endpoint_id")
    data = await form(request)
    api = api_of(request)
    overlap_s = v.rotation(forms.overlap_s(data), default_overlap_s=api.settings.secret_overlap_s)
    async with api.conn() as conn:
        ep = await store.get_endpoint(conn, endpoint_id, viewing.scope, lock=True)
        row, secret = await store.rotate_secret(conn, ep["id"], overlap_s,
                                                api.settings.secret_keys)
        every = await store.list_secrets(conn, ep["id"])
    # shown on this answer only (no-store): the page after it lists versions, not values
    return page(request, "secrets.html", 201, ep=ep, secrets=every,
                new_secret={"version": row["version"], "secret": secret,
                            "overlap_s": overlap_s},
                default_overlap_s=api.settings.secret_overlap_s)


async def revoke_secret(request: web.Request) -> web.Response:
    viewing = await viewer(request, write=True)
    endpoint_id = _uuid(request, "endpoint_id")
    version = v.secret_version(request.match_info["version"])
    async with api_of(request).conn() as conn:
        ep = await store.get_endpoint(conn, endpoint_id, viewing.scope, lock=True)
        await store.revoke_secret(conn, ep["id"], version)
    raise see_other(f"/console/endpoints/{endpoint_id}/secrets?done=revoked")
