"""`python -m pairload.workers FD`: serve tasks on the socket inherited as file descriptor FD."""

from .serve import main

raise SystemExit(main())
