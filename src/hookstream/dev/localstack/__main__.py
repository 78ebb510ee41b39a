"""``python -m hookstream.dev.localstack up|down|status|env`` (see hookstream.dev.localstack)."""

from hookstream.dev.localstack import main

raise SystemExit(main())
