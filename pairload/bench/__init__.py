"""`pairload bench-loaders`: every loader and today's baselines side by side (`loaders`)."""
