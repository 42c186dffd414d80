"""`python -m pairload.workers CONN_FD TASKS_FD`: serve the loader on its own connection and the shared task socket,
both inherited as file descriptors."""

from .serve import main

raise SystemExit(main())
