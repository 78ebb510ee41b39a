"""The control plane's use cases, under every front door: the JSON API and the browser
console (``hookstream.api``, HTTP and HTML adapters) and the command line
(``hookstream.cli``) call these, and nothing here knows about HTTP.

By concern: ``endpoints`` (create, edit, pause, disable, enable, delete, health),
``secrets``, ``deliveries`` (and replaying one), ``replay`` (bulk replays and
recoveries), ``events``, ``tenants`` (tenants, API keys, who a key is), ``portal``
(portal links and console sessions), ``outbox`` (the quarantine), ``dead_letters`` (the
dead-letter topic) and ``fleet`` (the operator's overview). Each takes the
``context.ControlPlane`` (settings, pool, Kafka sink, background operations) or, for
tenants and keys, the caller's transaction.

Below them: ``validation``, ``auth``, ``rules`` and ``views`` are pure; ``errors`` is
the one error type (a status, a code, a message, a field); SQL runs only in the
``*store`` modules (named queries from ``hookstream/io/sql``); ``tasks`` is the one
Kafka edge; ``operations`` and ``deletion`` run bulk work in the background.
"""
