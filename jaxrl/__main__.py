from jaxrl.workflow.cli import main

raise SystemExit(main())
