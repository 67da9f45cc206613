from jaxrl.cli import main

raise SystemExit(main())
