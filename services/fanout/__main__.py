from hookstream.fanout.main import main

raise SystemExit(main())
