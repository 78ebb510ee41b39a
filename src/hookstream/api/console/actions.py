"""The portal's state changes (POST, each behind the CSRF check of ``mount``): the same
use cases as the JSON API (``hookstream.controlplane``), answered with a redirect to the
page that shows the result (303: a reload never repeats the action) — except a new
secret, which is shown once on the answer itself and stored nowhere to show again.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from hookstream.api.console import forms
from hookstream.api.console.context import api_of, form, page, see_other, viewer
from hookstream.controlplane import deliveries, endpoints, replay, secrets
from hookstream.controlplane import validation as v
from hookstream.controlplane.errors import ApiError
from hookstream.controlplane.tasks import now_utc


def _uuid(request: web.Request, name: str) -> Any:
    return v.uuid_value(request.match_info[name], name)


def _endpoint_page(endpoint_id: Any, done: str) -> web.HTTPSeeOther:
    return see_other(f"/console/endpoints/{endpoint_id}?done={done}")


async def create_endpoint(request: web.Request) -> web.Response:
    viewing = await viewer(request, write=True)
    data = await form(request)
    try:
        row, secret = await endpoints.create_endpoint(
            api_of(request), viewing.principal,
            forms.endpoint_body(data, with_tenant=viewing.operator))
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
    cp = api_of(request)
    try:
        await endpoints.update_endpoint(cp, endpoint_id, viewing.scope,
                                        forms.endpoint_body(data, with_tenant=False))
    except ApiError as exc:
        if exc.status != 400:
            raise
        ep = await endpoints.get_endpoint(cp, endpoint_id, viewing.scope)
        return page(request, "endpoint_form.html", 400, ep=ep,
                    values=forms.endpoint_values(data), error=exc.message)
    raise _endpoint_page(endpoint_id, "saved")


async def pause_endpoint(request: web.Request) -> web.Response:
    data = await form(request)
    until = forms.time_value(data.get("until"))
    body = {} if until is None else {"until": until}
    paused_until = v.pause(body, now=now_utc())
    viewing = await viewer(request, write=True)
    endpoint_id = _uuid(request, "endpoint_id")
    await endpoints.pause_endpoint(api_of(request), endpoint_id, viewing.scope, paused_until)
    raise _endpoint_page(endpoint_id, "paused")


async def disable_endpoint(request: web.Request) -> web.Response:
    data = await form(request)
    reason = (data.get("reason") or "").strip()
    checked = v.disable({"reason": reason} if reason else {})
    viewing = await viewer(request, write=True)
    endpoint_id = _uuid(request, "endpoint_id")
    await endpoints.disable_endpoint(api_of(request), endpoint_id, viewing.scope, checked)
    raise _endpoint_page(endpoint_id, "disabled")


async def enable_endpoint(request: web.Request) -> web.Response:
    viewing = await viewer(request, write=True)
    endpoint_id = _uuid(request, "endpoint_id")
    await endpoints.enable_endpoint(api_of(request), endpoint_id, viewing.scope)
    raise _endpoint_page(endpoint_id, "enabled")


async def replay_delivery(request: web.Request) -> web.Response:
    viewing = await viewer(request, write=True)
    delivery_id = _uuid(request, "delivery_id")
    done = await deliveries.replay_delivery(api_of(request), delivery_id, viewing.scope)
    raise see_other(f"/console/deliveries/{delivery_id}?done="
                    + ("replayed" if done.queued else "replayed-sweeper"))


async def _start_operation(request: web.Request, kind: str) -> web.Response:
    viewing = await viewer(request, write=True)
    endpoint_id = _uuid(request, "endpoint_id")
    data = await form(request)
    body = forms.replay_body(data, data.getall("statuses", []))
    op = await replay.start_endpoint_operation(api_of(request), viewing.scope, endpoint_id,
                                               kind, body, by_events=False)
    raise see_other(f"/console/operations/{op['id']}")


async def replay_endpoint(request: web.Request) -> web.Response:
    return await _start_operation(request, "replay")


async def recover_endpoint(request: web.Request) -> web.Response:
    return await _start_operation(request, "recover")


async def rotate_secret(request: web.Request) -> web.Response:
    viewing = await viewer(request, write=True)
    endpoint_id = _uuid(request, "endpoint_id")
    data = await form(request)
    cp = api_of(request)
    overlap_s = v.rotation(forms.overlap_s(data), default_overlap_s=cp.settings.secret_overlap_s)
    done = await secrets.rotate_secret(cp, endpoint_id, viewing.scope, overlap_s)
    # shown on this answer only (no-store): the page after it lists versions, not values
    return page(request, "secrets.html", 201, ep=done.endpoint, secrets=done.secrets,
                new_secret={"version": done.version, "secret": done.secret,
                            "overlap_s": overlap_s},
                default_overlap_s=cp.settings.secret_overlap_s)


async def revoke_secret(request: web.Request) -> web.Response:
    viewing = await viewer(request, write=True)
    endpoint_id = _uuid(request, "endpoint_id")
    version = v.secret_version(request.match_info["version"])
    await secrets.revoke_secret(api_of(request), endpoint_id, viewing.scope, version)
    raise see_other(f"/console/endpoints/{endpoint_id}/secrets?done=revoked")

