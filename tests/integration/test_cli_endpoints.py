"""``hookstream endpoints ...`` against the real API server: every endpoint operation, as
JSON and as a table; another tenant's endpoint is not found; bad input is refused with
the field and what to do."""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers import query
from tests.integration.cli_support import Served, served_fixture  # noqa: F401


def test_endpoint_lifecycle(served: Served) -> None:
    made = served.json("endpoints", "create", "--url", "https://hooks.example.com/x",
                       "--types", "invoice.*", "order.paid", "--rate-per-s", "3")
    assert made["secret"].startswith("whsec_") and made["tenant"] == "acme"
    assert made["event_types"] == ["invoice.*", "order.paid"] and made["rate_per_s"] == 3.0
    ep = made["id"]
    shown = served.run("endpoints", "show", ep)
    assert shown.code == 0 and f"id:                   {ep}" in shown.out
    assert "event types:          invoice.*,order.paid" in shown.out
    changed = served.json("endpoints", "update", ep, "--no-coalesce", "--burst", "7")
    assert (changed["coalesce"], changed["burst"], changed["config_version"]) == (False, 7, 2)
    assert served.json("endpoints", "pause", ep, "--until", "now+1h")["status"] == "paused"
    disabled = served.json("endpoints", "disable", ep, "--reason", "abuse")
    assert (disabled["status"], disabled["disabled_reason"]) == ("disabled", "abuse")
    assert served.json("endpoints", "enable", ep)["status"] == "active"
    rotated = served.run("endpoints", "rotate-secret", ep, "--overlap-s", "60")
    assert rotated.code == 0 and "secret:  whsec_" in rotated.out and "shown once" in rotated.out
    secrets = served.json("endpoints", "secrets", ep)["data"]
    assert [(s["version"], s["active"]) for s in secrets] == [(2, True), (1, True)]
    assert served.json("endpoints", "revoke-secret", ep, "1")["active"] is False
    health = served.json("endpoints", "health", ep)
    assert health["circuit"]["state"] == "closed" and health["pending"] == 0
    table = served.run("endpoints", "health", ep)
    assert "circuit:" in table.out and "closed" in table.out
    listed = served.run("endpoints", "list")
    assert listed.code == 0 and listed.out.splitlines()[0].split()[:3] == ["ID", "TENANT",
                                                                           "STATUS"]
    assert ep in listed.out
    deleted = served.run("endpoints", "delete", ep).out
    assert deleted.startswith(f"endpoint {ep} deleted; its deliveries are removed in the "
                              "background (follow it: hookstream operations wait ")
    assert "not found" in served.refused("endpoints", "show", ep)


def test_an_operator_names_the_tenant(served: Served) -> None:
    err = served.refused("endpoints", "create", "--url", "https://a.example.com/",
                         key="operator")
    assert "tenant: required when using an operator key" in err
    made = served.json("endpoints", "create", "--tenant", "globex", "--url",
                       "https://a.example.com/", key="operator")
    assert made["tenant"] == "globex"
    page = served.json("endpoints", "list", "--tenant", "globex", key="operator")
    assert [e["id"] for e in page["data"]] == [made["id"]] and page["next_cursor"] is None
    # acme's key does not see globex's endpoint, as if it did not exist
    for argv in (["show"], ["pause"], ["delete"], ["health"], ["replay", "--since", "now-1h"]):
        assert "(404 not_found)" in served.refused("endpoints", argv[0], made["id"], *argv[1:])
    assert served.json("endpoints", "list")["data"] == []


def test_pages_are_followed_up_to_the_limit(served: Served) -> None:
    ids = [served.json("endpoints", "create", "--url", f"https://h{i}.example.com/")["id"]
           for i in range(5)]
    page = served.json("endpoints", "list", "--limit", "3")
    assert [e["id"] for e in page["data"]] == ids[:3] and page["next_cursor"]
    rest = served.json("endpoints", "list", "--cursor", page["next_cursor"])
    assert [e["id"] for e in rest["data"]] == ids[3:] and rest["next_cursor"] is None
    table = served.run("endpoints", "list", "--limit", "2")
    assert len(table.out.splitlines()) == 3 and "(more endpoints: --cursor " in table.err


def test_import_keeps_the_good_ones(served: Served, tmp_path: Path) -> None:
    file = tmp_path / "endpoints.json"
    file.write_text(json.dumps([{"url": "https://good.example.com/"},
                                {"url": "https://10.0.0.1/"}]))
    result = served.run("endpoints", "import", str(file))
    assert result.code == 1  # one item was refused
    lines = result.out.splitlines()
    assert "201" in lines[1] and "whsec_" in lines[1]
    assert "400" in lines[2] and "10.0.0.1" in lines[2]
    assert query(served.db_url, "SELECT url FROM endpoints") == [("https://good.example.com/",)]
    missing = served.refused("endpoints", "import", str(tmp_path / "nope.json"), code=2)
    assert "cannot read" in missing


def test_a_development_url_says_which_setting_allows_it(served: Served) -> None:
    err = served.refused("endpoints", "create", "--url", "http://127.0.0.1:8000/hook")
    assert "scheme must be https" in err and "HOOKSTREAM_ALLOW_PRIVATE_TARGETS=true" in err
    err = served.refused("endpoints", "create", "--url", "https://169.254.169.254/")
    assert "cloud metadata" in err and "HOOKSTREAM_ALLOW_PRIVATE_TARGETS" in err
    err = served.refused("endpoints", "create", "--url", "ftp://example.com/")
    assert "HOOKSTREAM_ALLOW_PRIVATE_TARGETS" not in err  # no setting makes that one valid


def test_bad_command_lines_are_usage_errors(served: Served) -> None:
    for argv in (["endpoints", "show", "not-a-uuid"],
                 ["endpoints", "pause", "00000000-0000-0000-0000-000000000001", "--until",
                  "tomorrow"],
                 ["endpoints", "list", "--limit", "0"],
                 ["endpoints", "list", "--status", "sleeping"]):
        result = served.run(*argv)
        assert result.code == 2 and result.out == "", argv
        assert ": error: " in result.err.splitlines()[-1], result.err
    err = served.refused("endpoints", "update", "00000000-0000-0000-0000-000000000001", code=2)
    assert "nothing to change" in err
    assert "--since" in served.refused(
        "endpoints", "replay", "00000000-0000-0000-0000-000000000001", code=2)
