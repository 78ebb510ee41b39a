from hookstream.dispatcher.main import main

raise SystemExit(main())
