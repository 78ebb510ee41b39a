from hookstream.relay.main import main

raise SystemExit(main())
