"""The control plane: an HTTP API (served from the fanout process) and operator CLI.

``app`` wires the routes; ``validation``, ``auth`` and ``rules`` are pure; ``store``
is the database boundary (``sql/api.sql``); ``tasks`` the Kafka one; ``operations``
runs bulk replays in the background; ``server`` runs it all on its own thread.
"""
