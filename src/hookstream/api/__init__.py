"""The control plane over HTTP: a JSON API and the browser console, served from the
fanout process (``server``). Thin adapters over ``hookstream.controlplane``: a handler
parses the request, calls a use case and shapes the answer.

``app`` assembles it (only ``server`` imports it); ``routes`` holds the JSON routes, one
module per resource; ``access`` checks the bearer key; ``problems`` maps whatever a
handler raised to a status and message, once, for the JSON ``middleware`` and the
console alike; ``resources`` opens the control plane with the app.
"""
