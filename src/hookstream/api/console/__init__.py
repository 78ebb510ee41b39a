"""The browser console: a tenant portal (signed, tenant-scoped links or an API key) and an
operator console, served by the control-plane app under ``/console``.

Server-rendered pages (Jinja2, autoescaped) with htmx vendored in ``static/`` for the
few live parts (an operation's progress, a delivery's attempts): no build step, no CDN,
no inline script. ``mount.mount`` attaches it to the API app; the modules split by role:
``csrf``, ``headers``, ``forms`` and ``paging`` are pure; ``session`` reads the cookie;
``pages``, ``actions``, ``operator`` and ``entry`` are the handlers, over the same use
cases as the JSON API (``hookstream.controlplane``; portal links and the signing key:
``hookstream.controlplane.portal``).
"""
