"""`pairload bench-loaders`: every loader and today's baselines side by side (`loaders` runs it; `entries` is the
table of what is measured); `remote` measures one loader over HTTP (`httpserver`)."""
