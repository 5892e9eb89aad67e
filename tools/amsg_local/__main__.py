"""``python -m amsg_local local ...`` (same as the ``amsg`` console script)."""

from amsg_local.cli import main

raise SystemExit(main())
