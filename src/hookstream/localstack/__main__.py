"""``python -m hookstream.localstack up|down|status|env`` (see hookstream.localstack)."""

from hookstream.localstack import main

raise SystemExit(main())
