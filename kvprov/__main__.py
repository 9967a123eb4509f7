from kvprov.cli import main

raise SystemExit(main())
